"""The pipeline run: probe events and snapshot history → Parquet reports and summary.json, on Spark.

The transformations are pure (audit, latency, batching, snapshots); this module reads, writes and reports.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ackscope.model.schemas import ADDED_COLUMNS, EVENTS, REPORTS, SNAPSHOTS

_FAILED_READ = re.compile(r"Encountered error while reading file (\S+?)\.?\s+SQLSTATE")


@dataclass(frozen=True)
class PipelineConfig:
    data_dir: str
    out: str
    master: str = "local[2]"
    window_s: int = 60
    since: datetime | None = None
    until: datetime | None = None
    loss_deadline_s: float = 120.0
    spark_ui: bool = False
    spark_conf: tuple[tuple[str, str], ...] = ()
    executor_wait_s: float = 60.0


class NoInput(Exception):
    """Neither probe events nor snapshot history under the data dir."""


class Progress:
    """One line per stage on stderr: what it did and how long it took."""

    def __init__(self, stream):
        from rich.console import Console
        self.console = Console(file=stream, highlight=False, soft_wrap=True)

    def line(self, text: str) -> None:
        self.console.print(text, markup=False)

    def stage(self, name: str, work: Callable[[], int]) -> int:
        started = time.monotonic()
        with self.console.status(f"{name} …"):
            rows = work()
        self.line(f"  {name:<24} {rows:>10,} rows {time.monotonic() - started:7.1f} s")
        return rows


def execute(cfg: PipelineConfig, progress: Progress) -> dict:
    """Run the whole pipeline; return (and write) the summary."""
    from py4j.protocol import Py4JJavaError

    from .inputs import read, scan
    from .session import start

    started = time.monotonic()
    spark = start(cfg.master, cfg.spark_ui, dict(cfg.spark_conf), cfg.executor_wait_s)
    root = cfg.data_dir.rstrip("/")
    days = (cfg.since.date() if cfg.since else None, cfg.until.date() if cfg.until else None)
    sources = {"events": scan(spark, "events", f"{root}/events", EVENTS, *days)}
    for kind, schema in SNAPSHOTS.items():
        sources[f"snapshots/{kind}"] = scan(spark, kind, f"{root}/snapshots/{kind}", schema, *days,
                                            added=ADDED_COLUMNS.get(kind, frozenset()))
    if not any(s.files or s.skipped for s in sources.values()):
        raise NoInput(f"nothing to read under {root}: expected probe events in {root}/events/ or exporter "
                      f"history in {root}/snapshots/ (run the probes or the exporter with --data-dir)")
    schemas = {"events": EVENTS, **{f"snapshots/{kind}": schema for kind, schema in SNAPSHOTS.items()}}
    for name, source in sources.items():
        progress.line(f"read {name}: {len(source.files)} files, {source.rows:,} rows"
                      + (f", {len(source.skipped)} skipped" if source.skipped else ""))
        for skipped in source.skipped[:5]:
            progress.line(f"  skipped {skipped.file}: {skipped.reason}")
        if len(source.skipped) > 5:
            progress.line(f"  … and {len(source.skipped) - 5} more (all in summary.json)")
    while True:
        frames = {name: read(spark, source, schemas[name]) for name, source in sources.items()}
        try:
            written, audit_rows, confirm_p = _reports(spark, cfg, frames, progress)
            break
        except Py4JJavaError as e:
            # Damage a footer cannot show (a page of a sound file) fails the job that reads it: set the file
            # aside and run the reports again without it.
            found = damaged_file(spark, e, sources)
            if found is None:
                raise
            name, damaged = found
            sources[name] = sources[name].without(damaged, "damaged data pages (the footer is sound)")
            progress.line(f"  skipped {damaged.relative}: damaged data pages; writing the reports again without it")
    summary = {
        "data_dir": cfg.data_dir,
        "out": cfg.out,
        "since": cfg.since.isoformat() if cfg.since else None,
        "until": cfg.until.isoformat() if cfg.until else None,
        "window_s": cfg.window_s,
        "loss_deadline_s": cfg.loss_deadline_s,
        "spark": {"master": cfg.master, "version": spark.version},
        "inputs": {name: s.summary() for name, s in sources.items()},
        "files_read": sum(len(s.files) for s in sources.values()),
        "files_skipped": sum(len(s.skipped) for s in sources.values()),
        "rows": sum(s.rows for s in sources.values()),
        "outputs": written,
        "probes": headline(audit_rows, {r["probe"]: (r["p50_s"], r["p99_s"]) for r in confirm_p}),
        "run_time_s": round(time.monotonic() - started, 3),
    }
    _write_text(spark, f"{cfg.out.rstrip('/')}/summary.json", json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return summary


def _reports(spark, cfg: PipelineConfig, frames: Mapping[str, Any], progress: Progress):
    """Write every report; return the rows written per report, the audit's rows and the confirm
    percentiles per probe (for the summary)."""
    from pyspark import StorageLevel

    from . import audit, batching, latency, snapshots
    from .windows import within

    events = frames["events"]
    in_range = within(events, "ts", cfg.since, cfg.until)
    channels = within(frames["snapshots/channels"], "taken_at", cfg.since, cfg.until)
    consumers = within(frames["snapshots/consumers"], "taken_at", cfg.since, cfg.until)
    queues = within(frames["snapshots/queues"], "taken_at", cfg.since, cfg.until)
    # Both the audit and the list of lost messages come from one small per-run result: keep it.
    runs = audit.per_run(audit.classify(events, cfg.loss_deadline_s, cfg.since, cfg.until)) \
        .persist(StorageLevel.MEMORY_AND_DISK)
    out, w = cfg.out.rstrip("/"), cfg.window_s
    # DataFrame, sort keys, partitioned by date; written in the order of REPORTS (the names' one home).
    reports: dict[str, tuple[Any, list[str], bool]] = {
        "delivery_audit": (audit.delivery_audit(runs), ["run_id", "probe"], False),
        "lost_messages": (audit.lost_messages(runs), ["run_id", "probe", "seq"], False),
        "confirm_latency": (latency.confirm_latency(in_range, w), ["window_start", "probe"], True),
        "confirm_batches": (batching.confirm_batches(in_range), ["probe", "batch_size"], False),
        "confirm_batch_interval": (batching.confirm_batch_interval(in_range), ["probe"], False),
        "delivery_latency": (latency.delivery_latency(in_range, w), ["window_start", "probe"], True),
        "redelivery": (latency.redelivery(in_range, w), ["window_start", "probe"], True),
        "prefetch_saturation": (snapshots.prefetch_saturation(channels, consumers), snapshots.CHANNEL, False),
        "redelivery_hotspots": (snapshots.redelivery_hotspots(queues), ["rank"], False),
        "publisher_safety": (snapshots.publisher_safety(channels, w), ["window_start", *snapshots.CHANNEL], True),
    }
    written: dict[str, int] = {}
    try:
        for name in REPORTS:
            df, keys, by_date = reports[name]
            written[name] = progress.stage(name, lambda df=df, name=name, keys=keys, by_date=by_date:
                                           _write(df, f"{out}/{name}", keys, by_date))
    finally:
        runs.unpersist()
    audit_rows = spark.read.parquet(f"{out}/delivery_audit").collect()
    return written, audit_rows, latency.confirm_latency_by_probe(in_range).collect()


def damaged_file(spark, error: BaseException, sources: Mapping[str, Any]):
    """(input name, DataFile) when `error` is Spark failing to read one of the inputs' files, else None."""
    m = _FAILED_READ.search(str(error))
    if not m:
        return None
    path = spark._jvm.org.apache.hadoop.fs.Path(m.group(1)).toString()  # noqa: SLF001 - as the listing wrote it
    for name, source in sources.items():
        for f in source.files:
            if f.path == path:
                return name, f
    return None


