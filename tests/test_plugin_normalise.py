"""The Prometheus-plugin source's normaliser on answers recorded from a real 3.10.8 node with management
statistics off (python tests/data/record.py --statistics-off): channels known by process id, consumers known by their
deliveries, queues with the plugin's counts, the node with its alarms."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from snapshot_builders import recorded_plugin_snapshot

from ackscope.diagnosis.rules import Context, diagnose, evaluate
from ackscope.diagnosis.traced_messages import RULES as TRACED
from ackscope.model import snapshot as facts
from ackscope.model.events import EVENTS
from ackscope.model.traces import TRACES
from ackscope.model.snapshot import Churn
from ackscope.model.source import FetchError
from ackscope.sources.cli import parse as parse_cli
from ackscope.sources.cli import pid_key
from ackscope.sources.management import normalise as management
from ackscope.sources.plugin_source import ConsumerList
from ackscope.sources.prometheus_plugin import normalise as plugin

TRACE_RULES = tuple(r.id for r in TRACED)  # the applications' spans: none here

DATA = Path(__file__).parent / "data" / "rabbitmq-3.10.8-stats-off"


@pytest.fixture(scope="module")
def snapshot():
    return recorded_plugin_snapshot()


def test_channels_carry_prefetch_unacked_counters_and_inferred_confirm_mode(snapshot):
    by_name = {c.name: c for c in snapshot.channels}
    saturated, confirming, dropping = by_name["<0.813.0>"], by_name["<0.823.0>"], by_name["<0.838.0>"]
    assert (saturated.vhost, saturated.prefetch_count, saturated.prefetch_limit, saturated.messages_unacked,
            saturated.consumer_count) == ("/", 10, 10, 10, 1)
    assert (saturated.message_stats.publish, saturated.confirm) == (60, False)  # published, never confirmed
    assert (confirming.message_stats.publish, confirming.message_stats.confirm, confirming.confirm) == (5, 5, True)
    assert (dropping.message_stats.drop_unroutable, dropping.confirm) == (1, False)
    assert all(c.connection_name == "" and c.user == "" for c in snapshot.channels)  # the plugin does not say


def test_consumers_are_known_by_the_queues_they_had_deliveries_from(snapshot):
    consumers = {(c.channel, c.queue): c for c in snapshot.consumers}
    assert set(consumers) == {("<0.813.0>", "invoices"), ("<0.818.0>", "audit")}
    assert (consumers[("<0.813.0>", "invoices")].ack_required, consumers[("<0.813.0>", "invoices")].prefetch_count) \
        == (True, 10)
    assert consumers[("<0.818.0>", "audit")].ack_required is False  # auto-ack: delivered without an ack owed


def test_queues_have_the_plugins_depths_consumers_and_deliveries(snapshot):
    invoices = next(q for q in snapshot.queues if q.name == "invoices")
    assert (invoices.type, invoices.durable) == ("classic", True)  # from the management API's list
    assert (invoices.messages_ready, invoices.messages_unacked, invoices.consumers) == (25, 10, 1)
    assert invoices.message_stats.deliver_get == 10


def test_the_node_has_its_alarms_and_limits_from_the_plugin(snapshot):
    (node,) = snapshot.nodes
    assert node.mem_alarm is False and node.disk_free_alarm is False
    assert node.mem_used > 0 and node.mem_limit > node.mem_used and node.disk_free > 0 and node.fd_total > 0
    assert snapshot.overview.statistics_disabled is True


def test_the_rules_name_the_saturated_channel_by_its_process_id(snapshot):
    found = {(f.rule, f.object) for f in evaluate(Context(snapshot))}
    assert ("prefetch-saturated", "channel <0.813.0>") in found


def test_rules_whose_facts_the_plugin_lacks_say_not_evaluated_instead_of_staying_silent(snapshot):
    verdict = diagnose(Context(snapshot))
    assert {n.rule: n.needs for n in verdict.not_evaluated} == {
        "transactional-publisher": ("the channel's transactional flag",),
        "transient-in-durable-queue": ("the queue's count of persistent messages",),
        "dead-lettering-stuck": (facts.QUEUE_DEAD_LETTERED_HELD,),
        "heartbeat-disabled": ("the connection's heartbeat",),
        "connection-blocked": ("the connection's state (blocked, flow)",),
        # Whatever the source: without the broker's log, why the broker closed channels is not known.
        "consumer-timed-out": (EVENTS,), "closed-on-error": (EVENTS,), "dead-letter-cycle-dropped": (EVENTS,),
        # RabbitMQ 3.10 closes the channel instead, and reports no shovel's blocked status: the rules do not apply
        "consumer-cancelled-by-broker": (), "shovel-blocked": (),
        # nor a list of the deprecated features in use (3.13 and later)
        "deprecated-feature-used": (),
        # Whatever the source: without the applications' spans, nothing is known of their messages.
        **dict.fromkeys(TRACE_RULES, (TRACES,))}
    assert not {f.rule for f in verdict.findings} & {n.rule for n in verdict.not_evaluated}


def test_with_the_plugin_alone_a_channel_never_confirmed_is_named_as_maybe_transactional(snapshot):
    found = {f.object: f for f in evaluate(Context(snapshot)) if f.rule == "publisher-without-confirms"}
    unsafe = found["channel <0.813.0>"]  # published 60, never confirmed
    assert unsafe.evidence["published"] == 60 and "--cli" in unsafe.evidence["transactional"]
    assert "transactions" in unsafe.explanation
    assert "channel <0.823.0>" not in found  # it is confirmed
    # The CLI settles it: not transactional, so without confirms, and no doubt said.
    cli = parse_cli((DATA / "cli_list_channels.json").read_text(), (DATA / "cli_list_connections.json").read_text())
    settled = {f.object: f for f in evaluate(Context(plugin.enrich(snapshot, cli)))
               if f.rule == "publisher-without-confirms"}
    assert "transactional" not in settled["channel <0.813.0>"].evidence


def test_the_cli_names_each_channels_client_and_settles_its_transactional_flag(snapshot):
    cli = parse_cli((DATA / "cli_list_channels.json").read_text(), (DATA / "cli_list_connections.json").read_text())
    enriched = plugin.enrich(snapshot, cli)
    by_name = {c.name: c for c in enriched.channels}  # still the process id: the label keeps its value
    assert (by_name["<0.813.0>"].connection_name, by_name["<0.813.0>"].user) == ("invoice-worker", "guest")
    assert by_name["<0.813.0>"].transactional is False and by_name["<0.823.0>"].confirm is True
    assert {c.connection_name for c in enriched.consumers} == {"invoice-worker", "audit-reader"}
    assert {c.connection_name for c in enriched.connections} == {"invoice-worker", "audit-reader",
                                                                 "invoice-publisher"}
    assert all(c.heartbeat_seconds == 60 and c.state == "running" for c in enriched.connections)
    verdict = diagnose(Context(enriched))
    # The CLI cannot say that; nor, without the broker's log, why channels were closed.
    assert {n.rule for n in verdict.not_evaluated} == {"transient-in-durable-queue", "dead-lettering-stuck",
                                                       "consumer-timed-out", "closed-on-error",
                                                       "dead-letter-cycle-dropped",
                                                       "consumer-cancelled-by-broker", "shovel-blocked",
                                                       "deprecated-feature-used", *TRACE_RULES}
    saturated = next(f for f in verdict.findings if f.rule == "prefetch-saturated")
    assert saturated.culprit == "channel <0.813.0> (invoice-worker)"


@pytest.mark.parametrize("pid, key", [("<0.813.0>", "813.0"), ("#PID<10986.813.0>", "813.0"), ("nonsense", None)])
def test_plugin_and_cli_process_ids_meet_on_their_local_part(pid, key):
    assert pid_key(pid) == key


@pytest.mark.parametrize("text", ["<html><body>502 Bad Gateway</body></html>", "{'this': is not json,",
                                  'rabbitmq_detailed_queue_messages_ready{vhost="/",que'])
def test_text_that_is_not_an_exposition_is_a_malformed_answer(text):
    with pytest.raises(FetchError) as failed:
        plugin.parse(text, "metrics/detailed")
    assert failed.value.reason == "malformed" and "not a Prometheus exposition" in str(failed.value)


def test_a_channel_is_named_by_the_queues_and_exchanges_it_touched(snapshot):
    by_name = {c.name: c for c in snapshot.channels}
    assert by_name["<0.813.0>"].queues == ("audit", "invoices")  # consumed invoices, published into both
    assert by_name["<0.823.0>"].queues == ("invoices",) and by_name["<0.823.0>"].exchanges == ("",)
    assert by_name["<0.838.0>"].exchanges == ("amq.direct",)  # its one message matched no queue


def test_queues_count_the_publishes_of_live_channels_into_them(snapshot):
    published = {q.name: q.message_stats.publish for q in snapshot.queues}
    assert published == {"invoices": 35, "audit": 30}


def test_publisher_findings_name_the_exchanges_and_queues_of_a_channel_known_by_its_process_id(snapshot):
    opened_since = replace(snapshot, taken_at=snapshot.taken_at - 60, channels=())  # the window's start
    dropped = next(f for f in evaluate(Context(snapshot, opened_since)) if f.rule == "unroutable-dropped")
    assert dropped.object == "channel <0.838.0>" and dropped.evidence["exchanges"] == ["amq.direct"]


def without_family(text: str, series_prefix: str) -> str:
    """The recorded answer as a plugin that does not know a family gives it: without its lines at all."""
    return "\n".join(line for line in text.splitlines() if series_prefix not in line) + "\n"


def test_a_family_the_plugin_leaves_out_is_named_and_its_figures_stay_unknown():
    raw = {name: json.loads((DATA / f"{name}.json").read_text())
           for name in ("overview", "nodes", "vhosts", "connections", "queues")}
    base = management.snapshot({**raw, "channels": [], "consumers": []}, 1000.0)
    text = without_family((DATA / "detailed.prom").read_text(), "rabbitmq_detailed_queue_messages_published")
    assert plugin.missing_families((DATA / "detailed.prom").read_text()) == ()
    absent = plugin.missing_families(text)
    assert absent == ("channel_queue_exchange_metrics",)
    s = plugin.snapshot(base, plugin.parse(text, "metrics/detailed"), None, absent=absent)
    assert {q.message_stats.publish for q in s.queues} == {None}  # unknown, not zero
    assert {q.message_stats.deliver_get for q in s.queues} != {None}  # the families that answered still count
    text = without_family(text, "rabbitmq_detailed_channel_")
    s = plugin.snapshot(base, plugin.parse(text, "metrics/detailed"), None, absent=plugin.missing_families(text))
    assert s.channels == () and s.consumers == ()  # none rather than half known


def test_on_a_large_broker_channels_stay_as_the_management_api_lists_them_and_queues_take_the_plugins_counts():
    stats_on = Path(__file__).parent / "data" / "rabbitmq-3.10.8"
    listed = {name: json.loads((stats_on / f"{name}.json").read_text())
              for name in ("connections", "channels", "consumers")}
    raw = {name: json.loads((DATA / f"{name}.json").read_text()) for name in ("overview", "nodes", "vhosts", "queues")}
    base = management.snapshot({**raw, **listed}, 1000.0)
    detailed = plugin.parse((DATA / "detailed.prom").read_text(), "metrics/detailed")
    metrics = plugin.parse((DATA / "metrics.prom").read_text(), "metrics")
    large = plugin.snapshot(base, detailed, (metrics,), channels_listed=True)
    assert large.channels == base.channels and large.consumers == base.consumers
    assert all(" -> " in c.name and c.connection_name for c in large.channels)  # named, attributed
    assert large.queues == recorded_plugin_snapshot().queues  # the plugin's depths and counters
    # What the management API no longer says.
    assert large.unreported == {facts.QUEUE_PERSISTENT_COUNTS, facts.QUEUE_DEAD_LETTERED_HELD}


def test_a_consumer_list_agrees_with_channels_counting_its_consumers_and_no_others():
    stats_on = Path(__file__).parent / "data" / "rabbitmq-3.10.8"
    channels = json.loads((stats_on / "channels.json").read_text())
    consumers = json.loads((stats_on / "consumers.json").read_text())
    listed = ConsumerList.of(consumers)
    assert sum(listed.per_channel.values()) == len(consumers) > 0
    assert listed.agrees_with(channels)  # recorded in one moment: every count matches
    one = next(c for c in channels if c.get("consumer_count"))
    more = [dict(c, consumer_count=c["consumer_count"] + 1) if c is one else c for c in channels]
    assert not listed.agrees_with(more)  # a consumer came: the list is read again
    assert not listed.agrees_with([c for c in channels if c is not one])  # its channel closed: its consumers too
    fewer = [dict(c, consumer_count=0) if c is one else c for c in channels]
    assert not listed.agrees_with(fewer)  # cancelled
    with pytest.raises(management.MalformedResponse):
        ConsumerList.of({"not": "a list"})


def test_a_large_broker_asks_the_plugin_only_for_the_families_its_queue_counts_need():
    # channel_metrics (2.3 MB at 5,000 channels) is not read when the management API lists the channels; not
    # asking for it is not an incomplete answer, and without the management API the channels stay unknown.
    text = (DATA / "detailed.prom").read_text()
    for series in (*plugin.CHANNEL_GAUGES, *plugin.PER_EXCHANGE):  # channel_metrics, channel_exchange_metrics
        text = without_family(text, plugin.PREFIX + series)
    for family in plugin.QUEUE_FAMILIES:
        assert family in plugin.FAMILIES
    assert plugin.missing_families(text, families=plugin.QUEUE_FAMILIES) == ()
    assert set(plugin.missing_families(text)) == set(plugin.FAMILIES) - set(plugin.QUEUE_FAMILIES)


@pytest.mark.parametrize("text, latency", [
    # 4.0.5, as recorded: one gauge for all the node's Raft clusters
    ("# TYPE rabbitmq_raft_entry_commit_latency_seconds gauge\nrabbitmq_raft_entry_commit_latency_seconds 0.001\n",
     0.001),
    # 4.3.6, as recorded: renamed in 4.2, per Ra system; Khepri's own is not the quorum queues'
    ('# TYPE rabbitmq_raft_commit_latency_seconds gauge\n'
     'rabbitmq_raft_commit_latency_seconds{module="rabbit_khepri",ra_system="coordination"} 0.0\n'
     '# TYPE rabbitmq_raft_max_commit_latency_seconds gauge\n'
     'rabbitmq_raft_max_commit_latency_seconds{ra_system="quorum_queues"} 0.002\n', 0.002),
    ("# TYPE rabbitmq_build_info untyped\n", None),
])
def test_the_quorum_commit_latency_is_read_under_each_releases_name(text, latency):
    assert plugin.quorum_commit_latency(plugin.parse(text, "metrics")) == latency


def _exposition(**series: float) -> str:
    """A detailed answer with one queue-ready sample per `queue__node` keyword (the node only to tell them apart)."""
    return "".join(f'rabbitmq_detailed_queue_messages_ready{{vhost="/",queue="{q.split("__")[0]}"}} {v}\n'
                   for q, v in series.items())


def test_a_clusters_answers_add_up_each_queue_counted_once_from_the_node_the_list_names():
    # Each node reports the queues it leads; a row a former leader kept is not counted twice.
    a = plugin.parse(_exposition(orders=3, stale__a=9), "metrics/detailed")
    b = plugin.parse(_exposition(stale__b=4, audit=1), "metrics/detailed")
    merged, reporter = plugin.merged({"rabbit@a": a, "rabbit@b": b}, {("/", "stale"): "rabbit@b"})
    ready = {labels["queue"]: v for labels, v in merged["rabbitmq_detailed_queue_messages_ready"]}
    assert ready == {"orders": 3, "stale": 4, "audit": 1}
    assert reporter == {("/", "orders"): "rabbit@a", ("/", "stale"): "rabbit@b", ("/", "audit"): "rabbit@b"}
    # Without a list to say, the first node's answer.
    merged, _ = plugin.merged({"rabbit@a": a, "rabbit@b": b})
    assert sorted(v for labels, v in merged["rabbitmq_detailed_queue_messages_ready"]
                  if labels["queue"] == "stale") == [9]


def test_each_node_has_the_alarms_its_own_plugin_reports():
    def metrics(node: str, alarm: int) -> dict:
        return plugin.parse(f'rabbitmq_identity_info{{rabbitmq_node="{node}"}} 1\n'
                            f"rabbitmq_alarms_memory_used_watermark {alarm}\n", "metrics")
    listed = [management.node({"name": n, "running": True}) for n in ("rabbit@a", "rabbit@b", "rabbit@c")]
    nodes = plugin.nodes_from_metrics([metrics("rabbit@b", 1), metrics("rabbit@a", 0)], listed)
    assert [(n.name, n.mem_alarm) for n in nodes] == [("rabbit@a", False), ("rabbit@b", True), ("rabbit@c", None)]


def test_with_statistics_off_the_churn_is_counted_from_the_plugin(snapshot):
    assert snapshot.overview.churn == Churn(connections_opened=3, connections_closed=1, channels_opened=4,
                                            channels_closed=0)


def test_the_plugins_counts_keep_what_the_queue_list_showed_of_each_queues_settings():
    """Issue 55's K1: the plugin counts, it does not configure; a dead-letter target, a length limit and an overflow
    mode read from the list stand beside its counts, and a queue the list did not show stays 'not shown'."""
    shown = management.queue({"name": "fld", "vhost": "/", "type": "quorum", "arguments": {
        "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "fld.dlq", "x-max-length": 5,
        "x-overflow": "reject-publish"}})
    unseen = management.queue({"name": "other", "vhost": "/", "type": "classic"})
    counted = {q.name: q for q in plugin.queue_counts({}, [shown, unseen])}
    fld = counted["fld"]
    assert (fld.dead_letters, fld.dead_letter_target, fld.max_length, fld.overflow_mode) == (
        True, "the default exchange with routing key 'fld.dlq'", 5, "reject-publish")
    assert (counted["other"].dead_letters, counted["other"].overflow_mode) == (None, None)
