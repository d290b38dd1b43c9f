"""Each diagnosis rule on small snapshots, at the edges of its thresholds."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
from snapshot_builders import channel, connection, consumer, node, queue, snapshot, stats

from ackscope.diagnosis.rules import RULES, Context, evaluate
from ackscope.diagnosis.thresholds import Thresholds
from ackscope.model.findings import worst_first
from ackscope.model.probes import Histogram, TargetStats
from ackscope.model.snapshot import Exchange, MessageStats, Unread, attributed


def _rules(ctx: Context) -> list[tuple[str, str, str]]:
    return [(f.rule, f.severity, f.object) for f in evaluate(ctx)]


def _only(ctx: Context, rule: str):
    return [f for f in evaluate(ctx) if f.rule == rule]


def test_a_healthy_snapshot_has_no_findings():
    s = snapshot(queues=[queue(messages_ready=5, messages_persistent=5)],
                 channels=[channel(message_stats=stats(publish=100, confirm=100))],
                 consumers=[consumer()], connections=[connection()], nodes=[node()])
    assert evaluate(Context(s, s)) == []


def test_hoarding_consumer_with_prefetch_zero_is_attributed_and_critical_when_it_holds_many():
    t = Thresholds(unlimited_prefetch_unacked_critical=1000)
    for unacked, severity in ((999, "warning"), (1000, "critical")):
        s = snapshot(channels=[channel(prefetch_count=0, messages_unacked=unacked)],
                     consumers=[consumer(prefetch_count=0, connection_name="hoarder")], queues=[queue()])
        [f] = _only(Context(s, thresholds=t), "prefetch-unlimited")
        assert (f.severity, f.connection_name, f.evidence["unacked"]) == (severity, "hoarder", unacked)
        assert f.object == "channel ch 1" and "Channel Prefetch" in f.remedy


def test_prefetch_zero_with_a_global_limit_is_not_unlimited():
    s = snapshot(channels=[channel(prefetch_count=0, global_prefetch_count=100)],
                 consumers=[consumer(prefetch_count=0)], queues=[queue()])
    assert _only(Context(s), "prefetch-unlimited") == []


def test_auto_ack_consumer_is_info_when_idle_and_warning_with_a_backlog_or_a_fast_rate():
    t = Thresholds(auto_ack_backlog=1000, auto_ack_delivery_rate=100)
    con = consumer(ack_required=False)
    quiet = snapshot(queues=[queue(messages_ready=999)], consumers=[con], channels=[channel()])
    assert _only(Context(quiet, thresholds=t), "auto-ack-consumer")[0].severity == "info"
    backlog = snapshot(queues=[queue(messages_ready=1000)], consumers=[con], channels=[channel()])
    assert _only(Context(backlog, thresholds=t), "auto-ack-consumer")[0].severity == "warning"
    before = snapshot(1000.0, queues=[queue(message_stats=stats(deliver_get=0))], consumers=[con])
    after = snapshot(1010.0, queues=[queue(message_stats=stats(deliver_get=1000))], consumers=[con])
    [f] = _only(Context(after, before, thresholds=t), "auto-ack-consumer")
    assert f.severity == "warning" and f.evidence["delivery_rate"] == 100.0


def test_consumer_at_its_prefetch_with_ready_messages_behind_it_is_saturated():
    full = snapshot(channels=[channel(prefetch_count=10, messages_unacked=10)],
                    consumers=[consumer(prefetch_count=10)], queues=[queue(messages_ready=1)])
    [f] = _only(Context(full), "prefetch-saturated")
    assert f.evidence == {"queue": "q", "unacked": 10, "prefetch_limit": 10, "ready": 1}
    one_short = snapshot(channels=[channel(prefetch_count=10, messages_unacked=9)],
                         consumers=[consumer(prefetch_count=10)], queues=[queue(messages_ready=1)])
    assert _only(Context(one_short), "prefetch-saturated") == []
    drained = snapshot(channels=[channel(prefetch_count=10, messages_unacked=10)],
                       consumers=[consumer(prefetch_count=10)], queues=[queue(messages_ready=0)])
    assert _only(Context(drained), "prefetch-saturated") == []


def test_prefetch_one_fires_from_the_backlog_threshold():
    t = Thresholds(prefetch_one_backlog=100)
    for ready, fires in ((99, False), (100, True)):
        s = snapshot(channels=[channel(prefetch_count=1)], consumers=[consumer(prefetch_count=1)],
                     queues=[queue(messages_ready=ready)])
        assert bool(_only(Context(s, thresholds=t), "prefetch-one")) is fires


def test_requeue_loop_needs_redeliveries_comparable_to_deliveries_and_a_minimum_rate():
    t = Thresholds(requeue_ratio=0.5, requeue_min_rate=1.0)

    def ctx(redeliver, deliver, ack=None):
        before = snapshot(1000.0, queues=[queue(message_stats=stats(deliver_get=0, redeliver=0))])
        after = snapshot(1010.0, queues=[queue(message_stats=stats(deliver_get=deliver, redeliver=redeliver,
                                                                   ack=ack))])
        return Context(after, before, thresholds=t)
    assert _only(ctx(redeliver=50, deliver=100, ack=50), "requeue-loop")[0].severity == "warning"
    assert _only(ctx(redeliver=50, deliver=100), "requeue-loop")[0].severity == "critical"  # nothing acked
    assert _only(ctx(redeliver=95, deliver=100), "requeue-loop")[0].severity == "critical"
    assert _only(ctx(redeliver=49, deliver=100), "requeue-loop") == []  # below half
    assert _only(ctx(redeliver=6, deliver=10, ack=4), "requeue-loop") == []  # under 1/s, and acks get through
    assert _only(Context(snapshot(queues=[queue(message_stats=stats(redeliver=10**6))])), "requeue-loop") == []


def test_queue_findings_name_the_clients_that_consume_from_the_queue():
    def looping(*consumers):
        before = snapshot(1000.0, queues=[queue(message_stats=stats(deliver_get=0, redeliver=0))])
        after = snapshot(1010.0, queues=[queue(message_stats=stats(deliver_get=100, redeliver=90))],
                         consumers=list(consumers))
        [f] = _only(Context(after, before), "requeue-loop")
        return f.connection_name, f.client, f.identity
    assert looping(consumer(connection_name="billing", client="Pika 1.4.4")) == ("billing", "Pika 1.4.4", "billing")
    # The label holds only the names the clients gave; the identity names the unnamed one too.
    unnamed = consumer(connection_name="", client="py-amqp 5.4.2", identity="py-amqp 5.4.2 from 10.0.0.9:4242 as app")
    assert looping(unnamed, consumer(connection_name="billing")) == \
        ("billing", "py-amqp 5.4.2", "billing, py-amqp 5.4.2 from 10.0.0.9:4242 as app")
    many = [consumer(connection_name=f"worker-{i}") for i in range(5)]
    assert looping(*many)[0] == "worker-0, worker-1, worker-2 and 2 more"
    assert looping() == ("", "", "")  # nobody consumes now


def test_publishers_without_confirms_and_transactional_ones_are_told_apart():
    before = snapshot(700.0, channels=[channel("plain", confirm=False, message_stats=stats(publish=3))])
    s = snapshot(channels=[channel("plain", confirm=False, message_stats=stats(publish=303), connection_name="p1"),
                           channel("tx", confirm=False, transactional=True, message_stats=stats(publish=3)),
                           channel("idle", confirm=False, message_stats=stats(publish=0))])
    assert _rules(Context(s, before)) == [("publisher-without-confirms", "warning", "channel plain"),
                                          ("transactional-publisher", "warning", "channel tx")]


def test_a_publisher_without_confirms_sending_little_over_the_window_is_info():
    # Celery's event channel: a worker heartbeat every 2 s to a fanout exchange, 0.5 a second.
    t = Thresholds(publish_rate_at_stake=1.0)
    start = snapshot(700.0, channels=[channel("events", confirm=False, message_stats=stats(publish=1000))])
    for published, severity in ((1150, "info"), (1300, "warning")):
        now = snapshot(1000.0, channels=[channel("events", confirm=False, message_stats=stats(publish=published))])
        [f] = _only(Context(now, start, thresholds=t), "publisher-without-confirms")
        assert (f.severity, f.evidence["window_seconds"]) == (severity, 300.0)
    # With no window yet (the exporter's first poll) nothing says it publishes much: info until it does.
    assert _only(Context(now, thresholds=t), "publisher-without-confirms")[0].severity == "info"


def test_publisher_nacks_are_inferred_from_publish_minus_confirm_minus_unconfirmed_at_two_polls():
    earlier = snapshot(995.0, channels=[channel(messages_unconfirmed=1, message_stats=stats(publish=6, confirm=2))])
    nacked = snapshot(channels=[channel(messages_unconfirmed=2, message_stats=stats(publish=10, confirm=5))])
    start = snapshot(700.0, channels=[channel(messages_unconfirmed=0, message_stats=stats(publish=2, confirm=2))])
    [f] = _only(Context(nacked, earlier, window=start), "publisher-nacked")
    assert (f.evidence["inferred_nacked"], f.evidence["nacked_in_window"]) == (3, 3) and "infers" in f.explanation
    # Nacked before the window and not since: the gap is history, not a finding.
    assert _only(Context(nacked, earlier, window=earlier), "publisher-nacked") == []
    balanced = snapshot(995.0, channels=[channel(messages_unconfirmed=4, message_stats=stats(publish=6, confirm=2))])
    assert _only(Context(nacked, balanced), "publisher-nacked") == []  # a gap one poll shows may be sampling
    assert _only(Context(nacked), "publisher-nacked") == []
    assert _only(Context(balanced, nacked), "publisher-nacked") == []
    assert _only(Context(nacked, nacked), "publisher-nacked") == []  # one sample read by two polls is one


def test_unconfirmed_backlog_fires_when_large_or_growing():
    t = Thresholds(unconfirmed_backlog=1000, unconfirmed_growth=100)
    assert _only(Context(snapshot(channels=[channel(messages_unconfirmed=999)]), thresholds=t),
                 "unconfirmed-backlog") == []
    assert _only(Context(snapshot(channels=[channel(messages_unconfirmed=1000)]), thresholds=t),
                 "unconfirmed-backlog")
    before = snapshot(1000.0, channels=[channel(messages_unconfirmed=50)])
    after = snapshot(1005.0, channels=[channel(messages_unconfirmed=150)])
    [f] = _only(Context(after, before, thresholds=t), "unconfirmed-backlog")
    assert f.evidence == {"unconfirmed": 150, "growth": 100}
    # A burst caught in flight by one poll, with nothing waiting at the one before: not a backlog.
    idle = snapshot(1000.0, channels=[channel(messages_unconfirmed=0)])
    assert _only(Context(after, idle, thresholds=t), "unconfirmed-backlog") == []


def test_unroutable_messages_name_the_publishing_channel_and_its_client():
    s = snapshot(channels=[channel("dropper", connection_name="billing",
                                   message_stats=stats(publish=5, drop_unroutable=5)),
                           channel("returner", message_stats=stats(publish=2, return_unroutable=2))])
    start = snapshot(700.0, channels=[channel("returner", message_stats=stats(publish=1, return_unroutable=0))])
    found = {(f.rule, f.object, f.connection_name) for f in evaluate(Context(s, start))}
    assert ("unroutable-dropped", "channel dropper", "billing") in found  # opened within the window: all 5
    assert ("unroutable-returned", "channel returner", "app") in found


def test_unroutable_messages_count_over_the_window_not_the_channels_life():
    # A Celery worker drops one message at start-up; an hour later its lifetime count still says 1.
    t = Thresholds(window_seconds=300)
    dropper = channel("worker", confirm=False, message_stats=stats(publish=900, drop_unroutable=1))
    start = snapshot(700.0, channels=[replace(dropper, message_stats=stats(publish=600, drop_unroutable=1))])
    assert _only(Context(snapshot(channels=[dropper]), start, thresholds=t), "unroutable-dropped") == []
    dropping = replace(dropper, message_stats=stats(publish=900, drop_unroutable=31))
    [f] = _only(Context(snapshot(channels=[dropping]), start, thresholds=t), "unroutable-dropped")
    assert f.evidence["drop_unroutable_in_window"] == 30 and f.evidence["rate"] == 0.1
    assert "in the last 300s" in f.explanation
    assert _only(Context(snapshot(channels=[dropping]), thresholds=t), "unroutable-dropped") == []  # first poll
    # One message in the window (a worker that started a minute ago) is info; a second makes a warning.
    young = replace(dropper, message_stats=stats(publish=1, drop_unroutable=1))
    assert [f.severity for f in _only(Context(snapshot(channels=[young]), snapshot(700.0), thresholds=t),
                                      "unroutable-dropped")] == ["info"]
    assert f.severity == "warning"


def test_queue_rules_transient_in_durable_non_durable_backlog_and_no_consumers():
    t = Thresholds(non_durable_backlog=100, no_consumers_backlog=100)
    s = snapshot(queues=[queue("mixed", messages_ready=10, messages_persistent=7),
                         queue("temp", durable=False, messages_ready=100, messages_persistent=0),
                         queue("orphan", consumers=0, messages_ready=100, messages_persistent=100),
                         queue("small-orphan", consumers=0, messages_ready=99, messages_persistent=99)])
    # A poll before, at which they held as much: nothing arrived that their persistent counts could lag behind.
    found = {(f.rule, f.object) for f in evaluate(Context(s, replace(s, taken_at=s.taken_at - 10), thresholds=t))}
    assert found == {("transient-in-durable-queue", "queue mixed"), ("non-durable-queue-backlog", "queue temp"),
                     ("no-consumers-backlog", "queue orphan")}


def test_a_healthy_publishers_newest_persistent_messages_not_counted_yet_are_not_transient():
    """Measured in the field cases on 4.3.6 under load: a healthy publisher's last few persistent messages (two a
    second) counted in the queue's depth and not yet in its persistent count, at polls a second apart."""
    then = queue("orders", messages_ready=4, messages_persistent=4, message_stats=stats(publish=100))
    now = replace(then, messages_ready=6, messages_persistent=3, message_stats=stats(publish=120))
    assert not _only(Context(snapshot(1010.0, queues=[now]), snapshot(1000.0, queues=[then])),
                     "transient-in-durable-queue")


