"""The management API's answers in the shapes of the RabbitMQ versions people run and this machine cannot (3.8,
3.11, 3.12, 3.13, 4.1: tests/data/shapes, written from the fields each version lists, see its README), as the
exporter asks for them (only its columns). Each reads into the same model and the same findings; what a version
adds, drops or renames is read, never taken as zero or a crash."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ackscope.diagnosis.rules import Context, evaluate
from ackscope.sources.management import normalise
from ackscope.sources.management.normalise import COLUMNS

SHAPES = Path(__file__).parent / "data" / "shapes"
VERSIONS = sorted(p.stem.removeprefix("rabbitmq-") for p in SHAPES.glob("rabbitmq-*.json"))


def answers(version: str) -> dict:
    return json.loads((SHAPES / f"rabbitmq-{version}.json").read_text())


def test_every_version_the_issue_names_has_its_shapes():
    assert {v.rsplit(".", 1)[0] for v in VERSIONS} >= {"3.8", "3.11", "3.12", "3.13", "4.1"}


@pytest.mark.parametrize("version", VERSIONS)
def test_the_shapes_hold_only_the_columns_the_exporter_asks_for(version):
    for endpoint, items in answers(version).items():
        asked = {c.split(".", 1)[0] for c in COLUMNS[endpoint]}
        for item in items if isinstance(items, list) else [items]:
            assert set(item) <= asked, (endpoint, set(item) - asked)


@pytest.mark.parametrize("version", VERSIONS)
def test_unacked_against_prefetch_and_confirms_are_read_and_attributed_on_every_version(version):
    snap = normalise.snapshot(answers(version), taken_at=1.0)
    assert snap.overview.rabbitmq_version == version
    by_conn = {c.connection: c for c in snap.channels}
    publisher, worker = (next(c for c in snap.channels if c.confirm is flag) for flag in (True, False))
    assert publisher.connection_name == "billing-publisher" and publisher.messages_unconfirmed == 2
    assert worker.prefetch_count == 4 and worker.messages_unacked == 4 and worker.prefetch_limit == 4
    assert worker.client == "py-amqp 5.2.0", "an unnamed client is known by its library"
    assert len(by_conn) == 2
    (consumer,) = snap.consumers
    assert consumer.queue == "jobs" and consumer.prefetch_count == 4 and consumer.ack_required is True
    queues = {q.name: q for q in snap.queues}
    assert queues["jobs"].consumer_utilisation == 0.35, "read under either name"
    assert queues["payments"].members == ("rabbit@mq-0", "rabbit@mq-1") == queues["payments"].online
    assert all(n.running and n.mem_alarm is False for n in snap.nodes) and len(snap.nodes) == 2
    rules = {f.rule for f in evaluate(Context(snap))}
    assert "prefetch-saturated" in rules, rules


def test_3_8_has_no_streams_and_its_unsynchronised_mirror_is_found():
    snap = normalise.snapshot(answers("3.8.9"), taken_at=1.0)
    assert {q.type for q in snap.queues} == {"classic", "quorum"}
    jobs = next(q for q in snap.queues if q.name == "jobs")
    assert jobs.mirrors == ("rabbit@mq-1",) and jobs.synchronised_mirrors == ()
    assert "mirrored-queue-unsynchronised" in {f.rule for f in evaluate(Context(snap))}
    assert snap.nodes[0].io_sync_count == 412, "3.x counts its fsyncs"


@pytest.mark.parametrize("version", ["3.11.28", "3.12.14", "3.13.7"])
def test_3_11_to_3_13_list_streams_and_a_synchronised_mirror_is_not_a_finding(version):
    snap = normalise.snapshot(answers(version), taken_at=1.0)
    assert {q.type for q in snap.queues} == {"classic", "quorum", "stream"}
    assert "mirrored-queue-unsynchronised" not in {f.rule for f in evaluate(Context(snap))}


def test_4_x_has_no_mirrors_no_fsync_counts_and_an_amqp_1_0_connection_without_channels():
    snap = normalise.snapshot(answers("4.1.4"), taken_at=1.0)
    assert not any(q.mirrors for q in snap.queues), "classic mirroring is gone in 4.0"
    assert all(n.io_sync_count is None for n in snap.nodes), "4.x reports 0 fsyncs: not data"
    assert any("fsync" in note for note in snap.notes)
    amqp10 = next(c for c in snap.connections if c.peer_host == "10.0.0.7")
    assert amqp10.heartbeat_seconds is None and not [ch for ch in snap.channels if ch.connection == amqp10.name]


def test_a_release_never_seen_is_read_as_far_as_it_goes_and_what_it_lacks_is_named():
    """A 5.0 whose channels renamed their unacked count and dropped the transactional flag, and whose queues
    lost their type: read, the rest of the findings intact, the fields named, never a crash or zeros."""
    raw = answers("4.1.4")
    raw["overview"]["rabbitmq_version"] = "5.0.0"
    for ch in raw["channels"]:
        ch["unacknowledged_messages"] = ch.pop("messages_unacknowledged")
        ch.pop("transactional")
    for q in raw["queues"]:
        q.pop("type")
    snap = normalise.snapshot(raw, taken_at=1.0)
    assert all(ch.messages_unacked is None and ch.transactional is None for ch in snap.channels)
    assert {q.type for q in snap.queues} == {"classic"}, "a queue with no type is read as the default one"
    missing = normalise.missing_fields(raw)
    assert {"channels.messages_unacknowledged", "channels.transactional", "queues.type"} <= set(missing)
    assert "channels.prefetch_count" not in missing
    evaluate(Context(snap))
