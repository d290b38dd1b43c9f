"""Per-connection series: negotiated heartbeat and flow-control state, by the client's connection name."""

from __future__ import annotations

from ackscope.model.snapshot import Connection, Snapshot

from .families import flag, gauge

LABELS = ("vhost", "connection", "connection_name", "user", "client")


def _labels(c: Connection) -> tuple[str, ...]:
    return (c.vhost, c.name, c.connection_name, c.user, c.client or "")


class ConnectionCollector:
    def __init__(self, snapshot: Snapshot):
        self._snapshot = snapshot

    def collect(self):
        connections = self._snapshot.connections
        yield gauge("ackscope_connection_heartbeat_seconds", "Negotiated AMQP heartbeat timeout (0 = off: a "
                    "dead peer may go unnoticed for many minutes).", LABELS, connections, _labels,
                    lambda c: c.heartbeat_seconds)
        yield gauge("ackscope_connection_blocked", "1 when the connection is blocked, blocking or in flow "
                    "control (its publishers are being held back).", LABELS, connections, _labels,
                    lambda c: flag(c.blocked))
        counted: dict[tuple[str, str], int] = {}
        for c in connections:
            key = (c.vhost, c.protocol or "unknown")
            counted[key] = counted.get(key, 0) + 1
        yield gauge("ackscope_connections", "Connections by protocol as the broker names it (AMQP 0-9-1, AMQP 1-0, "
                    "MQTT, STOMP, stream ...).", ("vhost", "protocol"), counted.items(), lambda kv: kv[0],
                    lambda kv: kv[1])
