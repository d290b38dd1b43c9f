"""AMQP 1.0 sessions and streams from answers recorded on RabbitMQ 4.3.6 (tests/data/protocols-4.3.6): parsed into
links and stream clients, judged in AMQP 1.0's and streams' terms, rendered as families; bad answers cost only
their part."""

from __future__ import annotations

import gzip
import json
from dataclasses import replace
from pathlib import Path

import pytest
from helpers import parse, value
from snapshot_builders import connection, queue, snapshot

from ackscope.diagnosis.rules import Context, diagnose, evaluate
from ackscope.exporter.cardinality import Limits
from ackscope.exporter.exposition import render
from ackscope.exporter.status import PollStatus
from ackscope.model.snapshot import AMQP10_LINKS, STREAM_CLIENTS, StoredOffset
from ackscope.sources.management import links as links_normalise
from ackscope.sources.management import normalise, streams

DATA = Path(__file__).parent / "data" / "protocols-4.3.6"
pytestmark = pytest.mark.unit


def _connections():
    listed = json.loads((DATA / "connections.json").read_text())
    return {c.name: c for c in (normalise.connection(raw) for raw in listed)}


def _links():
    connections = _connections()
    return [k for name, sessions in json.loads((DATA / "sessions.json").read_text()).items()
            for k in links_normalise.links(connections[name], sessions)]


def test_sessions_become_receivers_and_senders_without_the_management_link():
    found = _links()
    assert {(k.role, k.address, k.settled) for k in found} == {
        ("receiver", "/queues/q10", False), ("sender", "/queues/q10", False), ("sender", "/queues/q10", True)}
    receiver = next(k for k in found if k.role == "receiver")
    assert (receiver.queue, receiver.credit, receiver.unsettled) == ("q10", 10, receiver.session_unsettled)
    assert receiver.unsettled > receiver.credit
    # RabbitMQ's AMQP 1.0 client sends no connection properties: its container-id and peer say who it is.
    assert receiver.identity.startswith("AMQP 1.0 client (container ") and " as guest" in receiver.identity


def test_a_receiver_holding_more_than_its_credit_is_named_and_a_presettled_sender_too():
    now = snapshot(links=_links())
    by_rule = {f.rule: f for f in evaluate(Context(now))}
    unbounded = by_rule["receiver-unsettled-unbounded"]
    assert unbounded.severity == "warning" and unbounded.evidence["credit"] == 10
    assert "credit bounds nothing" in unbounded.explanation and unbounded.identity.startswith("AMQP 1.0 client")
    assert by_rule["sender-presettled"].severity == "info"  # nothing published in a window not yet seen
    moved = replace(now, taken_at=1300.0, links=tuple(
        replace(k, delivery_count=k.delivery_count + 50) if k.settled and k.role == "sender" else k for k in now.links))
    sender = next(f for f in evaluate(Context(moved, now)) if f.rule == "sender-presettled")
    assert sender.severity == "warning" and sender.evidence["transfers"] == 50


def test_a_receiver_within_its_credit_or_sharing_its_session_is_not_called_unbounded():
    receiver = next(k for k in _links() if k.role == "receiver")
    within = replace(receiver, session_unsettled=receiver.credit)
    shared = replace(receiver, session_receivers=2)  # the broker counts per session: not this link's alone
    assert not [f for f in evaluate(Context(snapshot(links=[within, shared])))
                if f.rule == "receiver-unsettled-unbounded"]


def test_a_malformed_session_list_is_a_clear_error():
    with pytest.raises(links_normalise.MalformedSessions, match="not a JSON list of objects"):
        links_normalise.links(connection(), {"error": "nope"})


def _stream_clients():
    connections = _connections()
    consumers = streams.consumers(json.loads((DATA / "stream-consumers.json").read_text()), connections)
    stored = streams.stored_offsets("/", "s1", json.loads((DATA / "stream-tracking-s1.json").read_text()))
    return consumers, stored


def test_stream_consumers_and_stored_offsets_are_read_as_the_stream_plugin_gives_them():
    consumers, stored = _stream_clients()
    (c,) = consumers
    assert (c.stream, c.offset_lag > 0, c.committed_offset) == ("s1", True, c.offset + c.offset_lag)
    assert stored == [StoredOffset("/", "s1", "slow-reader", stored[0].offset)]


def test_a_stream_consumer_whose_lag_grows_is_named_with_which_figure_it_is():
    consumers, stored = _stream_clients()
    (c,) = consumers
    s1 = queue("s1", type="stream", messages_ready=3001, consumers=1)
    start = snapshot(700.0, queues=[s1], stream_consumers=[c], stored_offsets=stored)
    behind = replace(c, offset_lag=c.offset_lag + 2000)
    stuck = [replace(o, offset=o.offset) for o in stored]
    now = snapshot(1000.0, queues=[s1], stream_consumers=[behind], stored_offsets=stuck)
    found = [f for f in evaluate(Context(now, start)) if f.rule == "stream-consumer-lagging"]
    assert {f.evidence["figure"].split(":")[0] for f in found} == {"dispatched", "stored"}
    assert all(f.evidence["lag_growth"] == 2000 for f in found)
    dispatched = next(f for f in found if f.evidence["figure"].startswith("dispatched"))
    assert dispatched.identity == "rs-slow"


def test_without_the_stream_plugins_management_the_plugins_largest_lag_per_stream_is_judged():
    s1 = queue("s1", type="stream", messages_ready=3001, stream_max_offset_lag=10)
    start = snapshot(700.0, queues=[s1], unreported=frozenset({STREAM_CLIENTS}))
    now = replace(start, taken_at=1000.0, queues=(replace(s1, stream_max_offset_lag=5000),))
    (f,) = [f for f in evaluate(Context(now, start)) if f.rule == "stream-consumer-lagging"]
    assert "Prometheus plugin" in f.evidence["figure"] and f.object == "stream s1"