def test_a_burst_of_persistent_messages_not_counted_yet_is_not_transient_however_long_the_window():
    """Measured in the field cases on 3.10.8 under load: three persistent messages published at once, listed as
    ready and not yet as persistent at the next polls (a second apart) of a window of 300 s. What arrived since the
    newest poll at least PERSISTENT_COUNT_LAG old may be uncounted; what was there then may not."""
    from ackscope.diagnosis.queues import PERSISTENT_COUNT_LAG
    empty = queue("drained", messages_ready=0, messages_persistent=0, message_stats=stats(publish=0))
    burst = replace(empty, messages_ready=3, message_stats=stats(publish=3))
    start, earlier = snapshot(700.0, queues=[empty]), snapshot(998.0 - PERSISTENT_COUNT_LAG, queues=[empty])
    ctx = Context(snapshot(1000.0, queues=[burst]), snapshot(999.0, queues=[burst]), window=start, earlier=earlier)
    assert not _only(ctx, "transient-in-durable-queue")
    # Still uncounted once the poll it arrived after is that old: transient.
    later = Context(snapshot(1010.0, queues=[burst]), snapshot(1009.0, queues=[burst]), window=start,
                    earlier=snapshot(1000.0, queues=[burst]))
    [f] = _only(later, "transient-in-durable-queue")
    assert f.evidence["transient"] == 3


