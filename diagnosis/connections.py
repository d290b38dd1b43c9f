"""Rules about connections: heartbeats, and publishers the broker holds back."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from ackscope.model.findings import Finding
from ackscope.model.snapshot import CONNECTION_HEARTBEATS, CONNECTION_STATES, Connection

from .context import RELIABILITY_GUIDE, Context, Rule, num
from .publishers import publishes_at_stake


def _client_of(c: Connection) -> tuple:
    """What tells one client's connections from another's: its vhost, user, host and library (a Celery worker's
    consumer, producer, event and control connections share them)."""
    return c.vhost, c.user, c.peer_host, c.client


def _heartbeat_disabled(ctx: Context, rule: Rule) -> Iterator[Finding]:
    of_client: dict[tuple, list[Connection]] = defaultdict(list)
    for c in ctx.snapshot.connections:
        of_client[_client_of(c)].append(c)

    def at_risk(client: tuple) -> tuple[bool, bool]:
        # What a silent network failure would cost the client: deliveries held by its consumers, or a publisher
        # that keeps writing into a dead socket, on any of its connections (Celery's idle producer connection
        # belongs to a worker that consumes). A client that does neither is info.
        channels = [ch for c in of_client[client] for ch in ctx.channels_of(c.name)]
        return (any(num(ch.consumer_count) > 0 for ch in channels),
                any(publishes_at_stake(ctx, ch)[0] for ch in channels))
    for c in ctx.snapshot.connections:
        if c.heartbeat_seconds != 0:
            continue
        consuming, publishing = ctx.once(("client", _client_of(c)), lambda: at_risk(_client_of(c)))
        siblings = len(of_client[_client_of(c)]) - 1
        yield rule.finding("warning" if consuming or publishing else "info", c.vhost, f"connection {c.name}", c,
                           {"heartbeat_seconds": 0, "client": c.client, "consumes": consuming,
                            "publishes_at_stake": publishing,
                            **({"client_connections": f"{siblings + 1} (inferred: the same library, host, user "
                                                      "and vhost)"} if siblings else {})},
                           "the connection negotiated no heartbeat: if the network fails silently, neither "
                           "side notices for minutes (about 11 with Linux defaults)" + (
                               ", and its client's unacked messages stay locked to a dead consumer" if consuming else
                               ", and its client's publishes go into a dead socket" if publishing else
                               "; its client neither consumes nor publishes anything at stake, so this is info") + (
                               f" (the client's {siblings + 1} connections judged together)." if siblings else "."))


def _blocked(ctx: Context, rule: Rule) -> Iterator[Finding]:
    for c in ctx.snapshot.connections:
        if c.blocked:
            yield rule.finding("info" if c.state == "flow" else "warning", c.vhost, f"connection {c.name}",
                               c, {"state": c.state},
                               "the broker holds back this connection's publishes" + (
                                   " with credit flow control: it publishes faster than queues absorb."
                                   if c.state == "flow" else ": a resource alarm (memory or disk) blocks every "
                                   "publishing connection until it clears."))


RULES: tuple[Rule, ...] = (
    Rule("heartbeat-disabled", "A connection with heartbeat 0; a warning when its client (the connections of "
         "one library, host, user and vhost) consumes or publishes at stake, info otherwise.", "Enable heartbeats (a timeout of 5-20 s is "
         f"common); see {RELIABILITY_GUIDE}, 'Detecting Dead TCP Connections with Heartbeats'.",
         _heartbeat_disabled, needs=(CONNECTION_HEARTBEATS,)),
    Rule("connection-blocked", "Connections blocked, blocking or in flow control.", "Find the alarm or the slow "
         "queue: memory and disk alarms block all publishers; flow control means queues lag behind publishers. "
         "See RabbitMQ guides 'Memory and Disk Alarms' and 'Flow Control'.",
         _blocked, needs=(CONNECTION_STATES,)),
)
