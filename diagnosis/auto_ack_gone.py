"""Deliveries made with automatic acknowledgement to a consumer whose channel then went: the broker counted each as
done when it sent it, so what the client had received and not yet processed when its connection closed is lost.

The broker counts none of them: what is known is what the channel received without ack, from the polls that saw it,
and how its connection ended where the broker's log (or event exchange) says. auto-ack-consumer judges the consumers
still there; this judges the ones that went, over the window."""

from __future__ import annotations

from collections.abc import Iterator

from ackscope.model.events import CHANNEL_ERROR, CONNECTION_CLOSED, CONNECTION_ERROR, BrokerEvent
from ackscope.model.findings import Finding
from ackscope.model.probes import is_probe_connection
from ackscope.model.snapshot import CHANNELS, CONNECTIONS, Channel, Snapshot

from .context import ACKS_GUIDE, Context, Rule, few, num, rounded

# How a connection ended, as the broker's log says (sources/broker_log/lines.py), where its client did not close it:
# what the client held was not processed. A close the log calls plain ("closed"), or the event exchange's (which says
# no why), may be the client's own, once done.
DROPPED = frozenset({"dropped", "missed heartbeats", "error"})


def _end(ctx: Context, ch: Channel) -> BrokerEvent | None:
    """The event that ended the channel or its connection, where a source told of one over the window."""
    if ctx.breaks is None:
        return None
    return next((e for e in reversed(ctx.breaks.events) if e.connection == ch.connection and (
        e.kind in (CONNECTION_CLOSED, CONNECTION_ERROR) or e.kind == CHANNEL_ERROR and e.channel == ch.number)), None)


def _abrupt(e: BrokerEvent | None) -> bool:
    return e is not None and (e.kind in (CONNECTION_ERROR, CHANNEL_ERROR) or e.reason in DROPPED)


def _lost_with_consumer(ctx: Context, rule: Rule) -> Iterator[Finding]:
    now = ctx.snapshot
    open_channels = {c.name for c in now.channels}
    connections = None if CONNECTIONS in now.unreported else {c.name for c in now.connections}
    seen: set[str] = set()
    # The poll before first (the channel as last seen), then the window's start (a channel gone before that poll).
    for sample in (ctx.previous, ctx.window_start):
        if sample is None or CHANNELS in sample.unreported:
            continue
        auto_ack = _auto_ack_consumers(sample)
        for ch in sample.channels:
            if ch.name in open_channels or ch.name in seen or is_probe_connection(ch.connection_name):
                continue
            seen.add(ch.name)
            queues = auto_ack.get(ch.name, [])
            grown = _grown(ctx, ch, sample)
            # A channel the broker never counted a delivery without ack for (a Celery worker's control reply queue,
            # idle; the API leaves out a counter never counted) had nothing to lose.
            if not queues and not grown or not ch.message_stats.deliver_no_ack:
                continue
            end = _end(ctx, ch)
            gone = "its connection closed" if connections is not None and ch.connection not in connections else \
                "the channel closed"
            said = f"{end.source}: {end.reason or end.kind}" + (f" ({end.text})" if end.text else "") if end else None
            evidence = {"deliveries_without_ack_over_window": grown,
                        "deliveries_without_ack_total": ch.message_stats.deliver_no_ack,
                        "auto_ack_queues": few(queues) if queues else None,
                        "last_seen_seconds_ago": rounded(now.taken_at - sample.taken_at),
                        "ended": said or f"{gone} (how, no event source said)",
                        "lost": "not counted by the broker: what the client had received and not processed (inferred)"}
            # A warning where it received something lately (over the window, or unknown: last seen at the window's
            # start) and did not end by its own close; a channel idle over the window had nothing in hand.
            lately = grown > 0 or sample is ctx.window_start
            yield rule.finding(
                "warning" if _abrupt(end) and lately else "info", ch.vhost, f"channel {ch.name}", ch, evidence,
                f"the channel consumed with automatic acknowledgement"
                + (f" from {few(queues)}" if queues else "")
                + (f" ({grown} deliveries without ack over the window)" if grown else "")
                + f" and is gone: {said or gone}. The broker counted each delivery as done when it sent it: what "
                "the client had received and not processed then is lost, and no count says how many (inferred).")


def _auto_ack_consumers(s: Snapshot) -> dict[str, list[str]]:
    """Per channel, the queues it consumed from with automatic acknowledgement."""
    found: dict[str, list[str]] = {}
    for c in s.consumers:
        if c.ack_required is False:
            found.setdefault(c.channel, []).append(c.queue)
    return found


def _grown(ctx: Context, ch: Channel, sample: Snapshot) -> int:
    """What the channel received without ack over the window, up to `sample`: since the window's start, or since it
    opened within the window."""
    start = ctx.window_start
    if start is None or sample is start:
        return 0
    then = ctx.channel_at_window_start(ch.name)
    return max(0, num(ch.message_stats.deliver_no_ack) - num(then.message_stats.deliver_no_ack if then else 0))


RULES = (
    Rule("auto-ack-consumer-gone", "A channel that consumed with automatic acknowledgement (an auto-ack consumer, or "
         "deliveries without ack over the window) and is gone: what its client had received and not processed is "
         "lost, uncounted (inferred). A warning where the broker's log or event exchange says its connection or "
         "channel ended on an error or dropped; info where it may have closed cleanly.",
         "Consume with manual acknowledgements and a prefetch limit, acking each message once processed: the "
         f"broker then delivers again what a dead consumer did not ack; see {ACKS_GUIDE}.", _lost_with_consumer,
         needs=(CHANNELS,)),
)
