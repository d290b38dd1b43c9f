"""`ackscope pipeline`: its options, and running the pipeline with one line per stage and no traceback."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import Any

from ackscope.core import config
from ackscope.core.config import ConfigError, Option
from ackscope.core.durations import parse_duration, point_in_time
from ackscope.pipeline.run import NoInput, PipelineConfig, Progress, execute
from ackscope.pipeline.session import first_line


def window_seconds(v: Any) -> int:
    """A window is a whole number of seconds: Spark's windows are aligned to them."""
    seconds = parse_duration(v)
    if seconds < 1 or seconds != int(seconds):
        raise ValueError(f"must be a whole number of seconds, such as 30s, 1m or 6h, not {v!r}")
    return int(seconds)


OPTIONS = (
    Option("data_dir", None, str, "read DIR/events/ (probe events) and DIR/snapshots/ (exporter history); "
           "any Hadoop-compatible URI"),
    Option("out", None, str, "write the reports and summary.json under OUT; any Hadoop-compatible URI"),
    Option("master", "local[2]", str, "Spark master: local[N] on this machine, or a cluster's URL"),
    Option("window", "1m", window_seconds, "width of the time windows of the windowed reports"),
    Option("since", None, point_in_time, "only events from this time (ISO 8601, UTC unless stated, or e.g. 6h "
           "for six hours ago)"),
    Option("until", None, point_in_time, "only events before this time (same forms as --since)"),
    Option("loss_deadline", 120.0, config.positive_float, "seconds a confirmed message may take to be delivered "
           "before the audit calls it lost"),
    Option("executor_wait", 60.0, config.positive_float, "seconds a cluster may take to give the run its first "
           "executor before the run gives up (a master without a free worker never does)"),
    Option("incremental", False, config.boolean, "read only the event files no earlier run read, keeping what the "
           "reports need of the others under OUT/_state", switch=True),
    Option("rebuild", False, config.boolean, "with --incremental: drop the state under OUT/_state and read every "
           "file again", switch=True),
    Option("spark_ui", False, config.boolean, "keep Spark's web UI on while the pipeline runs", switch=True),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    config.add_arguments(parser, OPTIONS)
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark setting, e.g. spark.executor.memory=8g (repeatable)")


def load(args: argparse.Namespace, environ: Mapping[str, str]) -> PipelineConfig:
    v = config.resolve(OPTIONS, args, environ, {})
    for required in ("data_dir", "out"):
        if not v[required]:
            raise ConfigError(f"--{required.replace('_', '-')} is required")
    if v["rebuild"] and not v["incremental"]:
        raise ConfigError("--rebuild starts an incremental state over: give --incremental too")
    if v["incremental"] and (v["since"] or v["until"]):
        raise ConfigError("--incremental reads the whole history: --since and --until are for full runs")
    if v["since"] and v["until"] and v["since"] >= v["until"]:
        raise ConfigError("--since must be before --until")
    conf = []
    for item in args.conf or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--conf {item!r}: expected KEY=VALUE")
        conf.append((key.strip(), value))
    return PipelineConfig(v["data_dir"], v["out"], v["master"], v["window"], v["since"], v["until"],
                          v["loss_deadline"], bool(v["spark_ui"]), tuple(conf), v["executor_wait"],
                          bool(v["incremental"]), bool(v["rebuild"]))


def run(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    cfg = load(args, environ)
    try:
        from py4j.protocol import Py4JError
        from pyspark.errors import PySparkException
    except ImportError:
        # PySpark is the pipeline extra: the exporter's image and installs do without its 430 MB.
        print("ackscope pipeline: PySpark is not installed here: pip install 'ackscope[pipeline]' (and a Java 17+ "
              "runtime)", file=sys.stderr)
        return 1

    from ackscope.pipeline.incremental import StateRefused
    from ackscope.pipeline.session import SparkUnavailable

    progress = Progress(sys.stderr)
    try:
        summary = execute(cfg, progress)
    except (SparkUnavailable, NoInput, StateRefused) as e:
        print(f"ackscope pipeline: {e}", file=sys.stderr)
        return 1
    except (PySparkException, Py4JError) as e:
        # An unreadable output location, a lost cluster: Spark's first line says which.
        print(f"ackscope pipeline: Spark failed: {first_line(e)}", file=sys.stderr)
        return 1
    progress.line(f"done in {summary['run_time_s']:.1f} s: {cfg.out.rstrip('/')}/summary.json")
    return 0
