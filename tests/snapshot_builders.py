"""Small snapshots for pure tests: every field defaulted to what a quiet broker reports."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from ackscope.model.snapshot import Channel, Connection, Consumer, MessageStats, Node, Overview, Queue, Snapshot

OVERVIEW = Overview("3.10.8", "25", "3.10.8", "rabbit@test", False, MessageStats())


def stats(**counts) -> MessageStats:
    return MessageStats(**counts)


def queue(name: str = "q", **kw) -> Queue:
    base = Queue(vhost="/", name=name, type="classic", durable=True, auto_delete=False, exclusive=False,
                 state="running", node="rabbit@test", messages_ready=0, messages_unacked=0, messages_persistent=0,
                 consumers=1, consumer_utilisation=1.0, message_stats=MessageStats(), settings_shown=True)
    return replace(base, **kw)


def channel(name: str = "ch 1", **kw) -> Channel:
    base = Channel(name=name, number=1, vhost="/", user="guest", connection="conn", connection_name="app",
                   prefetch_count=50, global_prefetch_count=0, messages_unacked=0, messages_unconfirmed=0,
                   confirm=True, transactional=False, consumer_count=1, state="running", message_stats=MessageStats())
    return replace(base, **kw)


def consumer(queue_name: str = "q", channel_name: str = "ch 1", **kw) -> Consumer:
    base = Consumer(vhost="/", queue=queue_name, consumer_tag="ctag", channel=channel_name, connection="conn",
                    connection_name="app", user="guest", prefetch_count=50, ack_required=True, exclusive=False,
                    active=True)
    return replace(base, **kw)


def connection(name: str = "conn", **kw) -> Connection:
    base = Connection(name=name, vhost="/", user="guest", connection_name="app", heartbeat_seconds=60,
                      state="running", node="rabbit@test", peer_host="127.0.0.1", client="pika 1.3")
    return replace(base, **kw)


def node(name: str = "rabbit@test", **kw) -> Node:
    base = Node(name=name, running=True, mem_used=100, mem_limit=1000, mem_alarm=False, disk_free=10**9,
                disk_free_limit=10**6, disk_free_alarm=False, fd_used=10, fd_total=1000, io_sync_count=None,
                io_sync_avg_seconds=None)
    return replace(base, **kw)


def snapshot(taken_at: float = 1000.0, overview: Overview = OVERVIEW, **parts) -> Snapshot:
    return Snapshot(taken_at=taken_at, overview=overview, **{k: tuple(v) for k, v in parts.items()})


STATS_OFF = Path(__file__).parent / "data" / "rabbitmq-3.10.8-stats-off"


def recorded_plugin_snapshot() -> Snapshot:
    """The Prometheus-plugin source's snapshot of the answers recorded from a real node with statistics off
    (python tests/data/record.py --statistics-off)."""
    from ackscope.sources.management import normalise as management
    from ackscope.sources.prometheus_plugin import normalise as plugin
    raw = {name: json.loads((STATS_OFF / f"{name}.json").read_text())
           for name in ("overview", "nodes", "vhosts", "connections", "queues")}
    base = management.snapshot({**raw, "channels": [], "consumers": []}, 1000.0)
    return plugin.snapshot(base, plugin.parse((STATS_OFF / "detailed.prom").read_text(), "metrics/detailed"),
                           (plugin.parse((STATS_OFF / "metrics.prom").read_text(), "metrics"),))
