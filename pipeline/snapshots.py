"""What the exporter's snapshot history shows over time (pure DataFrame functions): consumers at their
prefetch limit, queues whose deliveries are mostly redeliveries, channels publishing without confirms.

The broker's counters are cumulative; a counter that falls (the channel or queue was re-created, the node
restarted) starts again from zero, so its increment across the fall is its new value.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from .windows import window_start

CHANNEL = ["vhost", "connection_name", "channel"]
QUEUE = ["vhost", "queue"]


def _increment(column: str, key: list[str]) -> Column:
    previous = F.lag(column).over(Window.partitionBy(*key).orderBy("taken_at"))
    current = F.col(column)
    return F.when(previous.isNull() | current.isNull(), F.lit(0)).when(current >= previous, current - previous) \
        .otherwise(current)


def _client() -> list[Column]:
    """Who the channel's client is, as the history last named it (null in history written before it did)."""
    return [F.max_by(c, F.when(F.col(c).isNotNull(), F.col("taken_at"))).alias(c) for c in ("client", "identity")]


def prefetch_saturation(channels: DataFrame, consumers: DataFrame) -> DataFrame:
    """Per consuming channel: samples, how many found unacked ≥ its prefetch limit (and the share), the
    highest and mean unacked, samples with unacked deliveries and no limit at all, and its consumers'
    queues. Unacked is counted by the broker per channel, so that is the unit."""
    limit, unacked = F.col("prefetch_limit"), F.col("messages_unacked")
    consuming = channels.where((F.col("consumer_count") > 0) | (unacked > 0))
    per_channel = consuming.groupBy(*CHANNEL).agg(
        F.max("user").alias("user"),
        *_client(),
        F.max(limit).alias("prefetch_limit"),
        F.count("*").alias("samples"),
        F.sum(F.when((limit > 0) & (unacked >= limit), 1).otherwise(0)).cast("long").alias("saturated_samples"),
        F.sum(F.when(limit.isNull() & (unacked > 0), 1).otherwise(0)).cast("long").alias("unlimited_samples"),
        F.max(unacked).alias("max_unacked"),
        F.avg(unacked).alias("mean_unacked"),
        F.min("taken_at").alias("first_seen"),
        F.max("taken_at").alias("last_seen"),
    ).withColumn("saturated_share", F.col("saturated_samples") / F.col("samples"))
    queues = consumers.groupBy("vhost", "channel").agg(
        F.array_sort(F.collect_set("queue")).alias("queues"),
        F.max((~F.col("ack_required")).cast("int")).cast("boolean").alias("auto_ack"))
    return per_channel.join(queues, ["vhost", "channel"], "left")


def redelivery_hotspots(queues: DataFrame) -> DataFrame:
    """Queues ranked by redelivered / delivered over the history (ties by redeliveries), with the counts."""
    counted = (queues.withColumn("delivered", _increment("delivered_total", QUEUE))
               .withColumn("redelivered", _increment("redelivered_total", QUEUE)))
    totals = counted.groupBy(*QUEUE).agg(
        F.max("type").alias("type"),
        F.sum("delivered").cast("long").alias("delivered"),
        F.sum("redelivered").cast("long").alias("redelivered"),
        F.min("taken_at").alias("first_seen"),
        F.max("taken_at").alias("last_seen"),
    ).where(F.col("redelivered") > 0)
    share = F.when(F.col("delivered") > 0, F.col("redelivered") / F.col("delivered"))
    ranked = totals.withColumn("redelivered_share", share)
    order = Window.orderBy(F.desc_nulls_first("redelivered_share"), F.desc("redelivered"), *QUEUE)
    return ranked.withColumn("rank", F.row_number().over(order))


def publisher_safety(channels: DataFrame, window_s: int) -> DataFrame:
    """Per window and publishing channel: messages published and how the channel protects them
    (`mode`: confirm, tx or none — none means the publisher cannot know whether the broker has them)."""
    published = channels.withColumn("published", _increment("published_total", CHANNEL))
    mode = (F.when(F.col("confirm"), "confirm").when(F.col("transactional"), "tx").otherwise("none"))
    return (published.where(F.col("published") > 0)
            .withColumn("window_start", window_start("taken_at", window_s))
            .withColumn("mode", mode)
            .groupBy("window_start", *CHANNEL, "user", "mode")
            .agg(F.sum("published").cast("long").alias("published"), *_client()))
