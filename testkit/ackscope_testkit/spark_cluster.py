"""A Spark standalone cluster on this machine, from the project's own PySpark: a master and workers, each a JVM
of its own (spark-class, as Spark's sbin scripts start them), on free ports, with their own work and log
directories. For the tests and the docs' recipe: `ackscope pipeline --master spark://…` run against it does its
work in the workers' executors, as on a cluster of machines."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import requests

from ackscope.workloads.ports import free_port


class SparkClusterError(RuntimeError):
    pass


def spark_home() -> Path:
    """The Spark that PySpark carries (bin/spark-class, jars/)."""
    import pyspark
    return Path(pyspark.__file__).parent


@dataclass
class Worker:
    process: subprocess.Popen
    work_dir: Path
    web_port: int


@dataclass
class StandaloneCluster:
    """`with StandaloneCluster(base, workers=2) as cluster:` … `cluster.master_url`."""

    base: Path
    workers: int = 2
    cores: int = 1
    memory: str = "1g"
    started: list[Worker] = field(default_factory=list)

    def __post_init__(self):
        self.port, self.web_port = free_port(), free_port()
        self.master_url = f"spark://127.0.0.1:{self.port}"
        self.master: subprocess.Popen | None = None

    def __enter__(self) -> StandaloneCluster:
        try:
            self.master = self._spark_class("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                            "--port", str(self.port), "--webui-port", str(self.web_port))
            self._wait(lambda s: s.get("status") == "ALIVE", "the master to be alive")
            for i in range(self.workers):
                self.add_worker(i)
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def add_worker(self, i: int) -> Worker:
        work = self.base / f"worker-{i}"
        work.mkdir(parents=True, exist_ok=True)
        web = free_port()
        process = self._spark_class(f"worker-{i}", "org.apache.spark.deploy.worker.Worker", self.master_url,
                                    "--host", "127.0.0.1", "--cores", str(self.cores), "--memory", self.memory,
                                    "--work-dir", str(work), "--webui-port", str(web))
        worker = Worker(process, work, web)
        self.started.append(worker)
        self._wait(lambda s: any(w.get("webuiaddress", "").endswith(f":{web}") for w in self.alive(s)),
                   f"worker {i} to register")
        return worker

    def state(self) -> dict:
        """The master's own account (its web UI's /json): workers, running and completed applications."""
        return requests.get(f"http://127.0.0.1:{self.web_port}/json/", timeout=5).json()

    @staticmethod
    def alive(state: dict) -> list[dict]:
        return [w for w in state.get("workers", []) if w.get("state") == "ALIVE"]

    def kill_worker(self, worker: Worker) -> None:
        """SIGKILL the worker's JVM, as a machine lost would; its executors notice and end."""
        worker.process.send_signal(signal.SIGKILL)
        worker.process.wait(10)

    def executor_logs(self) -> list[Path]:
        """The stderr files the workers' executors wrote: work/<app-id>/<executor-id>/stderr."""
        return sorted(p for w in self.started for p in w.work_dir.glob("app-*/*/stderr"))

    def stop(self) -> None:
        for p in [w.process for w in self.started] + ([self.master] if self.master else []):
            if p.poll() is None:
                p.terminate()
        for p in [w.process for w in self.started] + ([self.master] if self.master else []):
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)

    def _spark_class(self, name: str, main: str, *args: str) -> subprocess.Popen:
        logs = self.base / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "SPARK_HOME": str(spark_home()), "SPARK_LOG_DIR": str(logs),
               # One JVM per daemon, each small: the machine runs the driver and the executors beside them.
               "SPARK_DAEMON_MEMORY": "512m",
               # Short-lived daemons on a shared CPU: C1 alone and the serial collector (as tests/spark-conf
               # gives the drivers and executors).
               "SPARK_DAEMON_JAVA_OPTS": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}
        with open(logs / f"{name}.log", "ab") as log:
            return subprocess.Popen([str(spark_home() / "bin" / "spark-class"), main, *args], env=env,
                                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)

    def _wait(self, ready, what: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        last: object = None
        while time.monotonic() < deadline:
            if self.master and self.master.poll() is not None:
                raise SparkClusterError(f"the Spark master exited ({self.master.returncode}) waiting for {what}: "
                                        f"see {self.base / 'logs' / 'master.log'}")
            try:
                if ready(self.state()):
                    return
            except (requests.RequestException, ValueError) as e:
                last = e
            time.sleep(0.2)
        raise SparkClusterError(f"timed out after {timeout:.0f} s waiting for {what} ({last})")
