"""The delivery audit: for each probe run, what was published, confirmed, delivered — what was lost, and what
came out of publish order.

Pure DataFrame → DataFrame functions over the probe event log (docs/events.md). A message is one
(run_id, probe, seq); sequence numbers restart with each run.

Order is judged per consumer (the `consumer` column, its consumer tag), as the probe judges it live
(probes/audit.py): a first delivery (not flagged redelivered) whose seq is below that of a message first delivered
to the same consumer before it came out of order, a broken guarantee; a redelivery that does is expected. A
delivery after its message was published again is not judged, nor does it count for those after it.
"""

from __future__ import annotations

from datetime import datetime

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

PROBE = ["run_id", "probe", "queue_type", "persistent"]


def _count_kind(kind: str) -> F.Column:
    return F.sum(F.when(F.col("kind") == kind, 1).otherwise(0))


# How each of a message's columns combines across parts of its story (messages(a) with messages(b)).
_MERGE = {"queue_type": F.max, "persistent": F.max, "first_seen": F.min, "published_at": F.min,
          "confirmed_at": F.min, "republished_at": F.min, "nacks": F.sum, "returns": F.sum, "confirm_timeouts": F.sum,
          "republishes": F.sum, "deliveries": F.sum, "redeliveries": F.sum, "requeues": F.sum,
          "out_of_order_first": F.sum, "out_of_order_redeliveries": F.sum}
MESSAGE = ["run_id", "probe", "seq"]

CONSUMER = ["run_id", "probe", "consumer"]


def messages(events: DataFrame) -> DataFrame:
    """One row per message: when it was published and confirmed, and how its story went. `events` as `ordered`
    gives them, or raw (judged here as a whole log)."""
    kind, ts = F.col("kind"), F.col("ts")
    judged = events if "out_of_order" in events.columns else ordered(events)
    # Acks say nothing the deliveries do not; a probe's queue type and persistence are fixed for its run,
    # so they ride along instead of widening the shuffle's key.
    return judged.where(kind != "acked").groupBy(*MESSAGE).agg(
        F.max("queue_type").alias("queue_type"),
        F.max("persistent").alias("persistent"),
        F.min("ts").alias("first_seen"),
        F.min(F.when(kind == "published", ts)).alias("published_at"),
        F.min(F.when(kind == "confirmed", ts)).alias("confirmed_at"),
        F.min(F.when(kind == "republished", ts)).alias("republished_at"),
        _count_kind("nacked").alias("nacks"),
        _count_kind("returned").alias("returns"),
        _count_kind("confirm_timeout").alias("confirm_timeouts"),
        _count_kind("republished").alias("republishes"),
        _count_kind("delivered").alias("deliveries"),
        F.sum(F.when((kind == "delivered") & F.col("redelivered"), 1).otherwise(0)).alias("redeliveries"),
        _count_kind("requeued").alias("requeues"),
        F.sum(F.when(F.col("out_of_order") & ~F.col("redelivered"), 1).otherwise(0)).alias("out_of_order_first"),
        F.sum(F.when(F.col("out_of_order") & F.col("redelivered"), 1).otherwise(0)).alias("out_of_order_redeliveries"),
    )


