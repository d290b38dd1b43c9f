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
from ackscope.model.snapshot import attributed


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

    def ctx(redeliver, deliver):
        before = snapshot(1000.0, queues=[queue(message_stats=stats(deliver_get=0, redeliver=0))])
        after = snapshot(1010.0, queues=[queue(message_stats=stats(deliver_get=deliver, redeliver=redeliver))])
        return Context(after, before, thresholds=t)
    assert _only(ctx(redeliver=50, deliver=100), "requeue-loop")[0].severity == "warning"
    assert _only(ctx(redeliver=95, deliver=100), "requeue-loop")[0].severity == "critical"
    assert _only(ctx(redeliver=49, deliver=100), "requeue-loop") == []  # below half
    assert _only(ctx(redeliver=9, deliver=10), "requeue-loop") == []  # under 1/s
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
    dropper = channel("worker", message_stats=stats(publish=900, drop_unroutable=1))
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
    found = {(f.rule, f.object) for f in evaluate(Context(s, thresholds=t))}
    assert found == {("transient-in-durable-queue", "queue mixed"), ("non-durable-queue-backlog", "queue temp"),
                     ("no-consumers-backlog", "queue orphan")}


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
    assert len(ids) == len(set(ids)) == 51
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
                     dead_letter_strategy="at-least-once", dead_letter_routing_key="", messages_ready=2, **kw)
    start = snapshot(taken_at=0.0, queues=[q(5)])
    [f] = _only(Context(snapshot(taken_at=60.0, queues=[q(8)]), start), "dead-lettering-stuck")
    assert (f.severity, f.evidence["dead_lettered_held"], f.evidence["held_earlier"]) == ("warning", 8, 5)
    assert "dlx has not confirmed" in f.explanation
    [full] = _only(Context(snapshot(taken_at=60.0, queues=[q(8, max_length=10)]), start), "dead-lettering-stuck")
    assert full.severity == "critical" and "publishers are refused next" in full.explanation
    assert not _only(Context(snapshot(taken_at=60.0, queues=[q(3)]), start), "dead-lettering-stuck"), "draining"
    assert not _only(Context(snapshot(taken_at=60.0, queues=[q(8)])), "dead-lettering-stuck"), "one sample"


def test_dead_lettering_that_stopped_within_the_window_is_judged_against_the_poll_before():
    def q(held):
        return queue("orders", type="quorum", messages_dlx=held, dead_letter_exchange="dlx",
                     dead_letter_strategy="at-least-once", dead_letter_routing_key="")
    start, previous = snapshot(taken_at=0.0, queues=[q(0)]), snapshot(taken_at=50.0, queues=[q(6)])
    [f] = _only(Context(snapshot(taken_at=60.0, queues=[q(9)]), previous, window=start), "dead-lettering-stuck")
    assert f.evidence["held_earlier"] == 6
