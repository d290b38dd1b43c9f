"""Real clients as processes of their own (tests/clients: Celery, aio-pika, amqplib, the Java client), each
given its broker's URL in its environment, never on its command line."""

from __future__ import annotations

import os
import selectors
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

CLIENTS = Path(__file__).resolve().parent / "clients"
NODE_CLIENT = CLIENTS / "node" / "client.js"
JAVA_CLASSPATH = ":".join(f"/usr/share/java/{jar}" for jar in ("amqp-client.jar", "slf4j-api.jar", "slf4j-nop.jar"))


def tool(name: str, package: str = "amqp-tools") -> str:
    """A client program's path; fail (never skip) saying what to install."""
    path = shutil.which(name)
    assert path, f"{name} is not installed: apt-get install {package} (scripts/setup.sh --test does)"
    return path


class Clients:
    """Client processes, each given the vhost's URL in its environment (never on its command line),
    stopped with SIGTERM when the `with` block ends; a process that exits early fails the test with its stderr."""

    def __init__(self, url: str, workdir: Path):
        self.env = {**os.environ, "AMQP_URL": url, "PYTHONPATH": str(CLIENTS)}
        self.workdir = workdir
        self.running: list[tuple[list[str], subprocess.Popen]] = []

    def start(self, *argv: str, ready: bool = True, env: dict | None = None) -> subprocess.Popen:
        """Start one; with `ready`, wait until it prints "ready" (its connection and channels are up)."""
        with (self.workdir / f"{len(self.running)}.err").open("w") as stderr:  # the child keeps its own copy
            process = subprocess.Popen(list(argv), cwd=CLIENTS, env={**self.env, **(env or {})}, text=True,
                                       stdout=subprocess.PIPE, stderr=stderr, start_new_session=True)
        self.running.append((list(argv), process))
        if ready:
            self._await_ready(list(argv), process)
        return process

    def await_ready(self, process: subprocess.Popen) -> None:
        """Wait until a client started with ready=False prints "ready" (clients that take long to start, a JVM
        compiling its source, start together and are awaited after)."""
        argv = next(argv for argv, p in self.running if p is process)
        self._await_ready(argv, process)

    def _await_ready(self, argv: list[str], process: subprocess.Popen, timeout: float = 60.0) -> None:
        with selectors.DefaultSelector() as sel:
            sel.register(process.stdout, selectors.EVENT_READ)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if sel.select(timeout=0.5) and process.stdout.readline().strip() == "ready":
                    return
                self.check()
        pytest.fail(f"{' '.join(argv)} did not get ready in {timeout}s")

    def celery_worker(self, mode: str = "defaults", *options: str) -> subprocess.Popen:
        """A Celery worker of tests/clients/celery_app.py (kombu, py-amqp), configured by `mode`."""
        return self.start(sys.executable, "-m", "celery", "-A", "celery_app", "worker", "--pool=solo",
                          "--loglevel=WARNING", *options, ready=False, env={"CELERY_MODE": mode})

    def amqplib(self, mode: str, queue: str, ready: bool = True) -> subprocess.Popen:
        """Node's amqplib (tests/clients/node/client.js) doing `mode` on `queue`."""
        return self.start(shutil.which("node") or "node", str(NODE_CLIENT), mode, queue, ready=ready)

    def java_client(self, mode: str, queue: str, ready: bool = True, env: dict | None = None) -> subprocess.Popen:
        """The Java client (tests/clients/java/Client.java, run from source) doing `mode` on `queue`."""
        return self.start(tool("java", "openjdk-17-jdk-headless"), "-cp", JAVA_CLASSPATH,
                          str(CLIENTS / "java" / "Client.java"), mode, queue, ready=ready, env=env)

    def run(self, *argv: str, env: dict | None = None) -> str:
        """Run one to completion (a producer); what it printed."""
        result = subprocess.run(list(argv), cwd=CLIENTS, env={**self.env, **(env or {})}, capture_output=True,
                                text=True, timeout=120)
        assert result.returncode == 0, f"{' '.join(argv)}: {result.stderr[-2000:]}"
        return result.stdout

    def check(self) -> None:
        for i, (argv, process) in enumerate(self.running):
            if process.poll() is not None:
                err = (self.workdir / f"{i}.err").read_text()[-2000:]
                pytest.fail(f"{' '.join(argv)} exited with {process.returncode}: {err}")

    def __enter__(self) -> Clients:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        for _argv, process in self.running:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for _argv, process in self.running:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
