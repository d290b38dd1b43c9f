"""Above the limits the largest objects keep their series and the rest fold into per-vhost totals."""

from __future__ import annotations

import dataclasses
import json

from helpers import only_vhost, parse, value, wait_for_sample

from ackscope.exporter.cardinality import FOLDED, Limits, shape
from ackscope.exporter.exposition import render, snapshot_json
from ackscope.exporter.status import PollStatus
from ackscope.model.snapshot import Channel, Connection, Consumer, MessageStats, Overview, Queue, Snapshot

OVERVIEW = Overview("3.10.8", "25", "3.10.8", "c", False, MessageStats())


def _queue(vhost: str, name: str, ready: int) -> Queue:
    return Queue(vhost, name, "classic", True, False, False, "running", "n", ready, 0, ready, 0, None,
                 MessageStats(publish=ready))


def _channel(vhost: str, name: str, unacked: int) -> Channel:
    return Channel(name, 1, vhost, "u", "conn", "client", 10, 0, unacked, 0, False, False, 1, "running",
                   MessageStats(deliver_get=unacked))


def test_largest_queues_keep_series_and_the_rest_fold_per_vhost():
    queues = [_queue("a", f"q{i}", i) for i in range(6)] + [_queue("b", "small", 0)]
    shaped = shape(Snapshot(1.0, OVERVIEW, queues=tuple(queues)), Limits(max_queues=3))
    assert [q.name for q in shaped.queues] == ["q5", "q4", "q3"]
    folded = {f.vhost: f for f in shaped.folded_queues}
    assert folded["a"].count == 3 and folded["a"].messages_ready == 0 + 1 + 2
    assert folded["a"].message_stats.publish == 3
    assert folded["b"].count == 1


def test_consumers_fold_with_their_channel():
    channels = (_channel("v", "busy", 9), _channel("v", "idle", 0))
    consumers = tuple(Consumer("v", "q", f"tag-{c.name}", c.name, "conn", "client", "u", 10, True, False, True)
                      for c in channels)
    shaped = shape(Snapshot(1.0, OVERVIEW, channels=channels, consumers=consumers), Limits(max_channels=1))
    assert [c.channel for c in shaped.consumers] == ["busy"]
    assert [(f.vhost, f.count) for f in shaped.folded_consumers] == [("v", 1)]


def test_folded_totals_and_fold_counts_are_in_the_exposition():
    queues = tuple(_queue("a", f"q{i}", i) for i in range(5))
    status = PollStatus(up=True, last_duration=0.1)
    s = parse(render(Snapshot(1.0, OVERVIEW, queues=queues), status, Limits(max_queues=2)).metrics_body(False).decode())
    assert value(s, "ackscope_queue_messages_ready", vhost="a", queue=FOLDED) == 0 + 1 + 2
    assert value(s, "ackscope_folded_objects", kind="queue", vhost="a") == 3
    assert len(s["ackscope_queue_messages_ready"]) == 3
    total = sum(v for _, v in s["ackscope_queue_messages_ready"])
    assert total == sum(range(5)), "folding never loses a message from the totals"


def test_nothing_folds_below_the_limits():
    queues = tuple(_queue("a", f"q{i}", i) for i in range(5))
    shaped = shape(Snapshot(1.0, OVERVIEW, queues=queues), Limits())
    assert len(shaped.queues) == 5 and shaped.folded_queues == ()


def test_exporter_folds_real_queues_beyond_max_queues(broker, vhost, clients, start_exporter):
    ch = clients(broker, vhost, "many-queues").channel()
    for i in range(6):
        ch.queue_declare(f"fold-{i}")
        for _ in range(i):
            ch.basic_publish("", f"fold-{i}", b"x")
    exporter = start_exporter(broker.management_url, selection=only_vhost(vhost),
                              limits=Limits(max_queues=4))
    s = wait_for_sample(exporter, "ackscope_folded_objects", 2, kind="queue", vhost=vhost)
    s = wait_for_sample(exporter, "ackscope_queue_messages_ready", 1, vhost=vhost, queue=FOLDED)
    kept = {lbl["queue"] for lbl, _ in s["ackscope_queue_messages_ready"] if lbl["vhost"] == vhost}
    assert kept == {"fold-5", "fold-4", "fold-3", "fold-2", FOLDED}


def test_snapshot_json_carries_every_record_field_and_the_derived_facts():
    conn = Connection("c", "v", "u", "billing", 0, "blocked", "n", "127.0.0.1", "pika 1.3")
    channel, queue = _channel("v", "ch", 5), _queue("v", "q", 3)
    snap = Snapshot(1.0, OVERVIEW, vhosts=("v",), connections=(conn,), channels=(channel,), queues=(queue,))
    document = json.loads(snapshot_json(snap, PollStatus(up=True)))
    assert document["up"] is True and document["stale"] is False
    got = document["snapshot"]
    assert got["overview"] == dataclasses.asdict(OVERVIEW)
    assert got["connections"] == [dataclasses.asdict(conn) | {"blocked": True, "identity": "billing"}]
    assert got["channels"] == [dataclasses.asdict(channel) | {"prefetch_limit": 10, "queues": [], "exchanges": []}]
    assert got["queues"] == [dataclasses.asdict(queue) | {"arguments": []}]
    assert got["vhosts"] == ["v"] and got["consumers"] == [] and got["taken_at"] == 1.0
