"""The pipeline's transformations on small handcrafted DataFrames: the audit exact to the message,
percentiles within percentile_approx's error, batching, and what the snapshot history shows."""

from __future__ import annotations

import random

import pytest
from pipeline_builders import Log, at, events_df, rows_of, snapshot_df, traced, traces_df

from ackscope.pipeline import audit, batching, latency, snapshots, traces


def _audit(spark, *logs, deadline=60.0, since=None, until=None):
    runs = audit.per_run(audit.classify(events_df(spark, *logs), deadline, since, until))
    return (rows_of(audit.delivery_audit(runs), ["run_id", "probe"]),
            rows_of(audit.lost_messages(runs), ["run_id", "probe", "seq"]))


def test_audit_counts_every_outcome_exactly_to_the_message(spark):
    log = Log()
    for seq in (1, 2, 3):
        log.happy(seq, seq)
    # 4: confirmed, never delivered, and the log runs on past its deadline: lost.
    log.add(4, "published", 4).add(4, "confirmed", 4.01, 0.01, batch_size=1)
    # 5: nacked by the broker; 6: returned (unroutable) and then confirmed: neither is lost.
    log.add(5, "published", 5).add(5, "nacked", 5.01, batch_size=1)
    log.add(6, "published", 6).add(6, "returned", 6.001).add(6, "confirmed", 6.002, 0.002, batch_size=1)
    # 7: delivered twice without a requeue: one duplicate, flagged redelivered the second time.
    log.happy(7, 7).add(7, "delivered", 7.5, 0.5, redelivered=True)
    # 8: requeued by the probe on purpose, then redelivered: a redelivery, not a duplicate.
    log.add(8, "published", 8).add(8, "delivered", 8.002, 0.002, redelivered=False).add(8, "requeued", 8.003)
    log.add(8, "delivered", 8.004, 0.004, redelivered=True).add(8, "acked", 8.005)
    log.add(8, "confirmed", 8.006, 0.006, batch_size=1)
    # 9: no confirm in time, republished after a reconnect, then confirmed and delivered.
    log.add(9, "published", 9).add(9, "confirm_timeout", 14).add(9, "republished", 15)
    log.add(9, "delivered", 15.002, 15.002, redelivered=False).add(9, "confirmed", 15.003, 15.003, batch_size=1)
    # 10: confirmed near the end of the log: within its deadline, awaiting, not lost.
    log.add(10, "published", 99.9).add(10, "confirmed", 99.95, 0.05, batch_size=1)
    log.happy(11, 100)
    # The same sequence number in another run is another message.
    other = Log(run_id="run2").happy(4, 50)

    rows, lost = _audit(spark, log, other)
    first = {k: v for k, v in rows[0].items() if k not in ("first_event", "last_event")}
    assert first == {"run_id": "run1", "probe": "classic-persistent", "queue_type": "classic", "persistent": True,
                     "published": 11, "confirmed": 10, "nacked": 1, "returned": 1, "confirm_timeouts": 1,
                     "republished": 1, "delivered": 7, "duplicates": 1, "redelivered": 2, "lost": 1,
                     "awaiting": 1, "out_of_order_first": 0, "out_of_order_redelivered": 0}
    assert rows[1]["run_id"] == "run2" and rows[1]["lost"] == 0 and rows[1]["delivered"] == 1
    assert [(r["run_id"], r["seq"], r["published_at"], r["confirmed_at"]) for r in lost] == \
        [("run1", 4, at(4).replace(tzinfo=None), at(4.01).replace(tzinfo=None))]


def test_the_audit_from_totals_of_disjoint_sets_of_messages_equals_the_audit_over_all_of_them(spark):
    """What an incremental run does with its buckets: per_run_of over each set's totals, the undelivered
    messages judged and the out-of-order ones gives per_run's rows, lists included."""
    from pyspark.sql import functions as F
    log = Log(consumer="ctag")
    for seq in range(1, 9):
        log.happy(seq, seq)
    log.add(9, "published", 9).add(9, "confirmed", 9.1, 0.1, batch_size=1)  # lost
    log.add(10, "published", 95).add(10, "confirmed", 95.1, 0.1, batch_size=1)  # awaiting
    log.add(12, "published", 96).add(12, "delivered", 96.1, 0.1, redelivered=False)
    log.add(11, "published", 96.2).add(11, "delivered", 96.3, 0.1, redelivered=False)  # out of order
    log.happy(13, 100).add(3, "delivered", 100.5, 97.5, redelivered=True)  # a duplicate, redelivered
    unknown = Log(run_id="run2").add(1, "delivered", 50, redelivered=False)  # its publish not in the log
    events = events_df(spark, log, unknown)
    classified = audit.classify(events, 60.0)
    messages = audit.messages(events).withColumn("bucket", (F.col("seq") % 3).cast("string"))
    told = audit.totals(messages.where(F.col("bucket") == "0"), "bucket") \
        .unionByName(audit.totals(messages.where(F.col("bucket") != "0"), "bucket"))
    judged = audit.judge(audit.undelivered(messages), audit.run_ends(events), 60.0)
    runs = audit.per_run_of(told, judged, audit.out_of_order(messages))
    keys = ["run_id", "probe"]
    assert rows_of(runs, keys) == rows_of(audit.per_run(classified), keys)
    [row] = [r for r in rows_of(runs, keys) if r["run_id"] == "run1"]
    assert (row["lost"], row["awaiting"], row["out_of_order_first"], row["duplicates"]) == (1, 1, 1, 1)
    assert [m["seq"] for m in row["lost_messages"]] == [9] and [m["seq"] for m in row["out_of_order_messages"]] == [11]


