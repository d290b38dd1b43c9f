"""Confirm batching: how many messages each basic.ack frame settles, and how often multi-message frames
arrive. When a queue syncs to disk before confirming, confirms come in batches, one per fsync: the batch
size grows with the publish rate, and the interval between multi-message frames shows the sync cadence."""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from .latency import TARGET


def confirm_batches(events: DataFrame) -> DataFrame:
    """Per probe and batch size: messages confirmed in frames of that size, and the frames
    (messages / batch size, rounded up where the log's range cuts a frame)."""
    return (events.where((F.col("kind") == "confirmed") & F.col("batch_size").isNotNull())
            .groupBy(*TARGET, "batch_size").agg(F.count("*").alias("messages"))
            .withColumn("frames", F.ceil(F.col("messages") / F.col("batch_size")).cast("long")))


def confirm_batch_interval(events: DataFrame) -> DataFrame:
    """Per probe: multi-message frames (the rows of one frame share its arrival time), their mean size, and
    the interval between one and the next within a run (p50, p90): the batching cadence."""
    frames = (events.where((F.col("kind") == "confirmed") & (F.col("batch_size") > 1))
              .select("run_id", *TARGET, "ts", "batch_size").distinct())
    previous = F.lag("ts").over(Window.partitionBy("run_id", "probe").orderBy("ts"))
    gaps = frames.withColumn("gap_s", (F.unix_micros("ts") - F.unix_micros(previous)) / 1e6)
    q = F.percentile_approx("gap_s", [0.5, 0.9], 10_000)
    return gaps.groupBy(*TARGET).agg(
        F.count("*").alias("multi_message_frames"),
        F.avg("batch_size").alias("mean_batch_size"),
        q[0].alias("interval_p50_s"),
        q[1].alias("interval_p90_s"),
    )
