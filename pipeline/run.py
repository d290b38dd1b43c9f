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

from ackscope.model.schemas import ADDED_COLUMNS, EVENTS, REPORTS, SNAPSHOTS, TRACE_MESSAGES

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
    incremental: bool = False
    rebuild: bool = False


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


TRACES = "traces/messages"  # the applications' traced messages, a row each (the exporter's, with --data-dir)
SCHEMAS = {"events": EVENTS, **{f"snapshots/{kind}": schema for kind, schema in SNAPSHOTS.items()},
           TRACES: TRACE_MESSAGES}


def execute(cfg: PipelineConfig, progress: Progress) -> dict:
    """Run the whole pipeline (or, with cfg.incremental, what is new since the last run); return (and write) the
    summary."""
    from .session import start

    started = time.monotonic()
    spark = start(cfg.master, cfg.spark_ui, dict(cfg.spark_conf), cfg.executor_wait_s)
    if cfg.incremental:
        return _incremental(spark, cfg, progress, started)
    days = (cfg.since.date() if cfg.since else None, cfg.until.date() if cfg.until else None)
    sources = _scan(spark, cfg.data_dir, days)
    _need_input(cfg.data_dir, sources)
    _say(progress, sources)
    written, audit_rows, confirm_p = _with_damaged_set_aside(
        spark, sources, progress, lambda frames: _reports(spark, cfg, frames, progress))
    summary = _summary(spark, cfg, sources, written, headline(
        audit_rows, {r["probe"]: (r["p50_s"], r["p99_s"]) for r in confirm_p}), started)
    _write_text(spark, f"{cfg.out.rstrip('/')}/summary.json", json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return summary


def _scan(spark, data_dir: str, days=(None, None), seen: Callable[[str], Mapping[str, int] | None] = lambda _: None):
    from .inputs import scan
    root = data_dir.rstrip("/")
    sources = {"events": scan(spark, "events", f"{root}/events", EVENTS, *days, added=ADDED_COLUMNS["events"],
                              seen=seen("events"))}
    for kind, schema in SNAPSHOTS.items():
        name = f"snapshots/{kind}"
        sources[name] = scan(spark, kind, f"{root}/{name}", schema, *days, added=ADDED_COLUMNS.get(kind, frozenset()),
                             seen=seen(name))
    sources[TRACES] = scan(spark, "traced messages", f"{root}/{TRACES}", TRACE_MESSAGES, *days, seen=seen(TRACES))
    return sources


def _need_input(data_dir: str, sources: Mapping[str, Any]) -> None:
    if not any(s.files or s.skipped for s in sources.values()):
        root = data_dir.rstrip("/")
        raise NoInput(f"nothing to read under {root}: expected probe events in {root}/events/, exporter "
                      f"history in {root}/snapshots/ or traced messages in {root}/{TRACES}/ (run the probes or the "
                      "exporter with --data-dir)")


def _say(progress: Progress, sources: Mapping[str, Any], new: str = "") -> None:
    for name, source in sources.items():
        progress.line(f"read {name}: {len(source.files)} {new}files, {source.rows:,} rows"
                      + (f", {len(source.skipped)} skipped" if source.skipped else ""))
        for skipped in source.skipped[:5]:
            progress.line(f"  skipped {skipped.file}: {skipped.reason}")
        if len(source.skipped) > 5:
            progress.line(f"  … and {len(source.skipped) - 5} more (all in summary.json)")


def _with_damaged_set_aside(spark, sources: dict, progress: Progress, work: Callable[[dict], Any],
                            others: Callable[[], Mapping[str, Any]] = dict):
    """work(the inputs' DataFrames), again without any file whose damage a footer cannot show (a page of a sound
    file fails the job that reads it): that file is set aside, in `sources` (or in `others`' inputs, read too)."""
    from py4j.protocol import Py4JJavaError

    from .inputs import read
    while True:
        frames = {name: read(spark, source, SCHEMAS[name]) for name, source in sources.items()}
        try:
            return work(frames)
        except Py4JJavaError as e:
            found = damaged_file(spark, e, {**sources, **others()})
            if found is None:
                raise
            name, damaged = found
            if name not in sources:
                raise
            sources[name] = sources[name].without(damaged, "damaged data pages (the footer is sound)")
            progress.line(f"  skipped {damaged.relative}: damaged data pages; writing the reports again without it")


def _summary(spark, cfg: PipelineConfig, sources: Mapping[str, Any], written: Mapping[str, int], probes: dict,
             started: float) -> dict:
    return {
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
        "outputs": dict(written),
        "probes": probes,
        "run_time_s": round(time.monotonic() - started, 3),
    }


def _reports(spark, cfg: PipelineConfig, frames: Mapping[str, Any], progress: Progress):
    """Write every report; return the rows written per report, the audit's rows and the confirm
    percentiles per probe (for the summary)."""
    from pyspark import StorageLevel

    from . import audit, batching, latency
    from .windows import within

    events = frames["events"]
    in_range = within(events, "ts", cfg.since, cfg.until)
    # Both the audit and the list of lost messages come from one small per-run result: keep it.
    runs = audit.per_run(audit.classify(events, cfg.loss_deadline_s, cfg.since, cfg.until)) \
        .persist(StorageLevel.MEMORY_AND_DISK)
    w = cfg.window_s
    try:
        written = _write_reports(cfg.out, progress, {
            "delivery_audit": audit.delivery_audit(runs),
            "lost_messages": audit.lost_messages(runs),
            "out_of_order_messages": audit.out_of_order_messages(runs),
            "confirm_latency": latency.confirm_latency(in_range, w),
            "confirm_batches": batching.confirm_batches(in_range),
            "confirm_batch_interval": batching.confirm_batch_interval(in_range),
            "delivery_latency": latency.delivery_latency(in_range, w),
            "redelivery": latency.redelivery(in_range, w),
            **_snapshot_reports(cfg, frames),
            **_trace_reports(cfg, frames[TRACES]),
        })
    finally:
        runs.unpersist()
    audit_rows = spark.read.parquet(f"{cfg.out.rstrip('/')}/delivery_audit").collect()
    return written, audit_rows, latency.confirm_latency_by_probe(in_range).collect()


def _snapshot_reports(cfg: PipelineConfig, frames: Mapping[str, Any]) -> dict[str, Any]:
    from . import snapshots
    from .windows import within
    channels = within(frames["snapshots/channels"], "taken_at", cfg.since, cfg.until)
    consumers = within(frames["snapshots/consumers"], "taken_at", cfg.since, cfg.until)
    queues = within(frames["snapshots/queues"], "taken_at", cfg.since, cfg.until)
    return {"prefetch_saturation": snapshots.prefetch_saturation(channels, consumers),
            "redelivery_hotspots": snapshots.redelivery_hotspots(queues),
            "publisher_safety": snapshots.publisher_safety(channels, cfg.window_s)}


def _trace_reports(cfg: PipelineConfig, messages) -> dict[str, Any]:
    """The applications' traced messages: made whole from every file at each run (an incremental run too): a row
    a message, with no state to keep."""
    from . import traces
    from .windows import within
    messages = within(messages, "published_at", cfg.since, cfg.until)
    return {"trace_audit": traces.trace_audit(messages),
            "trace_queue_time": traces.trace_queue_time(messages, cfg.window_s)}


def _layout() -> dict[str, tuple[list[str], bool]]:
    """Each report's sort keys, and whether it is partitioned by date."""
    from .snapshots import CHANNEL
    return {"delivery_audit": (["run_id", "probe"], False), "lost_messages": (["run_id", "probe", "seq"], False),
            "out_of_order_messages": (["run_id", "probe", "seq"], False),
            "confirm_latency": (["window_start", "probe"], True), "confirm_batches": (["probe", "batch_size"], False),
            "confirm_batch_interval": (["probe"], False), "delivery_latency": (["window_start", "probe"], True),
            "redelivery": (["window_start", "probe"], True), "prefetch_saturation": (CHANNEL, False),
            "redelivery_hotspots": (["rank"], False), "publisher_safety": (["window_start", *CHANNEL], True),
            "trace_audit": (["destination", "service"], False),
            "trace_queue_time": (["window_start", "destination", "service"], True)}


def _write_reports(out: str, progress: Progress, reports: Mapping[str, Any], stood: Mapping[str, int] = {}
                   ) -> dict[str, int]:
    """Write the reports in the order of REPORTS (the names' one home), but those that `stood` (report -> its
    rows) as the run before wrote them; the rows of each."""
    written: dict[str, int] = {}
    layout = _layout()
    for name in REPORTS:
        if name in stood:
            progress.line(f"  {name:<24} {stood[name]:>10,} rows as the run before wrote them: nothing new in "
                          "its input")
            written[name] = stood[name]
            continue
        keys, by_date = layout[name]
        written[name] = progress.stage(name, lambda name=name, keys=keys, by_date=by_date:
                                       _write(reports[name], f"{out.rstrip('/')}/{name}", keys, by_date))
    return written


def _incremental(spark, cfg: PipelineConfig, progress: Progress, started: float) -> dict:
    """Only the event files no earlier run read; the state under OUT/_state holds what the reports need of the
    others (pipeline/incremental.py)."""
    from pyspark import StorageLevel
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import AnalysisException
    from pyspark.sql import functions as F

    from . import audit, batching, incremental, latency, snapshots
    from .inputs import Input, qualified
    from .session import first_line

    store = incremental.Store(spark, cfg.out)
    if cfg.rebuild:
        store.remove()
    data_dir = qualified(spark, cfg.data_dir)
    manifest = store.load(data_dir, cfg.window_s, cfg.loss_deadline_s)
    sources = _scan(spark, cfg.data_dir, seen=lambda name: manifest.seen(name) if manifest else None)
    changed = [f"{name}/{c}" for name, s in sources.items() for c in s.changed]
    if changed:
        raise incremental.StateRefused(
            f"{data_dir}/{changed[0]} is not the file an earlier run read (its size changed"
            + (f"; {len(changed) - 1} more" if len(changed) > 1 else "") + "): the state under "
            f"{store.root} no longer describes the input: run with --rebuild to start over")
    if manifest is None:
        _need_input(cfg.data_dir, sources)
    _say(progress, sources, "new " if manifest else "")
    if manifest is not None and not any(s.files for s in sources.values()):
        progress.line(f"nothing new since run {manifest.generation}: the reports stand")
        return {**manifest.summary, "run_time_s": round(time.monotonic() - started, 3)}
    generation = manifest.generation + 1 if manifest else 1
    earlier = store.gen(manifest.generation) if manifest else None
    here = store.gen(generation)
    w = cfg.window_s
    new_input = {name for name, source in sources.items() if source.files}

    def unchanged(name: str) -> bool:
        """Whether part or report `name` is made of no input with new files: the run before's stands."""
        return manifest is not None and not new_input.intersection(incremental.made_of(name))

    # The reports that stand as the run before wrote them, with the rows it wrote (where it wrote them whole).
    before_out, layout = (manifest.summary.get("outputs", {}) if manifest else {}), _layout()
    stood = {name: before_out[name] for name in REPORTS if unchanged(name) and name in before_out
             and store.written_whole(f"{cfg.out.rstrip('/')}/{name}", by_date=layout[name][1])}

    def state_and_reports(frames: Mapping[str, Any]):
        from .inputs import read
        # The trace reports are made whole: from the files earlier runs read and the new ones.
        every_trace = frames[TRACES] if manifest is None else read(spark, Input(TRACES, "", (
            *manifest.data_files(TRACES, f"{data_dir}/{TRACES}"), *sources[TRACES].files), 0, ()), TRACE_MESSAGES)
        before = {name: spark.read.parquet(f"{earlier}/{name}") for name in incremental.PARTS} if earlier else {}
        # Per run: the buckets its new events reach (acks alone add nothing to a message) and its first new
        # multi-message confirm frame (µs): one pass over the new events.
        firsts = frames["events"].groupBy("run_id", "probe").agg(
            F.collect_set(F.when(F.col("kind") != "acked", incremental.bucket_of())).alias("buckets"),
            F.min(F.when((F.col("kind") == "confirmed") & (F.col("batch_size") > 1), F.unix_micros("ts")))
            .alias("frame")).collect()
        known = manifest.buckets if manifest else {}
        reached = store.bucket_paths(known, sorted({b for r in firsts for b in r["buckets"]}))
        parts, merged = _state_parts(frames, before, spark.read.parquet(*reached) if reached else None,
                                     {(r["run_id"], r["probe"]): r["frame"] for r in firsts if r["frame"] is not None},
                                     w)
        progress.stage("state messages", lambda: _write_buckets(merged, store.messages(generation)))
        touched = store.buckets_in(generation)
        progress.line(f"  {'':<24} {len(touched):>10,} of {len({*known, *touched}):,} buckets merged")
        parts.update(_bucket_parts(
            spark.read.parquet(*store.bucket_paths({b: generation for b in touched}, touched)) if touched else merged,
            {n: before[n] for n in ("totals", "undelivered", "out_of_order") if n in before}, touched))
        ranges, window_events = None, frames["events"]
        if earlier:
            ranges = incremental.window_ranges(list(sources["events"].files), w)
            old = incremental.overlapping(manifest.data_files("events", f"{data_dir}/events"), ranges)
            window_events = read(spark, Input("events", "", (*old, *sources["events"].files), 0, ()), EVENTS)
            if ranges is not None:
                window_events = window_events.where(incremental.in_ranges("ts", ranges))
        windows = {"confirm_latency": latency.confirm_latency(window_events, w),
                   "delivery_latency": latency.delivery_latency(window_events, w),
                   "redelivery": latency.redelivery(window_events, w)}
        if earlier and ranges is not None:  # the windows the new files do not reach stand as they were
            windows = {name: spark.read.parquet(f"{earlier}/windows/{name}")
                       .where(~incremental.in_ranges("window_start", ranges)).unionByName(df)
                       for name, df in windows.items()}
        for name, df in {**parts, **{f"windows/{n}": df for n, df in windows.items()}}.items():
            if unchanged(name.removeprefix("windows/")):
                store.carry(name, generation)
                progress.line(f"  {f'state {name}':<24} carried from run {manifest.generation}: nothing new in "
                              "its input")
            else:
                progress.stage(f"state {name}", lambda df=df, name=name: _write_state(df, f"{here}/{name}"))
        state = {name: spark.read.parquet(f"{here}/{name}") for name in incremental.PARTS}
        runs = audit.per_run_of(state["totals"], audit.judge(state["undelivered"], state["run_ends"],
                                                              cfg.loss_deadline_s), state["out_of_order"]) \
            .persist(StorageLevel.MEMORY_AND_DISK)
        try:
            written = _write_reports(cfg.out, progress, {
                "delivery_audit": audit.delivery_audit(runs),
                "lost_messages": audit.lost_messages(runs),
                "out_of_order_messages": audit.out_of_order_messages(runs),
                "confirm_batches": batching.with_frames(state["batch_counts"]),
                "confirm_batch_interval": batching.interval_of(state["frames"]),
                **{name: spark.read.parquet(f"{here}/windows/{name}") for name in incremental.WINDOWED},
                "prefetch_saturation": snapshots.saturation_of(state["saturation"], state["consumer_queues"]),
                "redelivery_hotspots": snapshots.hotspots_of(state["hotspots"]),
                "publisher_safety": snapshots.safety_of(state["safety"]),
                **_trace_reports(cfg, every_trace)}, stood)
        finally:
            runs.unpersist()
        return written, spark.read.parquet(f"{cfg.out.rstrip('/')}/delivery_audit").collect(), touched

    try:
        written, audit_rows, touched = _with_damaged_set_aside(spark, sources, progress, state_and_reports)
    except (Py4JJavaError, AnalysisException) as e:
        if store.root.split("://")[-1] in str(e):
            raise incremental.StateRefused(f"the incremental state under {store.root} is damaged ({first_line(e)}): "
                                           "run with --rebuild to start over") from None
        raise
    # Whole-range percentiles would need every event: the incremental summary leaves them to confirm_latency.
    summary = {**_summary(spark, cfg, sources, written, headline(audit_rows, {}), started),
               "incremental": {"run": generation, "files_before": sum(len(v) for v in (
                   manifest.files.values() if manifest else ()))}}
    store.commit(incremental.with_files(manifest, generation, data_dir, w, cfg.loss_deadline_s, sources, summary,
                                        touched))
    _write_text(spark, f"{cfg.out.rstrip('/')}/summary.json", json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return summary


def _state_parts(frames: Mapping[str, Any], before: Mapping[str, Any], reached, first_frames: Mapping[tuple, int],
                 window_s: int):
    """The incremental state's parts (pipeline/incremental.py) from the new files' `frames`, combined with the
    parts `before` them (none on the first run); and the messages of the buckets the new events reach, merged
    with those buckets' messages before (`reached`, None where none was). `first_frames`: per run and probe, the
    new events' first multi-message confirm frame (µs)."""
    from pyspark.sql import functions as F

    from . import audit, batching, snapshots
    from .incremental import bucket_of
    from .snapshots import CHANNEL, CHANNEL_COUNTERS, QUEUE, QUEUE_COUNTERS

    events, channels = frames["events"], frames["snapshots/channels"]
    queues, consumers = frames["snapshots/queues"], frames["snapshots/consumers"]
    judged = audit.ordered(events, before.get("order_marks"), reached)
    messages = audit.messages(judged)
    if reached is not None:
        messages = audit.merge_messages(reached, messages)
    multi = batching.multi_message_frames(events)
    new = {"order_marks": audit.order_marks(judged), "run_ends": audit.run_ends(events),
           "batch_counts": batching.confirm_batch_counts(events),
           "frames": batching.with_gaps(multi), "frame_ends": batching.frame_ends(multi),
           "saturation": snapshots.saturation_parts(channels), "consumer_queues": snapshots.consumer_queues(consumers),
           # A counter's first new sample counts from its channel's or queue's last sample before.
           "hotspots": snapshots.hotspot_parts(queues, before.get("queues_last")),
           "safety": snapshots.safety_parts(channels, window_s, before.get("channels_last")),
           "channels_last": snapshots.last_samples(channels, CHANNEL, CHANNEL_COUNTERS, before.get("channels_last")),
           "queues_last": snapshots.last_samples(queues, QUEUE, QUEUE_COUNTERS, before.get("queues_last"))}
    merged = messages.withColumn("bucket", bucket_of())
    if not before:
        return new, merged
    last = {(r["run_id"], r["probe"]): r["last"] for r in before["frame_ends"].select(
        "run_id", "probe", F.unix_micros("last_ts").alias("last")).collect()}
    new["frames"] = batching.merge_frames(
        before["frames"], before["frame_ends"], multi, min(first_frames.values(), default=None),
        all(t >= last.get(run, t) for run, t in first_frames.items()))
    merge = {"order_marks": audit.merge_order_marks, "run_ends": audit.merge_run_ends,
             "batch_counts": batching.merge_batch_counts,
             "frame_ends": batching.merge_frame_ends,
             "saturation": snapshots.merge_saturation_parts, "consumer_queues": snapshots.merge_consumer_queues,
             "hotspots": snapshots.merge_hotspot_parts, "safety": snapshots.merge_safety_parts}
    return {name: merge[name](before[name], df) if name in merge else df for name, df in new.items()}, merged


def _bucket_parts(messages, before: Mapping[str, Any], touched: list[str]) -> dict[str, Any]:
    """Per bucket, what the audit needs of its messages (pipeline/incremental.py): from the `messages` of the
    buckets this run wrote (`touched`), and `before` for those it did not."""
    from pyspark.sql import functions as F

    from . import audit
    from .incremental import bucket_of
    messages = messages.withColumn("bucket", bucket_of())
    now = {"totals": audit.totals(messages, "bucket"), "undelivered": audit.undelivered(messages),
           "out_of_order": audit.out_of_order(messages)}
    return {name: before[name].where(~F.col("bucket").isin(touched)).unionByName(df) if name in before else df
            for name, df in now.items()}


def _write_buckets(messages, where: str) -> int:
    """The merged messages, a directory per bucket (none where there are no messages); returns their rows."""
    counted, rows = _counted(messages)
    rows.write.partitionBy("bucket").option("compression", "zstd").parquet(where)
    return counted.get["rows"]


def _write_state(df, where: str) -> int:
    # One file a part: most are a few rows, and each file costs the next run a read.
    counted, rows = _counted(df)
    rows.coalesce(1).write.mode("overwrite").option("compression", "zstd").parquet(where)
    return counted.get["rows"]


def _counted(df):
    """(an Observation that holds `df`'s rows once an action has run, df observed): rows counted as they are
    written, where reading a part back to count it was a Spark job more per part, 18 in an incremental run, and
    counting a report kept in memory one more per report (a full run's jobs 72 → 50 on the incremental test's
    input)."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F
    counted = Observation()
    return counted, df.observe(counted, F.count(F.lit(1)).alias("rows"))


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
    # One sorted file per report (per date): reports are aggregates, small next to their input.
    counted, rows = _counted(df.repartition(1).sortWithinPartitions(*(["date"] if by_date else []), *keys))
    writer = rows.write.mode("overwrite").option("compression", "zstd")
    if by_date:
        writer = writer.partitionBy("date")
    writer.parquet(path)
    return counted.get["rows"]


def _write_text(spark, path: str, text: str) -> None:
    jvm = spark._jvm  # noqa: SLF001 - Hadoop's FileSystem, so that OUT may be any Hadoop URI
    target = jvm.org.apache.hadoop.fs.Path(path)
    stream = target.getFileSystem(spark._jsc.hadoopConfiguration()).create(target, True)  # noqa: SLF001
    try:
        stream.write(bytearray(text.encode()))
    finally:
        stream.close()