def ordered(events: DataFrame, marks: DataFrame | None = None, earlier: DataFrame | None = None) -> DataFrame:
    """The events with `out_of_order` (null but for the deliveries judged) and `judged_seq` (the seq a judged first
    delivery raises its consumer's mark to). `marks` and `earlier`, where these events follow others already read:
    each consumer's mark (`order_marks`) and the `messages` of those others (their republishes)."""
    kind, seq = F.col("kind"), F.col("seq")
    republished = events.where(kind == "republished").groupBy(*MESSAGE).agg(F.min("ts").alias("again_at"))
    if earlier is not None:
        republished = republished.unionByName(earlier.where(F.col("republished_at").isNotNull())
                                              .select(*MESSAGE, F.col("republished_at").alias("again_at"))) \
            .groupBy(*MESSAGE).agg(F.min("again_at").alias("again_at"))
    deliveries = events.where((kind == "delivered") & F.col("consumer").isNotNull()) \
        .join(republished, MESSAGE, "left")
    judged = F.col("again_at").isNull() | (F.col("again_at") > F.col("ts"))
    before = Window.partitionBy(*CONSUMER).orderBy("ts", "seq").rowsBetween(Window.unboundedPreceding, -1)
    mark = F.max(F.when(judged & ~F.col("redelivered"), seq)).over(before)
    if marks is not None:
        deliveries = deliveries.join(marks, CONSUMER, "left")
        mark = F.greatest(mark, F.col("mark"))
    flagged = deliveries.withColumn("out_of_order", judged & F.coalesce(seq < mark, F.lit(False))) \
        .withColumn("judged_seq", F.when(judged & ~F.col("redelivered"), seq)) \
        .select(*events.columns, "out_of_order", "judged_seq")
    others = events.where((kind != "delivered") | F.col("consumer").isNull()) \
        .withColumn("out_of_order", F.lit(None).cast("boolean")).withColumn("judged_seq", F.lit(None).cast("long"))
    return flagged.unionByName(others)


def order_marks(judged: DataFrame) -> DataFrame:
    """Per run, probe and consumer: the highest seq first delivered to it and judged, from `ordered` events."""
    return judged.where(F.col("judged_seq").isNotNull()).groupBy(*CONSUMER).agg(F.max("judged_seq").alias("mark"))


def merge_order_marks(earlier: DataFrame, later: DataFrame) -> DataFrame:
    return earlier.unionByName(later).groupBy(*CONSUMER).agg(F.max("mark").alias("mark"))


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
    """`classify` from a log's `messages` (or some of them: an incremental run judges its `undelivered`) and
    `run_ends`."""
    # A message can only be judged once its deadline has passed within what the log covers.
    due = (F.unix_micros("confirmed_at") + int(loss_deadline_s * 1_000_000)) <= F.unix_micros("run_last_event")
    msgs = msgs.join(runs, ["run_id", "probe"])
    if since is not None:
        msgs = msgs.where(F.col("first_seen") >= F.lit(since))
    if until is not None:
        msgs = msgs.where(F.col("first_seen") < F.lit(until))
    return msgs.withColumn("lost", _undelivered() & due).withColumn("awaiting", _undelivered() & ~due)


def _undelivered() -> F.Column:
    """Confirmed, not returned, never delivered: lost once its loss deadline has passed within the log."""
    return F.col("confirmed_at").isNotNull() & (F.col("returns") == 0) & (F.col("deliveries") == 0)


def _messages_with(condition: F.Column) -> F.Column:
    return F.sum(F.when(condition, 1).otherwise(0)).cast("long")


def _told() -> dict[str, F.Column]:
    """The audit's counts that each message's own story decides, over `messages` rows: additive (min, max, sums)
    across disjoint sets of messages."""
    return {
        "first_event": F.min("first_seen"),
        "last_event": F.max("first_seen"),
        "published": _messages_with(F.col("published_at").isNotNull()),
        "confirmed": _messages_with(F.col("confirmed_at").isNotNull()),
        "nacked": _messages_with(F.col("nacks") > 0),
        "returned": _messages_with(F.col("returns") > 0),
        "confirm_timeouts": _messages_with(F.col("confirm_timeouts") > 0),
        "republished": F.sum("republishes").cast("long"),
        "delivered": _messages_with(F.col("deliveries") > 0),
        "duplicates": F.sum(F.greatest(F.col("deliveries") - 1 - F.col("requeues"), F.lit(0))).cast("long"),
        "redelivered": F.sum("redeliveries").cast("long"),
        "out_of_order_first": F.sum("out_of_order_first").cast("long"),
        "out_of_order_redelivered": F.sum("out_of_order_redeliveries").cast("long"),
    }


