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


def interval_of(frames: DataFrame) -> DataFrame:
    """Per probe, from `multi_message_frames`: the frames, their mean size, and the interval between one and the
    next within a run (p50, p90): the batching cadence."""
    previous = F.lag("ts").over(Window.partitionBy("run_id", "probe").orderBy("ts"))
    gaps = frames.withColumn("gap_s", (F.unix_micros("ts") - F.unix_micros(previous)) / 1e6)
    q = F.percentile_approx("gap_s", [0.5, 0.9], 10_000)
    return gaps.groupBy(*TARGET).agg(
        F.count("*").alias("multi_message_frames"),
        F.avg("batch_size").alias("mean_batch_size"),
        q[0].alias("interval_p50_s"),
        q[1].alias("interval_p90_s"),
    )


def confirm_batch_interval(events: DataFrame) -> DataFrame:
    """Per probe: multi-message frames, their mean size, and the interval between them (p50, p90)."""
    return interval_of(multi_message_frames(events))