def test_connection_rules_heartbeat_and_blocked_states():
    s = snapshot(connections=[connection("a", heartbeat_seconds=0, connection_name="legacy"),
                              connection("b", state="blocked"), connection("c", state="flow"),
                              connection("d", state="running")],
                 channels=[channel(connection="a", consumer_count=1)])
    assert _rules(Context(s)) == [("connection-blocked", "warning", "connection b"),
                                  ("heartbeat-disabled", "warning", "connection a"),
                                  ("connection-blocked", "info", "connection c")]


def test_alarms_are_critical_and_sorted_first():
    s = snapshot(nodes=[node(mem_alarm=True), node("rabbit@b", disk_free_alarm=True)],
                 connections=[connection(heartbeat_seconds=0)])
    assert _rules(Context(s)) == [("disk-alarm", "critical", "node rabbit@b"),
                                  ("memory-alarm", "critical", "node rabbit@test"),
                                  ("heartbeat-disabled", "info", "connection conn")]


def test_heartbeat_zero_is_a_warning_only_where_something_is_at_stake():
    # Celery's producer-pool connection: heartbeat 0, idle. Its consuming connection would be a warning.
    idle = snapshot(connections=[connection("pool", heartbeat_seconds=0)])
    assert [(f.severity, f.evidence["consumes"]) for f in _only(Context(idle), "heartbeat-disabled")] == \
        [("info", False)]
    start = snapshot(700.0, channels=[channel(connection="pool", consumer_count=0, message_stats=stats(publish=0))])
    busy = replace(idle, channels=(channel(connection="pool", consumer_count=0, message_stats=stats(publish=600)),))
    assert _only(Context(busy, start), "heartbeat-disabled")[0].severity == "warning"


def test_a_backlog_in_a_temporary_queue_is_info_and_in_a_plain_non_durable_one_a_warning():
    t = Thresholds(non_durable_backlog=100)
    s = snapshot(queues=[queue("celeryev.1f2e", durable=False, auto_delete=True, messages_ready=150),
                         queue("amq.gen-reply", durable=False, exclusive=True, messages_ready=150),
                         queue("orders", durable=False, messages_ready=150)])
    assert {(f.object, f.severity) for f in _only(Context(s, thresholds=t), "non-durable-queue-backlog")} == {
        ("queue celeryev.1f2e", "info"), ("queue amq.gen-reply", "info"), ("queue orders", "warning")}


def test_prefetch_unlimited_holding_nothing_is_info():
    s = snapshot(channels=[channel(prefetch_count=0, messages_unacked=0)], consumers=[consumer(prefetch_count=0)],
                 queues=[queue()])
    assert [f.severity for f in _only(Context(s), "prefetch-unlimited")] == ["info"]


