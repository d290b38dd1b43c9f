"""Channels opened and closed over and over on connections that stay open, named from polls alone.

Polls see the channels open at a poll (diagnosis.channel_turnover): a connection whose channels close while it stays
is named by what polls saw of it, at least that many, at its own rate; channel numbers it passed over between polls
add to what was seen (an inference, labelled as one), never name a connection no poll saw close a channel. The broker's own churn counters count every
channel and connection closed, summed over its nodes and with no client named: shown beside, they name nobody (a
connection closing with several channels closes them all, so their difference counts no churn on connections that
stay). Why the channels closed, polls cannot say: the broker closes a channel on an error (an unknown delivery tag
from a double ack, a redeclare with other arguments) and its log says so (closed-on-error); a client may close its
own."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from ackscope.model.events import BROKER_LOG, CHANNEL_ERROR
from ackscope.model.findings import Finding
from ackscope.model.snapshot import CHANNELS, Connection

from .channel_turnover import Closed, closed_between
from .context import Context, Named, Rule, rounded

SEEN_ENOUGH = 3  # channels polls saw close on one connection: a client of its own churning, not a one-off
GUIDE = "RabbitMQ guide 'Channels', 'High Channel Churn'"


def _seen(ctx: Context) -> Mapping[str, Closed]:
    """Connection name -> channels polls saw close on it in the window while it stayed open."""
    if ctx.turnover is not None:
        return ctx.turnover
    start = ctx.window_start
    return closed_between(start, ctx.snapshot) if start is not None else {}


def _broker_counts(ctx: Context) -> tuple[int, int, float] | None:
    """(channels, connections) the broker counted closed, all clients, and over how many seconds: since the window's
    start, or since the poll before where the window's start has no counts (a node's first seconds list none); None
    where neither has them."""
    now = ctx.snapshot.overview.churn
    def counted(s):
        c = s.overview.churn if s is not None and s.taken_at < ctx.snapshot.taken_at else None
        return c if c is not None and None not in (c.channels_closed, c.connections_closed) else None
    base = next((s for s in (ctx.window_start, ctx.previous) if counted(s) is not None), None)
    if base is None or now is None or None in (now.channels_closed, now.connections_closed):
        return None
    then = counted(base)
    # A counter lower than at the start was reset (its node restarted): what it counts now is all new.
    def grew(a: int, b: int) -> int:
        return b - a if b >= a else b
    return (grew(then.channels_closed, now.channels_closed), grew(then.connections_closed, now.connections_closed),
            ctx.snapshot.taken_at - base.taken_at)


def _why(ctx: Context, connection: str) -> str:
    if ctx.breaks is None or not ctx.breaks.told_by(BROKER_LOG):
        return ("not known: give --broker-log (the broker closes a channel on an error, such as an unknown delivery "
                "tag from a double ack; a client may also close its own)")
    errors = [e for e in ctx.breaks.events if e.kind == CHANNEL_ERROR and e.connection == connection]
    if errors:
        return f"the broker closed {len(errors)} of them on an error (closed-on-error names it): {errors[-1].text}"
    return "the broker's log names no error for them: the client closes them itself (a channel per operation)"


def _who(ctx: Context, connection: str) -> tuple[str, Connection | Named]:
    """The connection's vhost and its record, for the culprit."""
    record = next((c for c in ctx.snapshot.connections if c.name == connection), None)
    if record is not None:
        return record.vhost, record
    ch = next(iter(ctx.channels_of(connection)), None)
    if ch is not None:
        return ch.vhost, Named(ch.connection_name, ch.client or "", ch.identity or connection)
    return "", Named("", "", connection)


def _churn(ctx: Context, rule: Rule) -> Iterator[Finding]:
    window = ctx.window_seconds
    if window is None:
        return
    per_minute = ctx.thresholds.churn_channels_per_minute
    # Connections of this snapshot only: the probes' own are not judged (the memory was fed every connection).
    known = {c.name for c in ctx.snapshot.connections} | {c.connection for c in ctx.snapshot.channels}
    seen = {c: n for c, n in _seen(ctx).items() if c and n.seen and c in known}
    counted = _broker_counts(ctx)
    # Beside a finding, the broker's own count, for all clients: how many channels and connections closed. Their
    # difference is no count of channels closed on connections that stayed (a connection closing with three channels
    # closes three), so it names nobody and tips nothing.
    broker = {} if counted is None else {"broker_channels_closed": counted[0], "broker_connections_closed": counted[1],
                                         "broker_counted_over_seconds": rounded(counted[2])}
    for connection, n in sorted(seen.items()):
        if n.total >= SEEN_ENOUGH and n.total * 60 / window >= per_minute:
            yield _finding(ctx, rule, connection, n, window, broker)


def _finding(ctx: Context, rule: Rule, connection: str, closed: Closed, window: float, broker: dict) -> Finding:
    vhost, who = _who(ctx, connection)
    why = _why(ctx, connection)
    n = closed.total
    inferred = {} if not closed.inferred else {
        "channels_inferred_closed": closed.inferred,
        "inferred": "channel numbers the client passed over between polls, listed open at no poll (clients number "
                    "channels upwards), no more than the broker counted channels closed meanwhile (all clients)"}
    evidence = {"channels_seen_closed_at_least": closed.seen, **inferred, "window_seconds": rounded(window),
                "channels_open_now": len(ctx.channels_of(connection)), **broker,
                "seen": "polls see the channels open at a poll: one opened and closed between two polls is not seen",
                "reason": why, "source": "polls"}
    return rule.finding(
        "warning", vhost, f"connection {connection}", who, evidence,
        f"{who.identity} kept its connection open while at least {n} of its channels closed in the last {window:.0f} s"
        f" ({_how(closed)}): a channel per operation, or channels the broker closes on an error. Each close takes "
        f"back the channel's unacked deliveries (delivered again) and costs a channel process on the broker. Why: "
        f"{why}.",
        None)


def _how(closed: Closed) -> str:
    if not closed.inferred:
        return "polls saw them go"
    return (f"polls saw {closed.seen} go; {closed.inferred} more inferred from the channel numbers it passed over "
            f"between polls")


RULES: tuple[Rule, ...] = (
    Rule("channel-churn", "A connection that stays open while its channels close over and over, named from polls "
         f"alone: {SEEN_ENOUGH} or more closing in the window, at churn_channels_per_minute, one seen at least. A channel "
         "is counted once a second poll has not listed it again, and not from a poll that did not read the channels; "
         "channel numbers passed over between polls count as closed (inferred), no more than the broker counted "
         "channels closed meanwhile; the "
         "broker's own counts of channels and connections closed are shown beside, and name nobody. Why they "
         "closed comes from the broker's log where it is read; else it is not known.",
         "Read why they closed (--broker-log; closed-on-error names the broker's reason): ack each delivery once, on "
         "the channel that received it; keep one channel per thread open for the connection's life instead of one "
         f"per operation. See {GUIDE}.", _churn, needs=(CHANNELS,)),
)
