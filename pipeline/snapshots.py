"""What the exporter's snapshot history shows over time (pure DataFrame functions): consumers at their
prefetch limit, queues whose deliveries are mostly redeliveries, channels publishing without confirms.

The broker's counters are cumulative; a counter that falls (the channel or queue was re-created, the node
restarted) starts again from zero, so its increment across the fall is its new value.

Each report is built from parts that combine exactly across parts of the history (`*_parts`, `merge_*`), so
that an incremental run keeps the parts instead of the samples: counts and sums add, extremes combine, a
counter's increments need only each channel's or queue's last sample (`last_samples`).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from .windows import window_start

CHANNEL = ["vhost", "connection_name", "channel"]
QUEUE = ["vhost", "queue"]
_NAMES = ("client", "identity")
_EARLIER = "_earlier"  # marks a key's last sample carried over from earlier history: a base, not a sample


def _increments(samples: DataFrame, key: list[str], counters: tuple[str, ...],
                earlier: DataFrame | None = None) -> DataFrame:
    """`samples` with each counter's increment since the key's previous sample (in `samples`, or its last
    sample in `earlier` history: `last_samples`); 0 for a key's first sample ever."""
    if earlier is not None:
        samples = samples.withColumn(_EARLIER, F.lit(False)).unionByName(
            earlier.withColumn(_EARLIER, F.lit(True)), allowMissingColumns=True)
    order = Window.partitionBy(*key).orderBy("taken_at")
    for c in counters:
        previous, current = F.lag(c).over(order), F.col(c)
        samples = samples.withColumn(c.removesuffix("_total"), F.when(previous.isNull() | current.isNull(), F.lit(0))
                                     .when(current >= previous, current - previous).otherwise(current))
    return samples.where(~F.col(_EARLIER)).drop(_EARLIER) if earlier is not None else samples


def last_samples(samples: DataFrame, key: list[str], counters: tuple[str, ...],
                 earlier: DataFrame | None = None) -> DataFrame:
    """Each key's last sample (time and counters) in `samples` and `earlier` (last_samples of earlier history)."""
    rows = samples.select(*key, "taken_at", *counters)
    if earlier is not None:
        rows = rows.unionByName(earlier)
    latest = F.row_number().over(Window.partitionBy(*key).orderBy(F.desc("taken_at")))
    return rows.withColumn("_n", latest).where(F.col("_n") == 1).drop("_n")


def _named() -> list[Column]:
    """Who the client is as the samples last named it, with when (null in history written before it did)."""
    return [c for n in _NAMES for c in (F.max_by(n, F.when(F.col(n).isNotNull(), F.col("taken_at"))).alias(n),
                                        F.max(F.when(F.col(n).isNotNull(), F.col("taken_at"))).alias(f"{n}_at"))]


def _renamed() -> list[Column]:
    """`_named` of parts that carry it: the latest naming wins."""
    return [c for n in _NAMES for c in (F.max_by(n, f"{n}_at").alias(n), F.max(f"{n}_at").alias(f"{n}_at"))]


# -- prefetch saturation ----------------------------------------------------------------------------------------
def saturation_parts(channels: DataFrame) -> DataFrame:
    """Per consuming channel, what its samples add up to (see `prefetch_saturation`)."""
    limit, unacked = F.col("prefetch_limit"), F.col("messages_unacked")
    consuming = channels.where((F.col("consumer_count") > 0) | (unacked > 0))
    return consuming.groupBy(*CHANNEL).agg(
        F.max("user").alias("user"),
        *_named(),
        F.max(limit).alias("prefetch_limit"),
        F.count("*").alias("samples"),
        F.sum(F.when((limit > 0) & (unacked >= limit), 1).otherwise(0)).cast("long").alias("saturated_samples"),
        F.sum(F.when(limit.isNull() & (unacked > 0), 1).otherwise(0)).cast("long").alias("unlimited_samples"),
        F.max(unacked).alias("max_unacked"),
        F.sum(unacked).cast("long").alias("unacked_sum"),
        F.min("taken_at").alias("first_seen"),
        F.max("taken_at").alias("last_seen"),
    )


def merge_saturation_parts(earlier: DataFrame, later: DataFrame) -> DataFrame:
    return earlier.unionByName(later).groupBy(*CHANNEL).agg(
        F.max("user").alias("user"), *_renamed(), F.max("prefetch_limit").alias("prefetch_limit"),
        *(F.sum(c).cast("long").alias(c) for c in ("samples", "saturated_samples", "unlimited_samples",
                                                   "unacked_sum")),
        F.max("max_unacked").alias("max_unacked"), F.min("first_seen").alias("first_seen"),
        F.max("last_seen").alias("last_seen"))


def consumer_queues(consumers: DataFrame) -> DataFrame:
    """Per channel: its consumers' queues, and whether any consumes with auto-ack."""
    return consumers.groupBy("vhost", "channel").agg(
        F.array_sort(F.collect_set("queue")).alias("queues"),
        F.max((~F.col("ack_required")).cast("int")).cast("boolean").alias("auto_ack"))


