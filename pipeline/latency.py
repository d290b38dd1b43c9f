"""Latency and redelivery per time window and probe, from the probe event log (pure DataFrame functions).

Percentiles are Spark's percentile_approx: with ACCURACY 10,000 the rank of each reported value is within
count/10,000 of the exact one, small enough for p99.9 over a minute of probe traffic, and mergeable, so the
cost does not grow with a window's size the way an exact percentile's sort does.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from .windows import window_start

ACCURACY = 10_000
TARGET = ["probe", "queue_type", "persistent"]
_QUANTILES = (("p50_s", 0.5), ("p90_s", 0.9), ("p99_s", 0.99), ("p999_s", 0.999))


def _percentiles(column: str, names=_QUANTILES) -> list[F.Column]:
    q = F.percentile_approx(column, [p for _, p in names], ACCURACY)
    return [q[i].alias(name) for i, (name, _) in enumerate(names)]


def _windowed(events: DataFrame, kind: str, window_s: int) -> DataFrame:
    return events.where(F.col("kind") == kind).withColumn("window_start", window_start("ts", window_s))


def confirm_latency(events: DataFrame, window_s: int) -> DataFrame:
    """Per window, probe, queue type and persistence: count, p50/p90/p99/p99.9 and max of publish → ack."""
    return (_windowed(events, "confirmed", window_s).groupBy("window_start", *TARGET)
            .agg(F.count("*").alias("count"), *_percentiles("latency_s"), F.max("latency_s").alias("max_s")))


def confirm_latency_by_probe(events: DataFrame) -> DataFrame:
    """Per probe over the whole range: confirm latency p50 and p99 (summary.json's headline)."""
    return (events.where(F.col("kind") == "confirmed").groupBy("probe")
            .agg(*_percentiles("latency_s", (("p50_s", 0.5), ("p99_s", 0.99)))))


def delivery_latency(events: DataFrame, window_s: int) -> DataFrame:
    """Per window and probe: publish → first delivery (redeliveries are in `redelivery`)."""
    return (_windowed(events, "delivered", window_s).where(~F.col("redelivered"))
            .groupBy("window_start", *TARGET)
            .agg(F.count("*").alias("count"), *_percentiles("latency_s"), F.max("latency_s").alias("max_s")))


def redelivery(events: DataFrame, window_s: int) -> DataFrame:
    """Per window and probe: deliveries, how many were redeliveries, the probe's own requeues, and how long
    a redelivered message had been on its way (publish → redelivery)."""
    kind = F.col("kind")
    rows = events.where(kind.isin("delivered", "requeued")).withColumn("window_start", window_start("ts", window_s))
    redelivered = (kind == "delivered") & F.col("redelivered")
    return (rows.groupBy("window_start", *TARGET).agg(
        F.sum(F.when(kind == "delivered", 1).otherwise(0)).cast("long").alias("deliveries"),
        F.sum(F.when(redelivered, 1).otherwise(0)).cast("long").alias("redelivered"),
        F.sum(F.when(kind == "requeued", 1).otherwise(0)).cast("long").alias("requeued"),
        *_percentiles(F.when(redelivered, F.col("latency_s")), (("redelivery_p50_s", 0.5), ("redelivery_p99_s", 0.99))),
    ).withColumn("redelivered_share", F.when(F.col("deliveries") > 0,
                                             F.col("redelivered") / F.col("deliveries"))))