def test_order_is_judged_per_consumer_and_only_a_first_delivery_out_of_order_breaks_it(spark):
    log = Log(consumer="ctag-a")
    for seq, t in ((1, 1), (2, 2), (4, 4), (3, 5)):  # 3 after 4, first time: broken
        log.add(seq, "published", t - 0.5).add(seq, "delivered", t, 0.5, redelivered=False)
    log.add(2, "requeued", 5.5).add(2, "delivered", 6, 5.5, redelivered=True)  # 2 again after 4: expected
    # Another consumer has a mark of its own: 5 and 6 in order though the first consumer saw more before.
    for seq, t in ((5, 7), (6, 8)):
        log.add(seq, "published", t - 0.5).add(seq, "delivered", t, 0.5, redelivered=False, consumer="ctag-b")
    # 9 delivered, then 8 published again (its channel lost) and delivered: not judged, and it does not raise
    # the mark: 10 is in order. 7 delivered to no known consumer (a log before consumers were named): not judged.
    log.add(9, "published", 9).add(9, "delivered", 9.1, 0.1, redelivered=False)
    log.add(8, "published", 8.9).add(8, "republished", 9.2).add(8, "delivered", 9.3, 0.1, redelivered=False)
    log.add(10, "published", 9.4).add(10, "delivered", 9.5, 0.1, redelivered=False)
    log.rows.append({**log.rows[-1], "seq": 7, "consumer": None})
    runs = audit.per_run(audit.classify(events_df(spark, log), 60.0))
    [row] = rows_of(audit.delivery_audit(runs), ["run_id", "probe"])
    assert (row["out_of_order_first"], row["out_of_order_redelivered"]) == (1, 1)
    assert [(r["seq"], r["published_at"]) for r in rows_of(audit.out_of_order_messages(runs), ["seq"])] == \
        [(3, at(4.5).replace(tzinfo=None))]


def test_a_delivery_that_overtakes_its_confirm_is_not_a_loss(spark):
    log = Log().add(1, "published", 0).add(1, "delivered", 0.001, 0.001, redelivered=False)
    log.add(1, "confirmed", 0.004, 0.004, batch_size=1).happy(2, 200)
    rows, lost = _audit(spark, log)
    assert rows[0]["lost"] == 0 and rows[0]["duplicates"] == 0 and not lost


def test_since_and_until_choose_messages_by_their_first_event_and_later_deliveries_still_count(spark):
    log = Log()
    for seq, t in ((1, 10), (2, 20), (3, 30)):
        log.add(seq, "published", t).add(seq, "confirmed", t + 0.01, 0.01, batch_size=1)
    log.add(2, "delivered", 45, 25.0, redelivered=False)  # after --until, yet it was delivered
    log.happy(4, 300)
    rows, lost = _audit(spark, log, since=at(15), until=at(40))
    assert rows[0]["published"] == 2 and rows[0]["delivered"] == 1
    assert [r["seq"] for r in lost] == [3]


def _exact_rank_error(values: list[float], reported: float, p: float) -> float:
    """How far `reported`'s rank is from p, as a share of the values (0 when it is an exact p-quantile)."""
    ordered = sorted(values)
    below = sum(1 for v in ordered if v < reported) / len(ordered)
    at_most = sum(1 for v in ordered if v <= reported) / len(ordered)
    return 0.0 if below <= p <= at_most else min(abs(p - below), abs(p - at_most))


