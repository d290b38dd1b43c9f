"""A quiet SparkSession for the pipeline: local mode by default, any cluster by `--master`.

Started the public way (SparkSession.builder), with Spark's own logging configured by log4j2.properties. Three
lines no logging configuration reaches: the JVM's warning about the incubator module Spark's launcher always
adds, and the two Spark prints when started as PySpark's shell. The JVM is given a pipe as its standard error
while it starts, and everything it writes there is passed on but those lines.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlparse

LOG4J = Path(__file__).with_name("log4j2.properties")
# Printed whatever the log configuration says: by the JVM (Spark's launcher adds --add-modules=jdk.incubator.vector)
# and by Spark's Logging, which takes PySpark's JVM for an interactive shell.
_BANNER = tuple(line.encode() for line in ("WARNING: Using incubator modules", "Setting default log level to",
                                           "To adjust logging level use"))


class SparkUnavailable(RuntimeError):
    """Spark could not start: no Java runtime, the master cannot be reached, or it has no worker to run on."""


def defaults(master: str, ui: bool) -> dict[str, str]:
    """The settings ackscope runs Spark with; `--conf` overrides any of them."""
    conf = {
        "spark.app.name": "ackscope-pipeline",
        "spark.master": master,
        "spark.ui.enabled": "true" if ui else "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        # Standard Parquet timestamps (UTC-adjusted microseconds), not Spark's legacy INT96, so that pandas,
        # pyarrow and the dashboard read the reports as they read the event log.
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
        # Windowed outputs are partitioned by date: a rerun replaces only the dates it covers.
        "spark.sql.sources.partitionOverwriteMode": "dynamic",
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={LOG4J.as_uri()}",
    }
    if master.startswith("local"):
        # Spark's default of 200 shuffle partitions is for clusters; on one machine it is mostly overhead.
        conf["spark.sql.shuffle.partitions"] = "8"
        conf["spark.driver.memory"] = "2g"
    return conf


def start(master: str = "local[2]", ui: bool = False, conf: Mapping[str, str] | None = None,
          executor_wait_s: float = 60.0):
    """Start (or join) the process's SparkSession; SparkUnavailable, in one line, where it cannot run."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:  # one JVM per process: the suite's session, joined by the command run in-process
        return active
    if not shutil.which("java") and not _java_home():
        raise SparkUnavailable("the pipeline needs a Java runtime (17 or newer) and none was found: "
                               "install openjdk-17-jre-headless or set JAVA_HOME")
    settings = {**defaults(master, ui), **(conf or {})}
    if "spark.pyspark.python" in settings:
        # Spark's setting for the executors' Python reaches them only through the driver's environment when the
        # driver is this process (PySpark reads PYSPARK_PYTHON as it starts the context).
        os.environ["PYSPARK_PYTHON"] = settings["spark.pyspark.python"]
    elif master.startswith("local"):
        # Python tasks (the footer checks) run in this interpreter, beside the pyarrow it has.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if master.startswith("spark://"):
        _reachable(master)
    builder = SparkSession.builder
    for key, value in settings.items():
        builder = builder.config(key, value)
    try:
        with _jvm_stderr_filtered():
            session = builder.getOrCreate()
    except Exception as e:  # PySpark raises several types here; all mean the same to the user
        raise SparkUnavailable(f"Spark did not start ({master}): {first_line(e)}") from None
    if not master.startswith("local"):
        _await_executor(session, master, executor_wait_s)
    return session


def _reachable(master: str) -> None:
    """A standalone master that does not answer fails at once, not after Spark's three 20-second retries."""
    for url in master[len("spark://"):].split(","):  # spark://a:7077,b:7077 lists standby masters
        parsed = urlparse(f"spark://{url}")
        try:
            socket.create_connection((parsed.hostname, parsed.port or 7077), timeout=5).close()
            return
        except OSError as e:
            problem = e.strerror or str(e) or type(e).__name__
    raise SparkUnavailable(f"cannot reach the Spark master at {master}: {problem}")


def _await_executor(session, master: str, wait_s: float) -> None:
    """A master without a free worker accepts the application and never runs it, and executors without pyarrow
    fail every footer check: one task, run first, says which instead of a hang or a stack trace."""
    def executor_python(_):  # nested, so that it travels by value: the executors need not have ackscope
        import pyarrow  # noqa: F401 - what the footer checks need there
        return True

    context = session.sparkContext
    answer: list = []

    def run() -> None:
        # A job group is the thread's own (PySpark pins a JVM thread to each Python thread): set it here.
        context.setJobGroup("ackscope-executor-check", "an executor can run the pipeline's Python")
        try:
            answer.append(context.parallelize([0], 1).map(executor_python).collect()[0])
        except Exception as e:  # noqa: BLE001 - whatever failed (or the session stopped under it) is the answer
            answer.append(e)
    worker = threading.Thread(target=run, daemon=True, name="executor-check")
    worker.start()
    worker.join(wait_s)
    result = answer[0] if answer else None  # read once: cancelling the job makes the thread answer too
    if result is True:
        return
    context.cancelJobGroup("ackscope-executor-check")
    session.stop()
    if result is None:
        raise SparkUnavailable(f"the Spark master at {master} gave this run no executor within {wait_s:g} s: it "
                               "has no alive worker with the cores and memory asked for (spark.executor.memory, "
                               "spark.executor.cores)")
    if "No module named 'pyarrow'" in str(result):
        raise SparkUnavailable("the executors' Python has no pyarrow (install it there, or point "
                               "spark.pyspark.python at a Python that has it)")
    raise SparkUnavailable(f"an executor could not run Python: {_python_error(result)}")


def _python_error(e: BaseException) -> str:
    """The Python exception's own line from a failed task's report (its last 'Error:' line), else its first."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    found = [line for line in lines if re.match(r"^[A-Za-z_.]+(Error|Exception): ", line)]
    return found[-1] if found else first_line(e)


class _jvm_stderr_filtered:
    """While the JVM starts, file descriptor 2 is a pipe: the JVM inherits it as its standard error for good, and
    a thread passes on all it writes but the banner; this process's own stderr is restored once it has started."""

    def __enter__(self):
        sys.stderr.flush()
        self.saved = os.dup(2)
        read, write = os.pipe()
        threading.Thread(target=_pass_on, args=(read, self.saved), daemon=True, name="spark-stderr").start()
        os.dup2(write, 2)
        os.close(write)
        return self

    def __exit__(self, *exc):
        sys.stderr.flush()
        os.dup2(self.saved, 2)
        return False


def _pass_on(read: int, target: int) -> None:
    with os.fdopen(read, "rb") as lines:
        for line in lines:
            if not line.startswith(_BANNER):
                os.write(target, line)


def _java_home() -> str | None:
    home = os.environ.get("JAVA_HOME")
    return home if home and Path(home, "bin", "java").exists() else None


def first_line(e: BaseException) -> str:
    """An error's first non-blank line, for a one-line message: a Java exception's own message where Spark's JVM
    raised it (py4j's text around it is a stack trace), else Python's."""
    from py4j.protocol import Py4JJavaError
    text = str(e.java_exception.getMessage()) if isinstance(e, Py4JJavaError) else str(e)
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else type(e).__name__