def test_a_queue_read_with_basic_get_is_read_and_polling_has_its_own_finding():
    t = Thresholds(no_consumers_backlog=100)
    start = snapshot(700.0, queues=[queue("polled", consumers=0, messages_ready=277)])
    # amqp-get once a second: gets with ack, 277 waiting. Not "nothing consumes": polling is behind.
    polled = queue("polled", consumers=0, messages_ready=277, message_stats=stats(get=300, deliver_get=300))
    found = {f.rule: f for f in evaluate(Context(snapshot(queues=[polled]), start, thresholds=t))}
    assert "no-consumers-backlog" not in found
    assert (found["queue-polled"].severity, found["queue-polled"].evidence["get_rate"]) == ("warning", 1.0)
    # Polled without ack, the queue kept short: still a warning (a fetched message dies with its reader).
    lossy = replace(polled, messages_ready=0, message_stats=stats(get_no_ack=30))
    [f] = _only(Context(snapshot(queues=[lossy]), start, thresholds=t), "queue-polled")
    assert f.severity == "warning" and "without ack" in f.explanation
    # Polled with ack and keeping up: info.
    keeping_up = replace(polled, messages_ready=0)
    assert _only(Context(snapshot(queues=[keeping_up]), start, thresholds=t), "queue-polled")[0].severity == "info"
    # Unread, it is what it was.
    unread = replace(polled, message_stats=stats())
    assert _only(Context(snapshot(queues=[unread]), start, thresholds=t), "no-consumers-backlog")


def _probe(target="classic-persistent", persistent=True, up=True, buckets=None, consumers=1, **counters
           ) -> TargetStats:
    return TargetStats(target, "classic", persistent, up, counters,
                       {"confirm_latency_seconds": Histogram(buckets or ((0.01, 10.0), (1.0, 10.0), (math.inf, 10.0)))},
                       {"consumers": consumers})


def test_probe_rules_from_probe_statistics():
    slow = ((0.5, 90.0), (1.0, 98.0), (2.0, 100.0), (math.inf, 100.0))
    beyond = ((1.0, 50.0), (30.0, 90.0), (math.inf, 100.0))
    probes = (_probe("lost-p", lost=2), _probe("lost-t", persistent=False, lost=1), _probe("slow", buckets=slow),
              _probe("beyond", buckets=beyond), _probe("reject-publish", nacked=5), _probe("nacks", nacked=1),
              _probe("dups", duplicates=3), _probe("down", up=False), _probe("order-one", out_of_order_first=1),
              _probe("order-two", consumers=2, out_of_order_first=1, out_of_order_redelivered=4),
              _probe("requeued", consumers=2, out_of_order_redelivered=40))  # expected: no finding
    found = {(f.rule, f.severity, f.object) for f in evaluate(Context(snapshot(), probes=probes))}
    assert found == {("probe-message-lost", "critical", "probe lost-p"),
                     ("probe-message-lost", "warning", "probe lost-t"),
                     ("probe-confirm-latency-high", "warning", "probe slow"),
                     ("probe-confirm-latency-high", "warning", "probe beyond"),
                     ("probe-nacked", "info", "probe reject-publish"), ("probe-nacked", "warning", "probe nacks"),
                     ("probe-duplicates", "info", "probe dups"), ("probe-down", "warning", "probe down"),
                     ("probe-out-of-order", "critical", "probe order-one"),
                     ("probe-out-of-order", "warning", "probe order-two")}
    beyond_finding = next(f for f in evaluate(Context(snapshot(), probes=probes)) if f.object == "probe beyond")
    assert beyond_finding.evidence["confirm_p99_seconds_above"] == 30.0
    json.dumps([f.to_json() for f in evaluate(Context(snapshot(), probes=probes))], allow_nan=False)


def test_every_rule_id_is_unique_and_has_meaning_and_remedy():
    ids = [r.id for r in RULES]
    assert len(ids) == len(set(ids)) == 64
    assert all(r.meaning and r.remedy for r in RULES)


@pytest.mark.parametrize("table, message", [({"colour": 1}, "unknown threshold"), ({"requeue_ratio": -1}, "0 or more"),
                                            ({"prefetch_one_backlog": "many"}, "must be a number")])
def test_bad_thresholds_are_refused(table, message):
    with pytest.raises(ValueError, match=message):
        Thresholds.from_table(table)


def test_thresholds_from_toml_override_defaults():
    t = Thresholds.from_table({"prefetch_one_backlog": 5, "requeue_ratio": 0.8})
    assert (t.prefetch_one_backlog, t.requeue_ratio, t.no_consumers_backlog) == (5, 0.8, 100)


def test_worst_first_orders_by_severity_then_rule():
    s = snapshot(nodes=[node(mem_alarm=True)], connections=[connection(heartbeat_seconds=0, state="flow")],
                 channels=[channel(consumer_count=1)])
    assert [f.severity for f in worst_first(evaluate(Context(s)))] == ["critical", "warning", "info"]


def test_docs_rules_reference_is_the_one_generated_from_the_code():
    from pathlib import Path

    from ackscope.apps.reference import rules_markdown
    doc = (Path(__file__).parent.parent / "docs" / "rules.md").read_text()
    assert rules_markdown() in doc, "docs/rules.md is stale: paste python -m ackscope.apps.reference rules"


def test_a_finding_keeps_the_time_it_was_first_seen_until_a_poll_no_longer_finds_it():
    from ackscope.diagnosis.onset import Onset
    from ackscope.model.findings import Finding
    onset = Onset()
    loop = Finding("requeue-loop", "critical", "/", "queue orders", "")
    other = Finding("prefetch-one", "info", "/", "channel c1", "billing")
    assert [f.since for f in onset.stamp([loop], 100.0)] == [100.0]
    assert [f.since for f in onset.stamp([loop, other], 110.0)] == [100.0, 110.0]
    assert [f.since for f in onset.stamp([other], 120.0)] == [110.0]  # the loop stopped
    assert [f.since for f in onset.stamp([loop, other], 130.0)] == [130.0, 110.0]  # and started again
    assert onset.stamp([loop], 140.0)[0].to_json()["since"] == 130.0