def merge_consumer_queues(earlier: DataFrame, later: DataFrame) -> DataFrame:
    return earlier.unionByName(later).groupBy("vhost", "channel").agg(
        F.array_sort(F.array_distinct(F.flatten(F.collect_list("queues")))).alias("queues"),
        F.max("auto_ack").alias("auto_ack"))


def saturation_of(parts: DataFrame, queues: DataFrame) -> DataFrame:
    """The `prefetch_saturation` report from `saturation_parts` and `consumer_queues`."""
    return (parts.withColumn("mean_unacked", F.col("unacked_sum") / F.col("samples"))
            .withColumn("saturated_share", F.col("saturated_samples") / F.col("samples"))
            .drop("unacked_sum", *(f"{n}_at" for n in _NAMES))
            .join(queues, ["vhost", "channel"], "left"))


def prefetch_saturation(channels: DataFrame, consumers: DataFrame) -> DataFrame:
    """Per consuming channel: its client, samples, how many found unacked ≥ its prefetch limit (and the share),
    the highest and mean unacked, samples with unacked deliveries and no limit at all, and its consumers'
    queues. Unacked is counted by the broker per channel, so that is the unit."""
    return saturation_of(saturation_parts(channels), consumer_queues(consumers))


# -- redelivery hot spots ---------------------------------------------------------------------------------------
QUEUE_COUNTERS = ("delivered_total", "redelivered_total")


def hotspot_parts(queues: DataFrame, earlier: DataFrame | None = None) -> DataFrame:
    """Per queue: delivered and redelivered over `queues`' samples (the first counted from `earlier`'s last)."""
    counted = _increments(queues, QUEUE, QUEUE_COUNTERS, earlier)
    return counted.groupBy(*QUEUE).agg(
        F.max("type").alias("type"),
        F.sum("delivered").cast("long").alias("delivered"),
        F.sum("redelivered").cast("long").alias("redelivered"),
        F.min("taken_at").alias("first_seen"),
        F.max("taken_at").alias("last_seen"),
    )


def merge_hotspot_parts(earlier: DataFrame, later: DataFrame) -> DataFrame:
    return earlier.unionByName(later).groupBy(*QUEUE).agg(
        F.max("type").alias("type"), F.sum("delivered").cast("long").alias("delivered"),
        F.sum("redelivered").cast("long").alias("redelivered"), F.min("first_seen").alias("first_seen"),
        F.max("last_seen").alias("last_seen"))


def hotspots_of(parts: DataFrame) -> DataFrame:
    """The `redelivery_hotspots` report from `hotspot_parts`: ranked by redelivered / delivered."""
    share = F.when(F.col("delivered") > 0, F.col("redelivered") / F.col("delivered"))
    ranked = parts.where(F.col("redelivered") > 0).withColumn("redelivered_share", share)
    order = Window.orderBy(F.desc_nulls_first("redelivered_share"), F.desc("redelivered"), *QUEUE)
    return ranked.withColumn("rank", F.row_number().over(order))


def redelivery_hotspots(queues: DataFrame) -> DataFrame:
    """Queues ranked by redelivered / delivered over the history (ties by redeliveries), with the counts."""
    return hotspots_of(hotspot_parts(queues))


# -- publisher safety -------------------------------------------------------------------------------------------
CHANNEL_COUNTERS = ("published_total",)


def safety_parts(channels: DataFrame, window_s: int, earlier: DataFrame | None = None) -> DataFrame:
    """Per window and publishing channel: messages published (the first sample counted from `earlier`'s last),
    how the channel protects them, and who its client is, with when it was so named."""
    published = _increments(channels, CHANNEL, CHANNEL_COUNTERS, earlier)
    mode = (F.when(F.col("confirm"), "confirm").when(F.col("transactional"), "tx").otherwise("none"))
    return (published.where(F.col("published") > 0)
            .withColumn("window_start", window_start("taken_at", window_s))
            .withColumn("mode", mode)
            .groupBy("window_start", *CHANNEL, "user", "mode")
            .agg(F.sum("published").cast("long").alias("published"), *_named()))


def merge_safety_parts(earlier: DataFrame, later: DataFrame) -> DataFrame:
    return (earlier.unionByName(later).groupBy("window_start", *CHANNEL, "user", "mode")
            .agg(F.sum("published").cast("long").alias("published"), *_renamed()))


def safety_of(parts: DataFrame) -> DataFrame:
    """The `publisher_safety` report from `safety_parts`."""
    return parts.drop(*(f"{n}_at" for n in _NAMES))


def publisher_safety(channels: DataFrame, window_s: int) -> DataFrame:
    """Per window and publishing channel: messages published and how the channel protects them
    (`mode`: confirm, tx or none — none means the publisher cannot know whether the broker has them)."""
    return safety_of(safety_parts(channels, window_s))
