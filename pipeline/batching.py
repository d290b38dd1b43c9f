"""Confirm batching: how many messages each basic.ack frame settles, and how often multi-message frames
arrive. When a queue syncs to disk before confirming, confirms come in batches, one per fsync: the batch
size grows with the publish rate, and the interval between multi-message frames shows the sync cadence."""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from .latency import TARGET


def confirm_batch_counts(events: DataFrame) -> DataFrame:
    """Per probe and batch size: messages confirmed in frames of that size (additive across parts of the log)."""
    return (events.where((F.col("kind") == "confirmed") & F.col("batch_size").isNotNull())
            .groupBy(*TARGET, "batch_size").agg(F.count("*").alias("messages")))


def merge_batch_counts(earlier: DataFrame, later: DataFrame) -> DataFrame:
    return (earlier.unionByName(later).groupBy(*TARGET, "batch_size")
            .agg(F.sum("messages").cast("long").alias("messages")))


def with_frames(counts: DataFrame) -> DataFrame:
    """`confirm_batch_counts` with the frames: messages / batch size, rounded up where the log's range cuts one."""
    return counts.withColumn("frames", F.ceil(F.col("messages") / F.col("batch_size")).cast("long"))


def confirm_batches(events: DataFrame) -> DataFrame:
    """Per probe and batch size: messages confirmed in frames of that size, and the frames."""
    return with_frames(confirm_batch_counts(events))


def multi_message_frames(events: DataFrame) -> DataFrame:
    """Each multi-message confirm frame once (the rows of one frame share its arrival time)."""
    return (events.where((F.col("kind") == "confirmed") & (F.col("batch_size") > 1))
            .select("run_id", *TARGET, "ts", "batch_size").distinct())


def with_gaps(frames: DataFrame, ends: DataFrame | None = None) -> DataFrame:
    """`multi_message_frames` with `gap_s`, the interval since the frame before it in its run (null for the
    first); `ends` (`frame_ends`), where these frames follow others already read."""
    previous = F.lag("ts").over(Window.partitionBy("run_id", "probe").orderBy("ts"))
    if ends is not None:
        frames = frames.join(F.broadcast(ends), ["run_id", "probe"], "left")
        previous = F.coalesce(previous, F.col("last_ts"))
    return frames.withColumn("gap_s", (F.unix_micros("ts") - F.unix_micros(previous)) / 1e6) \
        .select("run_id", *TARGET, "ts", "batch_size", "gap_s")


def frame_ends(gapped: DataFrame) -> DataFrame:
    """Per run and probe: its last frame's time."""
    return gapped.groupBy("run_id", "probe").agg(F.max("ts").alias("last_ts"))


def merge_frames(earlier: DataFrame, ends: DataFrame, frames: DataFrame, since: int | None,
                 in_order: bool) -> DataFrame:
    """`with_gaps` of the frames of two parts of the log: `earlier`'s, gaps and all, with their `frame_ends`,
    and the later part's `frames`, the first at `since` (µs; None: it has none). Where each run's later frames
    come at or after its earlier ones (`in_order`: the log rotates by time), only theirs need gaps: the first of a
    run's from the earlier part's last; a frame whose rows the two parts share (the log rotated within it) is the
    earlier's. Otherwise every gap is computed again, as over the whole log."""
    if since is None:
        return earlier
    if not in_order:
        whole = earlier.select("run_id", *TARGET, "ts", "batch_size").unionByName(frames).distinct()
        return with_gaps(whole)
    # The earlier frames at or after the later part's first: those a later frame may repeat.
    tail = earlier.where(F.unix_micros("ts") >= since).select("run_id", *TARGET, "ts", "batch_size")
    new = frames.join(tail, ["run_id", *TARGET, "ts", "batch_size"], "left_anti")
    return earlier.unionByName(with_gaps(new, ends))


def merge_frame_ends(earlier: DataFrame, later: DataFrame) -> DataFrame:
    return earlier.unionByName(later).groupBy("run_id", "probe").agg(F.max("last_ts").alias("last_ts"))


def interval_of(gapped: DataFrame) -> DataFrame:
    """Per probe, from `with_gaps`: the frames, their mean size, and the interval between one and the next within
    a run (p50, p90): the batching cadence."""
    # Exact (interpolated), not approximate: an approximation's sketch depends on how the frames are divided
    # among tasks, and an incremental run divides them otherwise than a full run (they differed in the fourth
    # digit at 30M events). One value per multi-message frame: millions at 100M events, a few MB per probe.
    q = F.percentile("gap_s", F.array(F.lit(0.5), F.lit(0.9)))
    return gapped.groupBy(*TARGET).agg(
        F.count("*").alias("multi_message_frames"),
        F.avg("batch_size").alias("mean_batch_size"),
        q[0].alias("interval_p50_s"),
        q[1].alias("interval_p90_s"),
    )


def confirm_batch_interval(events: DataFrame) -> DataFrame:
    """Per probe: multi-message frames, their mean size, and the interval between them (p50, p90)."""
    return interval_of(with_gaps(multi_message_frames(events)))
