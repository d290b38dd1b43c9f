"""A private RabbitMQ node for the demo, the tests and the benchmarks: its life (start, stop, kill -9, pause,
rabbitmqctl).

It runs Debian's `rabbitmq-server` with its own node name, free ports (ports.py), data directory, Erlang cookie
and feature-flags file (node_files.py), so it never touches a node that already runs on the default ports. The
machine's own package is one release; the others of the suite's matrix run from Debian roots through chroot
(rabbitmq_release.py).
"""

from __future__ import annotations

import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import requests

from .node_files import PLUGINS, NodeConf, lay_out, node_env
from .ports import Ports
from .rabbitmq_release import (
    RABBITMQ_SBIN,
    LocalBrokerError,
    Release,
    ensure_installed,
    mount_kernel_filesystems,
    root_user,
)

PORT_ATTEMPTS = 3  # first starts on fresh ports, where another process took one (PortTaken)

# The broker's own default account; RabbitMQ lets it log in from loopback only.
ADMIN_USER = "guest"
ADMIN_PASSWORD = "guest"


class LocalBroker:
    """One RabbitMQ node under `base_dir`, started and stopped by this process."""

    def __init__(self, base_dir: Path | None = None, name: str = "ackscope", stats_interval_ms: int = 500,
                 statistics: bool = True, plugins: tuple[str, ...] = PLUGINS, cookie: str | None = None,
                 net_ticktime: int | None = None, release: Release | None = None, config: tuple[str, ...] = ()):
        """The settings are NodeConf'. `release`: the RabbitMQ to run (the machine's own package by default).
        `cookie`: the Erlang cookie it shares with the nodes of its cluster (by default one of its own)."""
        self.release = release or Release.host()
        self.root = self.release.root
        if base_dir is None:
            # The node runs as the rabbitmq user, which must be able to reach its files: a private
            # 0700 temp dir (pytest's, for one) would not do. A root's node sees only what is inside it.
            base_dir = Path(tempfile.mkdtemp(prefix=f"{name}-broker-", dir=self.root / "tmp" if self.root else None))
            base_dir.chmod(0o755)
        self.base_dir = Path(base_dir)
        self.ports = Ports.free()
        self.nodename = f"{name}-{self.ports.amqp}@localhost"
        self.settings = NodeConf(stats_interval_ms, statistics, plugins, net_ticktime, config)
        self.cookie = cookie or secrets.token_hex(16).upper()
        self._process: subprocess.Popen | None = None
        self._printed_from = 0
        self._user = "rabbitmq" if os.geteuid() == 0 else None
        if self.root is not None and self._user is None:
            raise LocalBrokerError("a node from a Debian root is started through chroot, which needs root")

    # -- addresses -------------------------------------------------------------------------------------
    @property
    def management_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.management}"

    @property
    def prometheus_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.prometheus}"

    @property
    def log_file(self) -> Path:
        """The node's log file (its level: `log.file.level`, warning unless its config says otherwise)."""
        return self.base_dir / "log" / f"{self.nodename}.log"

    def amqp_url(self, vhost: str = "/", user: str = ADMIN_USER, password: str = ADMIN_PASSWORD) -> str:
        quoted = requests.utils.quote(vhost, safe="")
        return f"amqp://{user}:{password}@127.0.0.1:{self.ports.amqp}/{quoted}"

    # -- lifecycle -------------------------------------------------------------------------------------
    def start(self, timeout: float = 120.0) -> None:
        """Start the node (first time: lay out its directories) and wait until its HTTP API answers. A first start
        whose port another process took between the choice and the node's listen (the kernel's free port given
        to an outgoing connection meanwhile: seen on a loaded machine) starts again on other free ports."""
        ensure_installed(self.root)
        if self.root is not None:
            mount_kernel_filesystems(self.root)
        first = not (self.base_dir / "rabbitmq.conf").exists()
        for attempt in range(1, PORT_ATTEMPTS + 1):
            if first:
                self._lay_out()
            with open(self.base_dir / "log" / "console.log", "ab") as log:
                self._printed_from = log.tell()  # what this start prints, after what earlier ones did
                self._process = subprocess.Popen(
                    self._command("rabbitmq-server"),
                    env=self._env(), cwd=self.base_dir, stdout=log, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL, user=self._run_as, start_new_session=True,
                )
            try:
                self._wait_ready(timeout)
                return
            except PortTaken:
                self._reap(30)
                if not first or attempt == PORT_ATTEMPTS:
                    raise
                self.ports = Ports.free()

    def stop(self, timeout: float = 60.0) -> None:
        """Stop the node gracefully (SIGTERM to the VM), killing it if it does not stop in time."""
        pid = self.beam_pid()
        if pid:
            _signal(pid, signal.SIGTERM)
        self._reap(timeout)

    def kill(self) -> None:
        """kill -9 the Erlang VM: a crash, with no chance to fsync or close cleanly."""
        pid = self.beam_pid()
        if pid:
            _signal(pid, signal.SIGKILL)
        self._reap(30)

    def pause(self) -> None:
        """SIGSTOP the Erlang VM: to its peers, a node that stopped answering (as behind a broken network)."""
        pid = self.beam_pid()
        if pid:
            _signal(pid, signal.SIGSTOP)

    def resume(self) -> None:
        pid = self.beam_pid()
        if pid:
            _signal(pid, signal.SIGCONT)

    def restart(self, timeout: float = 120.0) -> None:
        self.stop()
        self.start(timeout)

    def alive(self) -> bool:
        """Whether the node's Erlang VM runs (it may still be starting, or paused)."""
        pid = self.beam_pid()
        return bool(pid) and _alive(pid)

    def ctl(self, *args: str, timeout: float = 60.0) -> str:
        """Run rabbitmqctl against this node and return its output."""
        done = subprocess.run(
            self._command("rabbitmqctl", "-n", self.nodename, *args),
            env=self._env(), cwd=self.base_dir, capture_output=True, text=True, timeout=timeout,
            user=self._run_as,
        )
        if done.returncode != 0:
            raise LocalBrokerError(f"rabbitmqctl {' '.join(args)}: {done.stderr.strip() or done.stdout.strip()}")
        return done.stdout

    def cli_command(self) -> list[str]:
        """rabbitmqctl beside this node, with its Erlang cookie (in the node's HOME), as a sidecar runs it: a
        command line for --cli."""
        return ["env", f"HOME={self._inside(self.base_dir) / 'home'}", *self._command("rabbitmqctl"), "-n",
                self.nodename]

    def api(self, method: str, path: str, **kwargs) -> requests.Response:
        """Call this node's management API as the administrator (for test setup, not for ackscope)."""
        r = requests.request(method, self.management_url + "/api" + path,
                             auth=(ADMIN_USER, ADMIN_PASSWORD), timeout=30, **kwargs)
        r.raise_for_status()
        return r

    def remove(self) -> None:
        shutil.rmtree(self.base_dir, ignore_errors=True)

    # -- internals -------------------------------------------------------------------------------------
    @property
    def _run_as(self) -> str | None:
        """The user Popen switches to: the node's, on the machine's own package; chroot switches for a root's."""
        return None if self.root is not None else self._user

    def _command(self, tool: str, *args: str) -> list[str]:
        path = str(RABBITMQ_SBIN / tool)
        if self.root is None:
            return [path, *args]
        entry = root_user(self.root, self._user)
        return ["chroot", f"--userspec={entry[0]}:{entry[1]}", str(self.root), path, *args]

    def _inside(self, path: Path) -> Path:
        """`path` as the node sees it: under its root, the part below the root."""
        return path if self.root is None else Path("/") / path.resolve().relative_to(self.root.resolve())

    def _lay_out(self) -> None:
        owner = None
        if self._user:
            for parent in self.base_dir.resolve().parents:
                if not parent.stat().st_mode & 0o001:
                    raise LocalBrokerError(f"{parent} is not searchable by others; the {self._user} user "
                                           f"running the node could not reach {self.base_dir}")
            if self.root is not None:
                owner = root_user(self.root, self._user)
            else:
                entry = pwd.getpwnam(self._user)
                owner = entry.pw_uid, entry.pw_gid
        lay_out(self.base_dir, self.ports, self.settings, self.cookie, owner)

    def _env(self) -> dict[str, str]:
        return node_env(self._inside(self.base_dir), self.nodename, self.ports, in_root=self.root is not None)

    def beam_pid(self) -> int | None:
        try:
            return int((self.base_dir / "beam.pid").read_text().strip())
        except (OSError, ValueError):
            return None

    def _wait_ready(self, timeout: float) -> None:
        """Wait until both the HTTP API (management, or else the Prometheus plugin) and the AMQP listener
        answer: the HTTP API comes up during boot, a moment before the node accepts AMQP connections."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process and self._process.poll() is not None:
                with open(self.base_dir / "log" / "console.log", "rb") as log:
                    log.seek(self._printed_from)
                    said = boot_failure(log.read().decode(errors="replace"))
                error = PortTaken if said and HELD in said else LocalBrokerError
                raise error(f"node {self.nodename} exited while starting" + (f": {said}" if said else "")
                            + f"; see {self.base_dir}/log")
            if self._http_answers() and self._amqp_listens():
                return
            time.sleep(0.3)
        raise LocalBrokerError(f"node {self.nodename} did not answer on its HTTP port and AMQP port "
                               f"{self.ports.amqp} in {timeout:.0f}s")

    def _http_answers(self) -> bool:
        url = self.management_url + "/api/overview" if "rabbitmq_management" in self.settings.plugins else \
            self.prometheus_url + "/metrics"
        try:
            return requests.get(url, auth=(ADMIN_USER, ADMIN_PASSWORD), timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def _amqp_listens(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.ports.amqp), timeout=2):
                return True
        except OSError:
            return False

    def _reap(self, timeout: float) -> None:
        pid = self.beam_pid()
        deadline = time.monotonic() + timeout
        while pid and _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if pid and _alive(pid):
            _signal(pid, signal.SIGKILL)
            while _alive(pid):
                time.sleep(0.1)
        if self._process:
            try:
                self._process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self._process.pid, signal.SIGKILL)
                self._process.wait()
            self._process = None
        (self.base_dir / "beam.pid").unlink(missing_ok=True)


_LOGGED = r"^\d{4}-\d\d-\d\d \S+ \[(%s)\] <[\d.]+>"  # a log line's head: its time, level and process
_LOG_PREFIX = re.compile(_LOGGED % r"\w+")
_LOG_ERROR = re.compile(_LOGGED % "error" + "(.*)$")


class PortTaken(LocalBrokerError):
    """The node could not listen on one of its ports: another process holds it."""


HELD = "is held by another process"  # in what boot_failure says of a port taken: the start may try other ports


def boot_failure(console: str) -> str | None:
    """Why a node's boot failed, in one line, from what this start printed to its console: a port another
    process holds (a listener's, or the Erlang distribution's); else the first error it logged before it failed (a
    setting it does not know, say) and its "Error during startup" term; None when it printed neither. Cut at 300
    characters."""
    if "eaddrinuse" in console:  # a listener's, or the Erlang distribution's, which prints no startup error
        listener = re.search(r'could_not_start_listener,\s*"?([\d.:]+)"?,\s*(\d+)', console)
        where = f" {listener.group(1)}:{listener.group(2)}" if listener else ""
        return f"a port it was given{where} {HELD} (eaddrinuse)"
    # RabbitMQ's prelaunch checks the distribution's port first, and finds it taken by a process that is no node.
    dist = re.search(r"dist_port_already_used,\s*(\d+)", console)
    if dist:
        return f"its Erlang distribution port {dist.group(1)} {HELD} (dist_port_already_used)"
    before, found, rest = console.partition("Error during startup:")
    logged = (m.group(2).strip() for line in before.splitlines() if (m := _LOG_ERROR.match(line)))
    first = next(filter(None, logged), None)
    term = []
    for line in rest.splitlines():
        line = _LOG_PREFIX.sub("", line).strip()  # printed to the console as it is also logged, prefixed
        if not line:
            break  # the term ends with a blank line
        term.append(line)
    said = " ".join(filter(None, [first, f"({' '.join(term)})" if first and term else " ".join(term)]))
    if not said:
        return None
    return said if len(said) <= 300 else said[:297] + "..."


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); its state in /proc says it is gone.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