def test_the_probes_own_consumer_and_queue_are_never_judged():
    probe = "ackscope-probe consumer"
    q = queue("ackscope.probe.reject-publish", messages_ready=500, consumers=1, messages_unacked=1)
    s = snapshot(queues=[q], channels=[channel(connection_name=probe, prefetch_count=1, messages_unacked=1)],
                 consumers=[consumer(q.name, connection_name=probe, prefetch_count=1)])
    assert evaluate(Context(s, s)) == []
    # The same slow prefetch-1 consumer in an application is judged.
    app = snapshot(queues=[replace(q, name="orders")], channels=[channel(prefetch_count=1, messages_unacked=1)],
                   consumers=[consumer("orders", prefetch_count=1)])
    assert {f.rule for f in evaluate(Context(app, app))} >= {"prefetch-saturated", "prefetch-one"}


def test_an_unnamed_client_is_named_by_its_library_address_and_user():
    conn = connection("10.0.3.7:51234 -> 10.0.0.1:5672", connection_name="", client="py-amqp 5.4.2",
                      peer_host="10.0.3.7", peer_port=51234, user="celery", heartbeat_seconds=0)
    s = attributed(snapshot(connections=[conn], queues=[queue(messages_ready=500)],
                            channels=[channel(connection=conn.name, connection_name="", prefetch_count=1)],
                            consumers=[consumer(connection=conn.name, connection_name="", prefetch_count=1)]))
    found = {f.rule: f for f in evaluate(Context(s, s))}
    who = "py-amqp 5.4.2 from 10.0.3.7:51234 as celery"
    assert found["heartbeat-disabled"].identity == found["prefetch-one"].identity == who
    # The labels keep their word: no name given, and the library, which does not change at a reconnect.
    assert found["prefetch-one"].connection_name == "" and found["prefetch-one"].client == "py-amqp 5.4.2"
    assert found["prefetch-one"].culprit == f"channel ch 1 ({who})"
    # A named client keeps its name.
    assert replace(conn, connection_name="billing").identity == "billing"


def test_a_queue_finding_names_the_consumers_of_the_poll_before_when_this_one_lists_none():
    # The consumer list failed or lagged this poll; the queue still counts its consumer.
    q = replace(queue("jobs", messages_ready=0, consumers=1), message_stats=stats(deliver_get=100, redeliver=100))
    before = snapshot(990.0, queues=[replace(q, message_stats=stats(deliver_get=0, redeliver=0))],
                      consumers=[consumer("jobs", connection_name="",
                                          identity="aiormq 6.9.4 from 10.0.0.9:4242 as app")])
    [f] = _only(Context(snapshot(queues=[q]), before), "requeue-loop")
    assert f.identity == "aiormq 6.9.4 from 10.0.0.9:4242 as app"


def test_dead_lettered_messages_no_target_confirms_are_dead_lettering_stuck_and_critical_near_the_length_limit():
    def q(held, **kw):
        return queue("orders", type="quorum", messages_dlx=held, dead_letter_exchange="dlx",
                     dead_letter_strategy="at-least-once", messages_ready=2, **kw)
    start = snapshot(taken_at=0.0, queues=[q(5)])
    [f] = _only(Context(snapshot(taken_at=60.0, queues=[q(8)]), start), "dead-lettering-stuck")
    assert (f.severity, f.evidence["dead_lettered_held"], f.evidence["held_earlier"]) == ("warning", 8, 5)
    assert "exchange 'dlx' with each message's own routing key has not confirmed" in f.explanation
    [full] = _only(Context(snapshot(taken_at=60.0, queues=[q(8, max_length=10)]), start), "dead-lettering-stuck")
    assert full.severity == "critical" and "publishers are refused next" in full.explanation
    assert not _only(Context(snapshot(taken_at=60.0, queues=[q(3)]), start), "dead-lettering-stuck"), "draining"
    assert not _only(Context(snapshot(taken_at=60.0, queues=[q(8)])), "dead-lettering-stuck"), "one sample"


def test_dead_lettering_that_stopped_within_the_window_is_judged_against_the_poll_before():
    def q(held):
        return queue("orders", type="quorum", messages_dlx=held, dead_letter_exchange="dlx",
                     dead_letter_strategy="at-least-once")
    start, previous = snapshot(taken_at=0.0, queues=[q(0)]), snapshot(taken_at=50.0, queues=[q(6)])
    [f] = _only(Context(snapshot(taken_at=60.0, queues=[q(9)]), previous, window=start), "dead-lettering-stuck")
    assert f.evidence["held_earlier"] == 6
    # An idle stuck queue's record is the same between polls (snapshots share unchanged records): still stuck.
    idle = q(6)
    [f] = _only(Context(snapshot(taken_at=60.0, queues=[idle]), snapshot(taken_at=50.0, queues=[idle])),
                "dead-lettering-stuck")
    assert (f.evidence["dead_lettered_held"], f.evidence["held_earlier"]) == (6, 6)
    assert not _only(Context(snapshot(taken_at=60.0, queues=[idle]), snapshot(taken_at=60.0, queues=[idle])),
                     "dead-lettering-stuck"), "one poll given as its own previous one"


# -- issue 56, item 5: stuck dead-lettering names the target that refuses the messages --------------------------
def _stuck(*parts, key: str | None = "late", exchange: str | None = "dlx", unread=(), exchanges=None):
    """The dead-lettering-stuck finding of quorum queue orders, dead-lettering at-least-once to `exchange` with
    routing key `key`, beside the queues `parts` and the vhost's exchanges (the default one and `exchanges`;
    None: the vhost's exchanges not read)."""
    def orders(held):
        return queue("orders", type="quorum", messages_dlx=held, dead_letter_exchange=exchange,
                     dead_letter_strategy="at-least-once", dead_letter_routing_key=key, overflow="reject-publish")
    read = () if exchanges is None else (Exchange("/", "", MessageStats(), type="direct"), *exchanges)
    start = snapshot(taken_at=0.0, queues=[orders(5), *parts], exchanges=read)
    [f] = _only(Context(snapshot(taken_at=60.0, queues=[orders(8), *parts], exchanges=read, unread=unread), start),
                "dead-lettering-stuck")
    return f


