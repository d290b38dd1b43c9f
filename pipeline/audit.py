"""The delivery audit: for each probe run, what was published, confirmed, delivered — and what was lost.

Pure DataFrame → DataFrame functions over the probe event log (docs/events.md). A message is one
(run_id, probe, seq); sequence numbers restart with each run.
"""

from __future__ import annotations

from datetime import datetime

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

PROBE = ["run_id", "probe", "queue_type", "persistent"]


def _count_kind(kind: str) -> F.Column:
    return F.sum(F.when(F.col("kind") == kind, 1).otherwise(0))


# How each of a message's columns combines across parts of its story (messages(a) with messages(b)).
_MERGE = {"queue_type": F.max, "persistent": F.max, "first_seen": F.min, "published_at": F.min,
          "confirmed_at": F.min, "nacks": F.sum, "returns": F.sum, "confirm_timeouts": F.sum, "republishes": F.sum,
          "deliveries": F.sum, "redeliveries": F.sum, "requeues": F.sum}
MESSAGE = ["run_id", "probe", "seq"]


def messages(events: DataFrame) -> DataFrame:
    """One row per message: when it was published and confirmed, and how its story went."""
    kind, ts = F.col("kind"), F.col("ts")
    # Acks say nothing the deliveries do not; a probe's queue type and persistence are fixed for its run,
    # so they ride along instead of widening the shuffle's key.
    return events.where(kind != "acked").groupBy(*MESSAGE).agg(
        F.max("queue_type").alias("queue_type"),
        F.max("persistent").alias("persistent"),
        F.min("ts").alias("first_seen"),
        F.min(F.when(kind == "published", ts)).alias("published_at"),
        F.min(F.when(kind == "confirmed", ts)).alias("confirmed_at"),
        _count_kind("nacked").alias("nacks"),
        _count_kind("returned").alias("returns"),
        _count_kind("confirm_timeout").alias("confirm_timeouts"),
        _count_kind("republished").alias("republishes"),
        _count_kind("delivered").alias("deliveries"),
        F.sum(F.when((kind == "delivered") & F.col("redelivered"), 1).otherwise(0)).alias("redeliveries"),
        _count_kind("requeued").alias("requeues"),
    )


def merge_messages(earlier: DataFrame, later: DataFrame) -> DataFrame:
    """`messages` of two parts of the log as `messages` of the whole: min, max and sums combine exactly."""
    return earlier.unionByName(later).groupBy(*MESSAGE).agg(
        *(merge(c).alias(c) for c, merge in _MERGE.items()))


def run_ends(events: DataFrame) -> DataFrame:
    """Per run and probe: its last event, which decides whether a message's loss deadline has passed."""
    return events.groupBy("run_id", "probe").agg(F.max("ts").alias("run_last_event"))


def merge_run_ends(earlier: DataFrame, later: DataFrame) -> DataFrame:
    return earlier.unionByName(later).groupBy("run_id", "probe").agg(F.max("run_last_event").alias("run_last_event"))


def classify(events: DataFrame, loss_deadline_s: float, since: datetime | None = None,
             until: datetime | None = None) -> DataFrame:
    """`messages` first seen in [since, until), each marked lost (confirmed, not returned, never
    delivered, and its deadline passed before the run's last event) or awaiting (same, deadline not yet
    passed). The log beyond the range still counts as evidence of delivery."""
    return judge(messages(events), run_ends(events), loss_deadline_s, since, until)


def judge(msgs: DataFrame, runs: DataFrame, loss_deadline_s: float, since: datetime | None = None,
          until: datetime | None = None) -> DataFrame:
    """`classify` from a log's `messages` and `run_ends` (an incremental run keeps both, not the events)."""
    undelivered = (F.col("confirmed_at").isNotNull() & (F.col("returns") == 0) & (F.col("deliveries") == 0))
    # A message can only be judged once its deadline has passed within what the log covers.
    due = (F.unix_micros("confirmed_at") + int(loss_deadline_s * 1_000_000)) <= F.unix_micros("run_last_event")
    msgs = msgs.join(runs, ["run_id", "probe"])
    if since is not None:
        msgs = msgs.where(F.col("first_seen") >= F.lit(since))
    if until is not None:
        msgs = msgs.where(F.col("first_seen") < F.lit(until))
    return msgs.withColumn("lost", undelivered & due).withColumn("awaiting", undelivered & ~due)


def per_run(classified: DataFrame) -> DataFrame:
    """Per run and probe: published, confirmed, nacked, returned, confirm_timeouts, republished,
    delivered (distinct seq), duplicates (deliveries beyond the first, not counting the one redelivery each
    of the probe's own requeues causes), redelivered, lost and awaiting; and `lost_messages`, the lost ones
    themselves (seq, published_at, confirmed_at), gathered in the same pass: the per-message rows are
    the expensive part, too large to keep and too costly to build twice."""
    def messages_with(condition: F.Column) -> F.Column:
        return F.sum(F.when(condition, 1).otherwise(0)).cast("long")

    lost = F.when(F.col("lost"), F.struct("seq", "published_at", "confirmed_at"))
    return classified.groupBy(*PROBE).agg(
        F.min("first_seen").alias("first_event"),
        F.max("first_seen").alias("last_event"),
        messages_with(F.col("published_at").isNotNull()).alias("published"),
        messages_with(F.col("confirmed_at").isNotNull()).alias("confirmed"),
        messages_with(F.col("nacks") > 0).alias("nacked"),
        messages_with(F.col("returns") > 0).alias("returned"),
        messages_with(F.col("confirm_timeouts") > 0).alias("confirm_timeouts"),
        F.sum("republishes").cast("long").alias("republished"),
        messages_with(F.col("deliveries") > 0).alias("delivered"),
        F.sum(F.greatest(F.col("deliveries") - 1 - F.col("requeues"), F.lit(0))).cast("long").alias("duplicates"),
        F.sum("redeliveries").cast("long").alias("redelivered"),
        messages_with(F.col("lost")).alias("lost"),
        messages_with(F.col("awaiting")).alias("awaiting"),
        F.array_sort(F.collect_list(lost)).alias("lost_messages"),
    )


def delivery_audit(runs: DataFrame) -> DataFrame:
    """The `delivery_audit` report from `per_run`."""
    return runs.drop("lost_messages")


def lost_messages(runs: DataFrame) -> DataFrame:
    """Every lost message, from `per_run`: run_id, probe, seq, when it was published and confirmed."""
    return runs.select(*PROBE, F.explode("lost_messages").alias("m")).select(*PROBE, "m.*")