def test_confirm_latency_percentiles_are_right_within_the_approximation_error(spark):
    rng = random.Random(7)
    log = Log()
    minute_one = [rng.lognormvariate(-6, 0.8) for _ in range(20_000)]
    for seq, v in enumerate(minute_one, 1):
        log.add(seq, "confirmed", seq * 0.002, v, batch_size=1)  # all within the first minute
    log.add(99_999, "confirmed", 61, 0.25, batch_size=1)  # one in the next minute
    rows = rows_of(latency.confirm_latency(events_df(spark, log), 60), ["window_start"])
    assert [r["count"] for r in rows] == [20_000, 1]
    allowed = 1 / latency.ACCURACY + 1 / len(minute_one)
    for column, p in (("p50_s", 0.5), ("p90_s", 0.9), ("p99_s", 0.99), ("p999_s", 0.999)):
        assert _exact_rank_error(minute_one, rows[0][column], p) <= allowed, column
    assert rows[0]["max_s"] == max(minute_one)
    assert rows[1]["p50_s"] == rows[1]["max_s"] == 0.25


def test_windows_keep_probes_queue_types_and_persistence_apart(spark):
    a = Log(probe="classic-persistent").happy(1, 1).happy(2, 70)
    b = Log(probe="quorum", queue_type="quorum").happy(1, 2)
    c = Log(probe="classic-transient", persistent=False).happy(1, 3)
    rows = rows_of(latency.confirm_latency(events_df(spark, a, b, c), 60), ["window_start", "probe"])
    assert [(r["window_start"].minute, r["probe"], r["queue_type"], r["persistent"], r["count"]) for r in rows] == [
        (0, "classic-persistent", "classic", True, 1), (0, "classic-transient", "classic", False, 1),
        (0, "quorum", "quorum", True, 1), (1, "classic-persistent", "classic", True, 1)]


def test_delivery_latency_leaves_redeliveries_to_the_redelivery_report(spark):
    log = Log().happy(1, 1).happy(2, 2)
    log.add(3, "published", 3).add(3, "delivered", 3.01, 0.01, redelivered=False).add(3, "requeued", 3.02)
    log.add(3, "delivered", 3.5, 0.5, redelivered=True).add(3, "acked", 3.6)
    events = events_df(spark, log)
    delivered = rows_of(latency.delivery_latency(events, 60), ["window_start"])
    assert delivered[0]["count"] == 3 and delivered[0]["max_s"] == 0.01
    redelivered = rows_of(latency.redelivery(events, 60), ["window_start"])[0]
    assert (redelivered["deliveries"], redelivered["redelivered"], redelivered["requeued"]) == (4, 1, 1)
    assert redelivered["redelivered_share"] == 0.25 and redelivered["redelivery_p50_s"] == 0.5


def test_confirm_batches_count_frames_and_infer_the_batching_interval(spark):
    log = Log()
    seq = 0
    for t in (0.0, 0.2, 0.4, 0.6):  # a burst confirmed in frames of 5, one every 200 ms
        for _ in range(5):
            seq += 1
            log.add(seq, "confirmed", t, 0.1, batch_size=5)
    for t in (10, 11):
        seq += 1
        log.add(seq, "confirmed", t, 0.002, batch_size=1)
    events = events_df(spark, log)
    sizes = rows_of(batching.confirm_batches(events), ["batch_size"])
    assert [(r["batch_size"], r["messages"], r["frames"]) for r in sizes] == [(1, 2, 2), (5, 20, 4)]
    interval = rows_of(batching.confirm_batch_interval(events), ["probe"])[0]
    assert interval["multi_message_frames"] == 4 and interval["mean_batch_size"] == 5
    assert interval["interval_p50_s"] == pytest.approx(0.2) and interval["interval_p90_s"] == pytest.approx(0.2)


def _channel(t, name, unacked, limit, **kw):
    return {"taken_at": t, "vhost": "/", "channel": name, "connection_name": f"app-{name}", "user": "app",
            "messages_unacked": unacked, "prefetch_limit": limit, "prefetch_count": limit, "consumer_count": 1,
            "confirm": False, "transactional": False, **kw}


def test_prefetch_saturation_is_the_share_of_samples_at_the_limit(spark):
    channels = [_channel(t, "a", u, 10) for t, u in ((0, 10), (5, 10), (10, 4), (15, 12))]
    channels += [_channel(t, "b", u, None) for t, u in ((0, 0), (5, 300))]  # prefetch 0: nothing limits it
    channels += [_channel(0, "idle", 0, 5, consumer_count=0)]  # not consuming
    consumers = [{"taken_at": 0, "vhost": "/", "queue": q, "consumer_tag": q, "channel": c, "connection_name": "x",
                  "prefetch_count": 10, "ack_required": ack} for q, c, ack in
                 (("orders", "a", True), ("audit", "a", True), ("firehose", "b", False))]
    rows = rows_of(snapshots.prefetch_saturation(snapshot_df(spark, "channels", channels),
                                                 snapshot_df(spark, "consumers", consumers)), ["channel"])
    a, b = rows
    assert (a["channel"], a["samples"], a["saturated_samples"], a["saturated_share"], a["max_unacked"]) == \
        ("a", 4, 3, 0.75, 12)
    assert a["queues"] == ["audit", "orders"] and a["auto_ack"] is False and a["connection_name"] == "app-a"
    assert (b["saturated_samples"], b["unlimited_samples"], b["prefetch_limit"], b["auto_ack"]) == (0, 1, None, True)