def _dlx(kind: str, *bindings: tuple[str, str, str], name: str = "dlx") -> Exchange:
    return Exchange("/", name, MessageStats(), bindings=tuple(bindings), type=kind)


def _parked(name: str = "parked", depth: int = 100, overflow: str = "reject-publish"):
    return queue(name, messages_ready=depth, max_length=100, overflow=overflow)


def test_stuck_dead_lettering_names_the_exchange_the_key_and_the_queue_full_with_reject_publish():
    f = _stuck(_parked(), exchanges=[_dlx("direct", ("queue", "parked", "late"))])
    assert f.evidence["dead_letter_exchange"] == "exchange 'dlx' (direct)"
    assert f.evidence["routing_key"] == "'late' (the queue's dead-letter routing key)"
    assert f.evidence["why"] == ["queue 'parked' (through exchange 'dlx' (direct, binding key 'late')) refuses them: "
                                 "full, 100 messages against its limit of 100, overflow reject-publish"]
    assert f.explanation.endswith("Why: queue 'parked' (through exchange 'dlx' (direct, binding key 'late')) refuses "
                                  "them: full, 100 messages against its limit of 100, overflow reject-publish.")
    # Several destinations: each that refuses is named; one with room, or full but dropping its head, is not.
    fanout = _dlx("fanout", *(("queue", n, "") for n in ("parked", "parked-too", "roomy", "drops-head")))
    f = _stuck(_parked(), _parked("parked-too", 120), _parked("roomy", 99),
               _parked("drops-head", overflow="drop-head"), exchanges=[fanout])
    assert f.evidence["why"] == [
        "queue 'parked' (through exchange 'dlx' (fanout)) refuses them: full, 100 messages against its limit of 100, "
        "overflow reject-publish",
        "queue 'parked-too' (through exchange 'dlx' (fanout)) refuses them: full, 120 messages against its limit of "
        "100, overflow reject-publish"]
    # Every destination with room: why they are held is not said, not guessed.
    f = _stuck(_parked(depth=99), exchanges=[_dlx("direct", ("queue", "parked", "late"))])
    assert f.evidence["why"] == ["not known: every queue they reach takes them as far as the snapshot shows (queue "
                                 "'parked' (99 messages against its limit of 100, overflow reject-publish))"]
    # The default exchange routes to the queue the key names.
    f = _stuck(_parked("late"), exchange="", exchanges=[])
    assert f.evidence["why"] == ["queue 'late' (through the default exchange) refuses them: full, 100 messages "
                                 "against its limit of 100, overflow reject-publish"]


@pytest.mark.parametrize("kind, binding_key, key", [
    ("direct", "other", "late"), ("topic", "orders.*", "orders.eu.late"), ("topic", "*.late", "late")])
def test_stuck_dead_lettering_says_the_exchange_has_no_binding_for_the_key(kind, binding_key, key):
    f = _stuck(_parked(), key=key, exchanges=[_dlx(kind, ("queue", "parked", binding_key))])
    assert f.evidence["why"] == [f"exchange 'dlx' has no binding for key '{key}' (its binding keys: '{binding_key}'): "
                                 "it routes them nowhere"]


def test_stuck_dead_lettering_follows_topic_wildcards_and_judges_no_headers_exchange():
    f = _stuck(_parked(), key="orders.eu.late", exchanges=[_dlx("topic", ("queue", "parked", "orders.#"))])
    assert f.evidence["why"][0].startswith("queue 'parked' (through exchange 'dlx' (topic, binding key 'orders.#')) "
                                           "refuses them: full")
    f = _stuck(_parked(), exchanges=[_dlx("headers", ("queue", "parked", ""))])
    assert f.evidence["why"] == ["not judged: exchange 'dlx' routes by the messages' headers, which are not read"]
    # Each message's own key: a direct exchange's routing is not known; a fanout's does not need it.
    f = _stuck(_parked(), key=None, exchanges=[_dlx("direct", ("queue", "parked", "late"))])
    assert f.evidence["routing_key"] == "each message's own (not known: the queue sets no dead-letter routing key)"
    assert f.evidence["why"] == ["not known: exchange 'dlx' routes by each message's own routing key, which the "
                                 "snapshot does not hold"]
    f = _stuck(_parked(), key=None, exchanges=[_dlx("fanout", ("queue", "parked", ""))])
    assert f.evidence["why"][0].startswith("queue 'parked' (through exchange 'dlx' (fanout)) refuses them: full")


def test_stuck_dead_lettering_says_the_exchange_does_not_exist():
    f = _stuck(_parked(), exchanges=[_dlx("direct", ("queue", "parked", "late"), name="dlx-other")])
    assert f.evidence["dead_letter_exchange"] == "exchange 'dlx'"
    assert f.evidence["why"] == ["exchange 'dlx' does not exist in vhost '/'"]
    assert f.explanation.endswith("Why: exchange 'dlx' does not exist in vhost '/'.")


def test_stuck_dead_lettering_whose_vhost_exchanges_were_not_read_says_not_known_and_why():
    f = _stuck(_parked())
    assert f.evidence["why"] == ["not known: the exchanges of vhost '/' were not read at this poll"]
    failed = Unread("exchanges", "deadline", "no complete answer within the 10s poll deadline")
    f = _stuck(_parked(), unread=[failed])
    assert f.evidence["why"] == ["not known: the exchanges of vhost '/' were not read at this poll (no complete "
                                 "answer within the 10s poll deadline)"]
    assert f.evidence["dead_letter_exchange"] == "exchange 'dlx'"


# -- issue 55, K3: what happened in the window stays a finding for the window -----------------------------------
def _at_warning(findings, *names) -> list:
    """The findings at warning or above that name one of `names` (a channel's connection, a queue's consumers)."""
    return [f for f in findings if f.severity in ("warning", "critical")
            and any(n in (f.connection_name, f.identity) or n in f.object for n in names)]


