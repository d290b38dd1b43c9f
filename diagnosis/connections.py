"""Rules about connections: heartbeats, and publishers the broker holds back."""

from __future__ import annotations

from collections.abc import Iterator

from ackscope.model.findings import Finding
from ackscope.model.snapshot import CONNECTION_HEARTBEATS, CONNECTION_STATES

from .context import RELIABILITY_GUIDE, Context, Rule, num
from .publishers import publishes_at_stake


def _heartbeat_disabled(ctx: Context, rule: Rule) -> Iterator[Finding]:
    for c in ctx.snapshot.connections:
        if c.heartbeat_seconds != 0:
            continue
        # What a silent network failure would cost: deliveries held by its consumers, or a publisher that
        # keeps writing into a dead socket. An idle connection (Celery's producer pool) is info.
        channels = ctx.channels_of(c.name)
        consuming = any(num(ch.consumer_count) > 0 for ch in channels)
        publishing = any(publishes_at_stake(ctx, ch)[0] for ch in channels)
        yield rule.finding("warning" if consuming or publishing else "info", c.vhost, f"connection {c.name}", c,
                           {"heartbeat_seconds": 0, "client": c.client, "consumes": consuming,
                            "publishes_at_stake": publishing},
                           "the connection negotiated no heartbeat: if the network fails silently, neither "
                           "side notices for minutes (about 11 with Linux defaults)" + (
                               ", and its unacked messages stay locked to a dead consumer." if consuming else
                               ", and its publishes go into a dead socket." if publishing else
                               "; it neither consumes nor publishes much, so this is info."))


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
    Rule("heartbeat-disabled", "A connection with heartbeat 0; info when it neither consumes nor publishes "
         "at stake.", "Enable heartbeats (a timeout of 5-20 s is "
         f"common); see {RELIABILITY_GUIDE}, 'Detecting Dead TCP Connections with Heartbeats'.",
         _heartbeat_disabled, needs=(CONNECTION_HEARTBEATS,)),
    Rule("connection-blocked", "Connections blocked, blocking or in flow control.", "Find the alarm or the slow "
         "queue: memory and disk alarms block all publishers; flow control means queues lag behind publishers. "
         "See RabbitMQ guides 'Memory and Disk Alarms' and 'Flow Control'.",
         _blocked, needs=(CONNECTION_STATES,)),
)