def _judged(out_of_order: F.Column) -> dict[str, F.Column]:
    """What moves with the run's end (lost, awaiting) and the listed messages, over `classify` rows."""
    lost = F.when(F.col("lost"), F.struct("seq", "published_at", "confirmed_at"))
    listed = F.when(out_of_order, F.struct("seq", "published_at"))
    return {"lost": _messages_with(F.col("lost")), "awaiting": _messages_with(F.col("awaiting")),
            "lost_messages": F.array_sort(F.collect_list(lost)),
            "out_of_order_messages": F.array_sort(F.collect_list(listed))}


def per_run(classified: DataFrame) -> DataFrame:
    """Per run and probe: published, confirmed, nacked, returned, confirm_timeouts, republished,
    delivered (distinct seq), duplicates (deliveries beyond the first, not counting the one redelivery each
    of the probe's own requeues causes), redelivered, out of order (first deliveries; redeliveries), lost and
    awaiting; and `lost_messages` and `out_of_order_messages`, those messages themselves (seq and when), gathered
    in the same pass: the per-message rows are the expensive part, too large to keep and too costly to build
    twice."""
    columns = {**_told(), **_judged(F.col("out_of_order_first") > 0)}
    return classified.groupBy(*PROBE).agg(*(c.alias(name) for name, c in columns.items()))


def totals(msgs: DataFrame, *by: str) -> DataFrame:
    """Per `by`, run and probe: the counts of `per_run` that each message's own story decides (an incremental run
    keeps them per range of sequence numbers, and merges only the ranges its new events reach)."""
    return msgs.groupBy(*by, *PROBE).agg(*(c.alias(name) for name, c in _told().items()))


def undelivered(msgs: DataFrame) -> DataFrame:
    """The `messages` confirmed, not returned and never delivered: lost or awaiting once judged (`judge`)."""
    return msgs.where(_undelivered())


def out_of_order(msgs: DataFrame) -> DataFrame:
    """The `messages` first delivered out of publish order."""
    return msgs.where(F.col("out_of_order_first") > 0)


def per_run_of(told: DataFrame, judged: DataFrame, listed: DataFrame) -> DataFrame:
    """`per_run` from the `totals` of disjoint sets of messages that together are the log's, its `undelivered`
    messages judged (`judge`), and its `out_of_order` messages: the same rows, without reading every message."""
    combine = {name: F.min if name == "first_event" else F.max if name == "last_event" else F.sum
               for name in _told()}
    judged = judged.select(*PROBE, "seq", "published_at", "confirmed_at", "lost", "awaiting",
                           F.lit(False).alias("listed"))
    # An out-of-order message was delivered, so it is never one of the undelivered: the two sets are disjoint.
    listed = listed.select(*PROBE, "seq", "published_at", F.lit(False).alias("lost"), F.lit(False).alias("awaiting"),
                           F.lit(True).alias("listed"))
    rows = told.select(*PROBE, *combine).unionByName(judged, allowMissingColumns=True) \
        .unionByName(listed, allowMissingColumns=True)
    columns = {**{name: f(name).cast("long") if f is F.sum else f(name) for name, f in combine.items()},
               **_judged(F.coalesce(F.col("listed"), F.lit(False)))}
    return rows.groupBy(*PROBE).agg(*(c.alias(name) for name, c in columns.items()))


def delivery_audit(runs: DataFrame) -> DataFrame:
    """The `delivery_audit` report from `per_run`."""
    return runs.drop("lost_messages", "out_of_order_messages")


def lost_messages(runs: DataFrame) -> DataFrame:
    """Every lost message, from `per_run`: run_id, probe, seq, when it was published and confirmed."""
    return _listed(runs, "lost_messages")


def out_of_order_messages(runs: DataFrame) -> DataFrame:
    """Every message first delivered out of publish order, from `per_run`: run_id, probe, seq, when it was
    published."""
    return _listed(runs, "out_of_order_messages")


def _listed(runs: DataFrame, column: str) -> DataFrame:
    return runs.select(*PROBE, F.explode(column).alias("m")).select(*PROBE, "m.*")