def test_a_publisher_nacked_in_the_window_stays_named_while_it_idles_and_until_the_window_passes():
    from ackscope.diagnosis.confirm_waits import ConfirmWaits
    from ackscope.diagnosis.window import Recent
    t = Thresholds(window_seconds=30)
    recent, waits = Recent(t.window_seconds), ConfirmWaits(t.window_seconds)

    def poll(at, nacking):
        healthy = channel("healthy", connection_name="healthy", messages_unconfirmed=0,
                          message_stats=stats(publish=int(at) * 10, confirm=int(at) * 10))
        s = snapshot(float(at), channels=[healthy] + ([nacking] if nacking else []))
        return s, recent.start(s), waits.update(s)
    # Born inside the window: 50 confirmed publishes into a full reject-publish queue, 49 nacked, over 10 s.
    counts = {0: None, 5: (10, 1), 10: (50, 1)}
    previous, seen = None, {}
    for at in range(0, 80, 5):
        publish, confirm = counts.get(at, (50, 1)) if counts.get(at, (50, 1)) else (None, None)
        nacking = channel("nacked", connection_name="nacked", messages_unconfirmed=0,
                          message_stats=stats(publish=publish, confirm=confirm)) if publish else None
        s, start, in_flight = poll(at, nacking)
        found = evaluate(Context(s, previous, thresholds=t, window=start, in_flight=in_flight))
        seen[at] = [f for f in found if f.rule == "publisher-nacked"]
        assert not _at_warning(found, "healthy"), "the healthy publisher beside it is named by nothing"
        previous = s
    # Named from the poll that saw the gap in two samples, through its idle polls, while the nacks are in the window.
    assert [at for at, fs in seen.items() if fs] == list(range(10, 40, 5))
    idle = seen[30][0]  # the window starts before the channel opened: all its nacks are the window's
    assert idle.connection_name == "nacked" and idle.evidence["nacked_in_window"] == 49
    assert idle.evidence["last_seen"] == "20s ago" and "the last of them seen 20s ago" in idle.explanation
    assert seen[35][0].evidence["nacked_in_window"] == 40  # the window now starts after the first 9
    assert seen[10][0].evidence["last_seen"].startswith("at this poll")


def test_a_finding_over_the_window_says_when_its_counter_last_grew_and_holds_while_idle():
    start = snapshot(700.0, channels=[channel("returner", confirm=False, message_stats=stats(publish=0))])
    stopped = channel("returner", confirm=False, message_stats=stats(publish=10, return_unroutable=10))
    before, now = snapshot(995.0, channels=[stopped]), snapshot(1000.0, channels=[stopped])
    [f] = _only(Context(now, before, window=start), "unroutable-returned")
    assert f.evidence["return_unroutable_in_window"] == 10 and f.evidence["last_seen"] == \
        "before the last poll (more than 5s ago)"
    growing = snapshot(995.0, channels=[replace(stopped, message_stats=stats(publish=4, return_unroutable=4))])
    [f] = _only(Context(now, growing, window=start), "unroutable-returned")
    assert f.evidence["last_seen"] == "at this poll (within the last 5s)"


# -- issue 55, K5: a loop is a share, whatever the rate -----------------------------------------------------------
def _poison(conn: str, deliver: int, redeliver: int, ack: int | None = None, name: str = "jobs"):
    return (queue(name, message_stats=stats(deliver_get=deliver, redeliver=redeliver, ack=ack)),
            consumer(name, channel_name=f"{conn} (1)", connection=conn, connection_name="worker"),
            connection(conn, connection_name="worker"))


def test_a_poison_message_killing_its_consumer_under_one_a_second_is_a_critical_requeue_loop():
    healthy_q = queue("orders", message_stats=stats(deliver_get=600, ack=600))
    healthy = (consumer("orders", channel_name="steady (1)", connection="steady", connection_name="steady"),
               connection("steady", connection_name="steady"))

    def at(t: float, conn: str, deliver: int, redeliver: int, ack=None, q_stats=None):
        q, con, c = _poison(conn, deliver, redeliver, ack)
        return snapshot(t, queues=[q, replace(healthy_q, message_stats=q_stats or healthy_q.message_stats)],
                        consumers=[con, healthy[0]], connections=[c, healthy[1]])
    # deliver 36, redeliver 35, ack 0 over 60 s: 0.6 deliveries a second; a new worker process at each poll.
    start, before = at(940.0, "worker-1", 0, 0), at(995.0, "worker-11", 33, 32)
    now = at(1000.0, "worker-12", 36, 35, q_stats=stats(deliver_get=1200, ack=1200, redeliver=0))
    found = evaluate(Context(now, before, window=start))
    [f] = [f for f in found if f.rule == "requeue-loop"]
    assert (f.object, f.severity, f.connection_name) == ("queue jobs", "critical", "worker")
    assert (f.evidence["redelivered_in_window"], f.evidence["delivered_in_window"], f.evidence["acked_in_window"]) \
        == (35, 36, 0)
    assert f.evidence["consumer_connections_closed"] == 2 and "dies holding the message" in f.explanation
    assert not _at_warning(found, "steady", "orders"), "the healthy consumer beside it is named by nothing"
    # The same loop with its consumer living on: a loop, and no word of consumers dying.
    [alive] = _only(Context(at(1000.0, "worker-1", 36, 35), at(995.0, "worker-1", 33, 32), window=start),
                    "requeue-loop")
    assert "consumer_connections_closed" not in alive.evidence and "dies holding" not in alive.explanation
    # Workers that live shorter than a poll: none seen at any poll while the queue delivered to consumers.
    unseen = [snapshot(t, queues=[replace(_poison("w", d, r)[0], consumers=0)]) for t, d, r in
              ((940.0, 0, 0), (995.0, 33, 32), (1000.0, 36, 35))]
    [f] = _only(Context(unseen[2], unseen[1], window=unseen[0]), "requeue-loop")
    assert f.severity == "critical" and f.evidence["consumers_seen"].startswith("none at any poll")
    assert "come and go between polls" in f.explanation and f.identity == ""
    # Read with basic.get instead, by a client that rejects each: a loop, and nothing said of consumers.
    got = [replace(s, queues=(replace(s.queues[0], message_stats=replace(s.queues[0].message_stats,
                                                                         get=s.queues[0].message_stats.deliver_get)),))
           for s in unseen]
    [f] = _only(Context(got[2], got[1], window=got[0]), "requeue-loop")
    assert "consumers_seen" not in f.evidence