def test_a_streams_retained_messages_are_no_backlog():
    retained = queue("events", type="stream", messages_ready=100_000, consumers=0)
    assert not [f for f in evaluate(Context(snapshot(queues=[retained]))) if f.severity != "info"]


def test_links_streams_and_protocols_are_rendered_as_families():
    consumers, stored = _stream_clients()
    mqtt = connection("mqtt-1", protocol="MQTT 3-1-1", client=None)
    s = snapshot(connections=[*_connections().values(), mqtt], links=_links(), stream_consumers=consumers,
                 stored_offsets=stored, queues=[queue("s1", type="stream", stream_max_offset_lag=7)])
    rendered = render(s, PollStatus(up=True, last_success_at=1.0, source="management"), Limits(), diagnose(Context(s)))
    samples = parse(gzip.decompress(rendered.metrics_gz).decode())
    assert value(samples, "ackscope_connections", protocol="MQTT 3-1-1") == 1
    assert value(samples, "ackscope_connections", protocol="AMQP 1-0") == 2
    assert value(samples, "ackscope_link_credit", role="receiver") == 10
    assert value(samples, "ackscope_link_presettled", role="sender", address="/queues/q10", handle="0") == 1
    (c,) = consumers
    assert value(samples, "ackscope_stream_consumer_offset_lag", stream="s1") == c.offset_lag
    assert value(samples, "ackscope_stream_stored_offset_lag", reference="slow-reader") == \
        c.committed_offset - stored[0].offset
    assert value(samples, "ackscope_stream_max_offset_lag", stream="s1") == 7


def _outcomes(version: str, redelivered: int, rejected: int = 0, links=None):
    """Two polls 10 s apart of a broker whose AMQP 1.0 receivers of quorum queue "held" took 1,000 deliveries."""
    from snapshot_builders import OVERVIEW

    from ackscope.model.snapshot import DeadLettered, ProtocolCounts

    receiver = next(k for k in _links() if k.role == "receiver")
    held = queue("q10", type="quorum", delivery_limit=20)

    def at(t: float, delivered: int, again: int, dropped: int):
        return replace(snapshot(t, queues=[held], links=[receiver] if links is None else links,
                                protocol_counts=[ProtocolCounts("rabbit@a", "amqp10", "quorum", delivered, again)],
                                dead_lettered=[DeadLettered("rabbit@a", "rejected", "quorum", "disabled", dropped)]),
                       overview=replace(OVERVIEW, rabbitmq_version=version))
    return Context(at(1010.0, 1000, redelivered, rejected), at(1000.0, 0, 0, 0))


def test_amqp10_deliveries_released_back_are_a_requeue_loop_whose_fate_is_the_releases():
    on_43 = {f.rule: f for f in evaluate(_outcomes("4.3.6", redelivered=950))}["receiver-requeue-loop"]
    assert on_43.severity == "critical" and on_43.object == "queue q10" and on_43.identity.startswith("AMQP 1.0")
    assert "loops forever" in on_43.explanation and on_43.evidence["attribution"].startswith("inferred:")
    on_40 = {f.rule: f for f in evaluate(_outcomes("4.0.5", redelivered=950))}["receiver-requeue-loop"]
    assert "delivery limit" in on_40.explanation and "dropped" in on_40.explanation
    assert not [f for f in evaluate(_outcomes("4.3.6", redelivered=10)) if f.rule == "receiver-requeue-loop"]


def test_a_slow_amqp10_loop_where_nearly_every_delivery_comes_back_is_named_at_any_rate():
    """The K5 kind of issue 55 on AMQP 1.0: 9 of 10 deliveries in 10 s released back is a loop under 1 a second."""
    from snapshot_builders import OVERVIEW

    from ackscope.model.snapshot import ProtocolCounts

    receiver = next(k for k in _links() if k.role == "receiver")

    def at(t: float, delivered: int, again: int):
        return replace(snapshot(t, queues=[queue("q10", type="quorum", delivery_limit=20)], links=[receiver],
                                protocol_counts=[ProtocolCounts("rabbit@a", "amqp10", "quorum", delivered, again)]),
                       overview=replace(OVERVIEW, rabbitmq_version="4.3.6"))
    [slow] = [f for f in evaluate(Context(at(1010.0, 10, 9), at(1000.0, 0, 0))) if f.rule == "receiver-requeue-loop"]
    assert slow.severity == "critical"
    # Half of them back at under one a second: acks get through, no loop.
    assert not [f for f in evaluate(Context(at(1010.0, 10, 5), at(1000.0, 0, 0))) if f.rule == "receiver-requeue-loop"]


def test_rejected_outcomes_without_a_dead_letter_exchange_are_drops_named_by_receiver():
    f = {f.rule: f for f in evaluate(_outcomes("4.3.6", redelivered=0, rejected=300))}["receiver-rejects"]
    assert f.severity == "warning" and f.evidence["dropped"] == 300 and f.object == "queue q10"
    # Where the release lists no links, the counts still tell, and say the receivers are not named.
    unlisted = _outcomes("4.0.5", redelivered=0, rejected=300, links=[])
    unlisted = replace(unlisted, snapshot=replace(unlisted.snapshot, unreported=frozenset({AMQP10_LINKS})))
    f = {f.rule: f for f in evaluate(unlisted)}["receiver-rejects"]
    assert f.object == "AMQP 1.0 receivers of quorum queues" and "not named" in f.evidence["attribution"]