def headline(audit_rows: list, confirm: Mapping[str, tuple[float, float]]) -> dict:
    """Per probe, over all its runs in range: the audit's counts and the confirm latency p50/p99."""
    fields = ("published", "confirmed", "nacked", "returned", "confirm_timeouts", "republished", "delivered",
              "duplicates", "redelivered", "lost", "awaiting")
    probes: dict[str, dict] = {}
    for r in audit_rows:
        p = probes.setdefault(r["probe"], {"queue_type": r["queue_type"], "persistent": r["persistent"], "runs": 0,
                                           **{f: 0 for f in fields}})
        p["runs"] += 1
        for f in fields:
            p[f] += r[f]
    for probe, (p50, p99) in confirm.items():
        if probe in probes:
            probes[probe]["confirm_p50_s"], probes[probe]["confirm_p99_s"] = p50, p99
    return dict(sorted(probes.items()))


def _write(df, path: str, keys: list[str], by_date: bool) -> int:
    """Write one report, rows in a stable order, replacing what a previous run wrote (for the dates this
    run covers, when partitioned by date); return its row count."""
    from pyspark.sql import functions as F
    if by_date:
        df = df.withColumn("date", F.to_date("window_start"))
    # One sorted file per report (per date): reports are aggregates, small next to their input. Kept in
    # memory while written so that counting its rows costs nothing more.
    df = df.repartition(1).sortWithinPartitions(*(["date"] if by_date else []), *keys).persist()
    try:
        writer = df.write.mode("overwrite").option("compression", "zstd")
        if by_date:
            writer = writer.partitionBy("date")
        writer.parquet(path)
        return df.count()
    finally:
        df.unpersist()


def first_line(e: BaseException) -> str:
    from py4j.protocol import Py4JJavaError
    text = str(e.java_exception.getMessage()) if isinstance(e, Py4JJavaError) else str(e)
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else type(e).__name__


def _write_text(spark, path: str, text: str) -> None:
    jvm = spark._jvm  # noqa: SLF001 - Hadoop's FileSystem, so that OUT may be any Hadoop URI
    target = jvm.org.apache.hadoop.fs.Path(path)
    stream = target.getFileSystem(spark._jsc.hadoopConfiguration()).create(target, True)  # noqa: SLF001
    try:
        stream.write(bytearray(text.encode()))
    finally:
        stream.close()