def test_a_requeue_loop_needs_a_share_and_a_few_redeliveries_and_a_busy_healthy_queue_never_fires():
    def judged(deliver, redeliver, ack):
        start = snapshot(700.0, queues=[queue(message_stats=stats(deliver_get=0, redeliver=0, ack=0))])
        now = snapshot(1000.0, queues=[queue(message_stats=stats(deliver_get=deliver, redeliver=redeliver, ack=ack))])
        return _only(Context(now, start), "requeue-loop")
    # Five of six come back, nothing acked: a loop at 0.02/s, and nothing gets through (its first delivery, still in
    # the window, is no redelivery).
    assert judged(6, 5, 0)[0].severity == "critical"
    assert judged(4, 4, None) == []  # under the floor of five redeliveries: one poison message tried a few times
    assert judged(100_000, 40, 99_960) == []  # a busy healthy queue with a few redeliveries
    assert judged(60, 40, 20) == []  # acks get through, at well under a redelivery a second
    assert judged(3000, 2900, 100)[0].severity == "critical"  # acks get through, fast: the rate rule as before


# -- issue 55, K6: unroutable messages on a confirm channel are lost messages ---------------------------------------
def test_unroutable_messages_acked_on_a_confirm_channel_are_critical_and_name_the_exchange():
    from ackscope.model.snapshot import Exchange
    start = snapshot(700.0, channels=[], exchanges=[Exchange("/", "orders.x", stats(publish=0))])
    returner = channel("returner", connection_name="shop", message_stats=stats(publish=6, return_unroutable=5,
                                                                                confirm=6))
    dropper = channel("dropper", connection_name="audit", exchanges=("audit.x",),
                      message_stats=stats(publish=3, drop_unroutable=3, confirm=3))
    one = channel("one", connection_name="worker", message_stats=stats(publish=1, drop_unroutable=1, confirm=1))
    plain = channel("plain", connection_name="legacy", confirm=False, message_stats=stats(publish=4,
                                                                                          drop_unroutable=4))
    healthy = channel("healthy", connection_name="healthy", message_stats=stats(publish=500, confirm=500))
    now = snapshot(1000.0, channels=[returner, dropper, one, plain, healthy], queues=[queue("orders")],
                   exchanges=[Exchange("/", "orders.x", stats(publish=10))])
    found = evaluate(Context(now, start))
    by = {(f.rule, f.connection_name): f for f in found if f.rule.startswith("unroutable")}
    returned = by[("unroutable-returned", "shop")]
    assert returned.severity == "critical" and "ignores basic.return" in returned.explanation
    assert returned.evidence["exchange"].startswith("exchange 'orders.x' (inferred")
    dropped = by[("unroutable-dropped", "audit")]
    assert (dropped.severity, dropped.evidence["exchange"]) == ("critical", "exchange 'audit.x'")
    assert "to exchange 'audit.x'" in dropped.explanation
    assert by[("unroutable-dropped", "worker")].severity == "info"  # one start-up message
    assert by[("unroutable-dropped", "legacy")].severity == "warning"  # no confirms: nothing told it "ack"
    assert not _at_warning(found, "healthy")
    # Where the source does not say which exchange, the finding says so rather than guess: two exchanges with no
    # binding, or one that took fewer messages than the channels that may have published to it had unroutable
    # (the rest went to a bound exchange or the default one, and which channel's did is not known).
    two = replace(now, exchanges=(Exchange("/", "orders.x", stats(publish=10)),
                                  Exchange("/", "b.x", stats(publish=9))))
    fewer = replace(now, exchanges=(Exchange("/", "orders.x", stats(publish=6)),))
    for seen in (two, fewer):
        [f] = [f for f in evaluate(Context(seen, start))
               if (f.rule, f.connection_name) == ("unroutable-returned", "shop")]
        assert f.evidence["exchange"].startswith("not known"), f.evidence["exchange"]


def test_unroutable_plumbing_on_a_confirm_channel_stays_as_before():
    # A framework's confirm channel whose other messages reach only an auto-delete reply queue.
    replies = queue("celery.reply", auto_delete=True, durable=False)
    ch = channel("pidbox", connection_name="celery", routed_into=("celery.reply",),
                 message_stats=stats(publish=20, confirm=20, drop_unroutable=2))
    start = snapshot(700.0, channels=[replace(ch, message_stats=stats(publish=0, confirm=0, drop_unroutable=0))])
    [f] = _only(Context(snapshot(1000.0, channels=[ch], queues=[replies]), start), "unroutable-dropped")
    assert f.severity == "warning" and "plumbing" in f.explanation


def test_a_publisher_waiting_for_each_confirm_caught_between_the_counters_readings_is_not_nacked():
    """Measured side by side on 3.10: a healthy pika publisher at 300 a second, one confirm at a time, showed one
    publish neither confirmed nor unconfirmed in two samples in a row: a confirm in flight between the readings."""
    def at(t, publish):
        return snapshot(float(t), channels=[channel(messages_unconfirmed=0,
                                                    message_stats=stats(publish=publish, confirm=publish - 1))])
    start, previous, now = at(0, 100), at(5, 1600), at(10, 3100)
    assert _only(Context(now, previous, window=start), "publisher-nacked") == []


def test_a_worker_killed_once_with_its_prefetch_unacked_is_no_requeue_loop():
    """Reviewed: Celery with acks_late and a channel-wide prefetch of 16, long tasks, its worker killed once in the
    window: its 16 unacked messages are delivered again to the next worker, nothing acked yet. One requeue returns
    at most what was held: no loop."""
    def at(t, delivered, redelivered, unacked):
        return snapshot(float(t), queues=[queue("tasks", messages_unacked=unacked, message_stats=stats(
            deliver_get=delivered, redeliver=redelivered, ack=0))])
    start, previous, now = at(700, 0, 0, 16), at(990, 0, 0, 16), at(1000, 16, 16, 16)
    assert _only(Context(now, previous, window=start), "requeue-loop") == []
