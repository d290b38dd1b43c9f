"""A quiet SparkSession for the pipeline: local mode by default, any cluster by `--master`.

Spark's JVM writes a few banner lines to stderr before its logging is configured; ackscope starts the JVM
itself so it can drop exactly those lines and pass everything else (real errors) through.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path

LOG4J = Path(__file__).with_name("log4j2.properties")
# Printed by the JVM launcher or Spark's shell support whatever the log configuration says.
_BANNER = ("WARNING: Using incubator modules", "Setting default log level to", "To adjust logging level use")


class SparkUnavailable(RuntimeError):
    """Spark could not start: no Java runtime, or the master cannot be reached."""


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


def start(master: str = "local[2]", ui: bool = False, conf: Mapping[str, str] | None = None):
    """Start (or join) the process's SparkSession."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway
    from pyspark.sql import SparkSession

    if SparkContext._active_spark_context is not None:  # noqa: SLF001 - one JVM per process
        return SparkSession.builder.getOrCreate()
    if not shutil.which("java") and not _java_home():
        raise SparkUnavailable("the pipeline needs a Java runtime (17 or newer) and none was found: "
                               "install openjdk-17-jre-headless or set JAVA_HOME")
    if master.startswith("local"):
        # Python tasks (the footer checks) run in this interpreter, beside the pyarrow it has.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark_conf = SparkConf()
    for key, value in {**defaults(master, ui), **(conf or {})}.items():
        spark_conf.set(key, value)
    try:
        gateway = launch_gateway(spark_conf, popen_kwargs={"stderr": subprocess.PIPE, "text": True,
                                                           "errors": "replace"})
        threading.Thread(target=_pass_stderr, args=(gateway.proc.stderr,), daemon=True,
                         name="spark-stderr").start()
        context = SparkContext(conf=spark_conf, gateway=gateway)
    except Exception as e:  # PySpark raises several types here; all mean the same to the user
        raise SparkUnavailable(f"Spark did not start ({master}): {_first_line(e)}") from None
    return SparkSession(context)


def _pass_stderr(stream) -> None:
    for line in stream:
        if not line.startswith(_BANNER):
            sys.stderr.write(line)


def _java_home() -> str | None:
    home = os.environ.get("JAVA_HOME")
    return home if home and Path(home, "bin", "java").exists() else None


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__
