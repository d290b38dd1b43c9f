"""The applications' own messages, one row each (ackscope.model.schemas.TRACE_MESSAGES, the exporter's history of
what their spans told): an audit per destination and publishing service, and queue-time percentiles over time
(pure DataFrame functions).

Times are the hosts' own: a first delivery that started before its publish (clock skew between the publishing and
the consuming host) is counted apart and kept out of the percentiles. Out of publish order: a message first
delivered to a consuming service after one published later to the same destination by the same service was
first delivered there. With competing consumers in that service, or a prefetch above one, order is not promised
and this counts what happened, not a fault.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from .latency import ACCURACY
from .windows import window_start

FLOW = ["destination", "service"]
_QUANTILES = (("p50_s", 0.5), ("p90_s", 0.9), ("p99_s", 0.99))


def _queue_time(messages: DataFrame) -> DataFrame:
    """`queue_time_s`: seconds from the publish span's start to the first delivery's (null for no delivery)."""
    return messages.withColumn("queue_time_s", (F.unix_micros("delivered_at") - F.unix_micros("published_at")) / 1e6)


def ordered(messages: DataFrame) -> DataFrame:
    """The messages with `out_of_order`: first delivered after a later-published message of the same destination
    and service was first delivered to the same consuming service (null where not delivered)."""
    before = Window.partitionBy(*FLOW, "consumer").orderBy("delivered_at", "published_at") \
        .rowsBetween(Window.unboundedPreceding, -1)
    latest = F.max("published_at").over(before)
    return messages.withColumn("out_of_order", F.when(F.col("delivered_at").isNotNull(),
                                                      F.coalesce(F.col("published_at") < latest, F.lit(False))))


def trace_audit(messages: DataFrame) -> DataFrame:
    """Per destination and publishing service: messages published, delivered, unprocessed (no delivery by the
    time the exporter forgot them), duplicated (delivered again to a service that had them) and how many times,
    redelivered by their spans' say, out of publish order, publish errors; the first and last publish."""
    m = ordered(messages)
    return m.groupBy(*FLOW).agg(
        F.count("*").alias("published"),
        F.count("delivered_at").alias("delivered"),
        F.sum(F.when(F.col("delivered_at").isNull(), 1).otherwise(0)).cast("long").alias("unprocessed"),
        F.sum(F.when(F.col("duplicates") > 0, 1).otherwise(0)).cast("long").alias("duplicated"),
        F.sum("duplicates").cast("long").alias("duplicate_deliveries"),
        F.sum("redelivered").cast("long").alias("redelivered"),
        F.sum(F.when(F.col("out_of_order"), 1).otherwise(0)).cast("long").alias("out_of_order"),
        F.sum(F.when(F.col("publish_error"), 1).otherwise(0)).cast("long").alias("publish_errors"),
        F.min("published_at").alias("first_published_at"), F.max("published_at").alias("last_published_at"))


def trace_queue_time(messages: DataFrame, window_s: int) -> DataFrame:
    """Per window of publish time, destination and publishing service: the messages first delivered, their queue
    time's p50, p90, p99 and max (seconds), the first deliveries before their publish by the clocks (left out),
    and the processing's p50 and p99."""
    m = _queue_time(messages.where(F.col("delivered_at").isNotNull())) \
        .withColumn("window_start", window_start("published_at", window_s))
    fair = F.when(F.col("queue_time_s") >= 0, F.col("queue_time_s"))
    q = F.percentile_approx(fair, [p for _, p in _QUANTILES], ACCURACY)
    processing = F.percentile_approx("processing_s", [0.5, 0.99], ACCURACY)
    return m.groupBy("window_start", *FLOW).agg(
        F.count(fair).alias("delivered"), *(q[i].alias(name) for i, (name, _) in enumerate(_QUANTILES)),
        F.max(fair).alias("max_s"), F.sum(F.when(F.col("queue_time_s") < 0, 1).otherwise(0)).cast("long")
        .alias("clock_skewed"), processing[0].alias("processing_p50_s"), processing[1].alias("processing_p99_s"))