def _queue(t, name, delivered, redelivered):
    return {"taken_at": t, "vhost": "/", "queue": name, "type": "classic", "delivered_total": delivered,
            "redelivered_total": redelivered}


def test_redelivery_hotspots_rank_queues_by_redelivered_share_across_counter_resets(spark):
    queues = [_queue(0, "loop", 100, 90), _queue(10, "loop", 200, 185),
              # the queue was re-created: its counters start again
              _queue(20, "flaky", 1000, 10), _queue(30, "flaky", 1100, 20), _queue(40, "flaky", 50, 5),
              _queue(0, "clean", 0, 0), _queue(10, "clean", 500, 0)]
    rows = rows_of(snapshots.redelivery_hotspots(snapshot_df(spark, "queues", queues)), ["rank"])
    assert [(r["rank"], r["queue"], r["delivered"], r["redelivered"]) for r in rows] == \
        [(1, "loop", 100, 95), (2, "flaky", 150, 15)]
    assert rows[0]["redelivered_share"] == 0.95


def test_publisher_safety_shows_each_publishing_channel_and_how_it_protects_messages(spark):
    channels = []
    for t, total in ((0, 0), (30, 100), (90, 250)):
        channels.append(_channel(t, "plain", 0, None, published_total=total))
        channels.append(_channel(t, "confirming", 0, None, published_total=total * 2, confirm=True))
        channels.append(_channel(t, "tx", 0, None, published_total=total // 10 + 1, transactional=True))
        channels.append(_channel(t, "consumer-only", 5, 10, published_total=0))
    rows = rows_of(snapshots.publisher_safety(snapshot_df(spark, "channels", channels), 60),
                   ["window_start", "channel"])
    assert [(r["window_start"].minute, r["channel"], r["mode"], r["published"]) for r in rows] == [
        (0, "confirming", "confirm", 200), (0, "plain", "none", 100), (0, "tx", "tx", 10),
        (1, "confirming", "confirm", 300), (1, "plain", "none", 150), (1, "tx", "tx", 15)]



# -- the applications' traced messages ------------------------------------------------------------------------
def test_the_trace_audit_counts_each_message_exactly(spark):
    rows = [traced(t, t + 0.5) for t in range(1, 7)]
    rows += [traced(7, None), traced(8, None),  # never delivered
             traced(9, 9.5, deliveries=3, duplicates=2, redelivered=1),  # delivered thrice to one service
             traced(10, 10.2, publish_error=True),
             traced(11, 20), traced(12, 12.5),  # 11 overtaken by 12: 11 is delivered out of publish order
             traced(13, 13.2, consumer="audit"), traced(14, 13.1, consumer="audit2"),  # other consumers: no order
             traced(1, 1.1, destination="events", service="admin")]
    audit_rows = rows_of(traces.trace_audit(traces_df(spark, rows)), ["destination", "service"])
    shop = {k: v for k, v in audit_rows[0].items() if k not in ("first_published_at", "last_published_at")}
    assert shop == {"destination": ",orders", "service": "shop", "published": 14, "delivered": 12,
                    "unprocessed": 2, "duplicated": 1, "duplicate_deliveries": 2, "redelivered": 1,
                    "out_of_order": 1, "publish_errors": 1}
    assert (audit_rows[0]["first_published_at"], audit_rows[0]["last_published_at"]) == (
        at(1).replace(tzinfo=None), at(14).replace(tzinfo=None))  # Spark's collect() gives UTC without a zone
    assert (audit_rows[1]["destination"], audit_rows[1]["published"], audit_rows[1]["out_of_order"]) == (
        "events", 1, 0)


def test_trace_queue_time_per_window_leaves_clock_skew_out_of_the_percentiles(spark):
    rows = [traced(t * 0.1, t * 0.1 + 0.25, processing_s=1.0) for t in range(100)]  # window 0: 0.25 s each
    rows += [traced(65, 64.0), traced(66, 96.0)]  # window 60: one skewed (delivered "before"), one after 30 s
    by_window = rows_of(traces.trace_queue_time(traces_df(spark, rows), 60), ["window_start"])
    first, second = by_window
    assert (first["window_start"], first["delivered"], first["clock_skewed"]) == (at(0).replace(tzinfo=None), 100, 0)
    assert first["p50_s"] == pytest.approx(0.25) and first["p99_s"] == pytest.approx(0.25)
    assert first["processing_p99_s"] == pytest.approx(1.0)
    assert (second["window_start"], second["delivered"], second["clock_skewed"], second["max_s"]) == (
        at(60).replace(tzinfo=None), 1, 1, pytest.approx(30.0))
