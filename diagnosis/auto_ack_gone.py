"""Deliveries made with automatic acknowledgement to a consumer whose channel then went: the broker counted each as
done when it sent it, so what the client had received and not yet processed when its connection closed is lost.

The broker counts none of them: what is known is what the channel received without ack, from the polls that saw it,
and how its connection ended where the broker's log (or event exchange) says. auto-ack-consumer judges the consumers
still there; this judges the ones that went, over the window."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from ackscope.model.events import CHANNEL_ERROR, CONNECTION_CLOSED, CONNECTION_ERROR, BrokerEvent
from ackscope.model.findings import Finding
from ackscope.model.snapshot import CHANNELS, CONNECTIONS, STATISTICS_INTERVAL

from .context import ACKS_GUIDE, Context, Rule, few, rounded
from .departures import DepartedChannel, channels_departed

# How a connection ended, as the broker's log says (sources/broker_log/lines.py), where its client did not close it:
# what the client held was not processed. A close the log calls plain ("closed"), or the event exchange's (which says
# no why), may be the client's own, once done.
DROPPED = frozenset({"dropped", "missed heartbeats", "error"})


def _end(ctx: Context, d: DepartedChannel) -> BrokerEvent | None:
    """The event that ended the channel or its connection, where a source told of one: between the poll that last
    listed the channel and the first that did not, give or take the statistics interval the lists lag by (a later
    end of its connection is not this channel's)."""
    if ctx.breaks is None:
        return None
    ch = d.record
    return next((e for e in reversed(ctx.breaks.events) if e.connection == ch.connection
                 and d.last_seen - STATISTICS_INTERVAL <= e.at <= d.noticed + STATISTICS_INTERVAL and (
                     e.kind in (CONNECTION_CLOSED, CONNECTION_ERROR) or e.kind == CHANNEL_ERROR
                     and e.channel == ch.number)), None)


def _abrupt(e: BrokerEvent | None) -> bool:
    return e is not None and (e.kind in (CONNECTION_ERROR, CHANNEL_ERROR) or e.reason in DROPPED)


def _lost_with_consumer(ctx: Context, rule: Rule) -> Iterator[Finding]:
    now = ctx.snapshot
    connections = None if CONNECTIONS in now.unreported else {c.name for c in now.connections}
    for d in _gone_over_window(ctx).values():
        ch, queues, received = d.record, d.auto_ack_queues, d.received_lately
        end = _end(ctx, d)
        gone = "its connection closed" if connections is not None and ch.connection not in connections else \
            "the channel closed"
        said = f"{end.source}: {end.reason or end.kind}" + (f" ({end.text})" if end.text else "") if end else None
        evidence = {"deliveries_without_ack_over_window": received or 0,
                    "deliveries_without_ack_total": ch.message_stats.deliver_no_ack,
                    "auto_ack_queues": few(queues) if queues else None,
                    "last_seen_seconds_ago": rounded(now.taken_at - d.last_seen),
                    "ended": said or f"{gone} (how, no event source said)",
                    "lost": "not counted by the broker: what the client had received and not processed (inferred)"}
        # A warning where it received something lately (over the window, or unknown: last seen at the window's
        # start) and did not end by its own close; a channel idle over the window had nothing in hand.
        lately = received is None or received > 0
        yield rule.finding(
            "warning" if _abrupt(end) and lately else "info", ch.vhost, f"channel {ch.name}", ch, evidence,
            f"the channel consumed with automatic acknowledgement"
            + (f" from {few(queues)}" if queues else "")
            + (f" ({received} deliveries without ack over the window)" if received else "")
            + f" and is gone: {said or gone}. The broker counted each delivery as done when it sent it: what "
            "the client had received and not processed then is lost, and no count says how many (inferred).")


def _gone_over_window(ctx: Context) -> Mapping[str, DepartedChannel]:
    """The channels that went over the window: as the exporter remembered them from poll to poll, or, without that
    memory, those the poll before or the window's start listed and this poll does not (the poll before's record
    first: the later one)."""
    if ctx.departed is not None:
        return ctx.departed.channels
    start = ctx.window_start
    return {**channels_departed(start, ctx.snapshot, start), **channels_departed(ctx.previous, ctx.snapshot, start)}


RULES = (
    Rule("auto-ack-consumer-gone", "A channel that consumed with automatic acknowledgement (an auto-ack consumer, or "
         "deliveries without ack over the window) and is gone: what its client had received and not processed is "
         "lost, uncounted (inferred). A warning where the broker's log or event exchange says its connection or "
         "channel ended on an error or dropped; info where it may have closed cleanly.",
         "Consume with manual acknowledgements and a prefetch limit, acking each message once processed: the "
         f"broker then delivers again what a dead consumer did not ack; see {ACKS_GUIDE}.", _lost_with_consumer,
         needs=(CHANNELS,)),
)
