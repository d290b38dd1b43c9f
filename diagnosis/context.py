"""What every rule works from: the Context (this snapshot, the one before, the recent window, the probes'
statistics, the thresholds), the Rule record that turns a verdict into a Finding, and the few helpers the
rules of several concerns share."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from ackscope.model.confirm_bench import ConfirmBench
from ackscope.model.events import Breaks
from ackscope.model.findings import Finding, OldestMessage
from ackscope.model.probes import NAMESPACE, TargetStats, is_probe_connection
from ackscope.model.snapshot import (DEAD_LETTER_COUNTS, Channel, Connection, Consumer, Exchange, Link, Queue,
                                     Snapshot)
from ackscope.model.traces import TraceWindow

from .channel_turnover import Closed
from .confirm_waits import InFlight
from .departures import Departed
from .holding import Held
from .thresholds import Thresholds
from .waiting import stamped

ACKS_GUIDE = "RabbitMQ guide 'Consumer Acknowledgements and Publisher Confirms'"
RELIABILITY_GUIDE = "RabbitMQ guide 'Reliability Guide'"


def without_probes(s: Snapshot | None) -> Snapshot | None:
    """The snapshot without the probes' own connections, channels, consumers and queues: the probe rules
    judge what the probes measure; the client rules never judge the client the probes are."""
    if s is None:
        return None
    return replace(s, connections=tuple(c for c in s.connections if not is_probe_connection(c.connection_name)),
                   channels=tuple(c for c in s.channels if not is_probe_connection(c.connection_name)),
                   consumers=tuple(c for c in s.consumers if not is_probe_connection(c.connection_name)),
                   queues=tuple(q for q in s.queues if not q.name.startswith(NAMESPACE)))


@dataclass(frozen=True)
class Context:
    snapshot: Snapshot
    previous: Snapshot | None = None  # the sample before, for growth between polls; None on the first poll
    probes: tuple[TargetStats, ...] = ()
    thresholds: Thresholds = Thresholds()
    # The snapshot at the start of the recent window (diagnosis.window.Recent) that rate-like rules judge;
    # the previous sample when None (`ackscope diagnose` reads twice, a window apart).
    window: Snapshot | None = None
    # The events the broker's log (or event exchange) told of over the window; None where no such source is read.
    breaks: Breaks | None = None
    # Since when each channel has held deliveries without settling any (diagnosis.holding); None: not tracked.
    held: Held | None = None
    # Each queue's oldest message's age, per (vhost, queue), with the bound its history gives (diagnosis.waiting);
    # None: not tracked, and only the publishers' timestamps say.
    oldest: Mapping[tuple[str, str], OldestMessage] | None = None
    # Each confirm channel's unconfirmed count as sampled while it published over the window
    # (diagnosis.confirm_waits); None: not tracked.
    in_flight: Mapping[str, InFlight] | None = None
    # Per connection, the channels polls saw close (or inferred closed) over the window while it stayed open
    # (diagnosis.channel_turnover.Closed); None: not tracked, and the window's start and end alone say.
    turnover: Mapping[str, Closed] | None = None
    # The channels and queues that went over the window, each as last listed (diagnosis.departures); None: not
    # tracked, and the poll before (and the window's start) alone say.
    departed: Departed | None = None
    # A poll a few seconds before this one (diagnosis.window.Recent over those seconds), for a count the broker
    # updates later than the rest (a queue's persistent count); None: the previous poll and the window's start say.
    earlier: Snapshot | None = None
    # What `ackscope bench confirms` measured on this broker, where it was given: remedies quote it.
    confirm_bench: ConfirmBench | None = None
    # What the applications' spans told (ackscope.sources.traces), placed by this snapshot, and as it stood at the
    # window's start; None where no spans are received.
    traces: TraceWindow | None = None
    traces_start: TraceWindow | None = None

    def __post_init__(self):
        s = self.snapshot
        object.__setattr__(self, "_queues", {(q.vhost, q.name): q for q in s.queues})
        object.__setattr__(self, "_channels", {c.name: c for c in s.channels})
        by_queue: dict[tuple[str, str], list[Consumer]] = {}
        for c in s.consumers:
            by_queue.setdefault((c.vhost, c.queue), []).append(c)
        object.__setattr__(self, "_consumers", by_queue)
        by_channel: dict[str, list[Consumer]] = {}
        for c in s.consumers:
            by_channel.setdefault(c.channel, []).append(c)
        object.__setattr__(self, "_consumers_on", by_channel)
        by_connection: dict[str, list[Channel]] = {}
        for ch in s.channels:
            by_connection.setdefault(ch.connection, []).append(ch)
        object.__setattr__(self, "_channels_of", by_connection)
        prev = self.previous
        object.__setattr__(self, "_prev_channels", {c.name: c for c in prev.channels} if prev else {})
        before: dict[tuple[str, str], list[Consumer]] = {}
        for c in prev.consumers if prev else ():
            before.setdefault((c.vhost, c.queue), []).append(c)
        object.__setattr__(self, "_prev_consumers", before)
        start = self.window or prev
        object.__setattr__(self, "_start", start)
        object.__setattr__(self, "_start_queues", {(q.vhost, q.name): q for q in start.queues} if start else {})
        object.__setattr__(self, "_start_channels", {c.name: c for c in start.channels} if start else {})
        object.__setattr__(self, "_start_exchanges", {(x.vhost, x.name): x for x in start.exchanges} if start else {})
        object.__setattr__(self, "_start_links", {k.key: k for k in start.links} if start else {})
        object.__setattr__(self, "_memo", {})

    def once(self, key, compute: Callable[[], object]):
        """What compute() gives, computed once for this context: several rules judge the same channel, vhost or
        client, and a judgement that scans the queues must not be paid per channel."""
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]

    def queue(self, vhost: str, name: str) -> Queue | None:
        return self._queues.get((vhost, name))

    def channel(self, name: str) -> Channel | None:
        return self._channels.get(name)

    def oldest_message(self, q: Queue) -> OldestMessage | None:
        """How long the queue's oldest message has waited, where it is known (diagnosis.waiting)."""
        if self.oldest is not None:
            return self.oldest.get((q.vhost, q.name))
        return stamped(q, self.snapshot.taken_at)

    def consumers_of(self, q: Queue) -> list[Consumer]:
        return self._consumers.get((q.vhost, q.name), [])

    def consumers_on(self, channel: str) -> list[Consumer]:
        return self._consumers_on.get(channel, [])

    def known_consumers_of(self, q: Queue) -> list[Consumer]:
        """The queue's consumers, to name them: this poll's, or the previous poll's where this one lists
        none while the queue counts some (the consumer list failed or lagged this time)."""
        mine = self.consumers_of(q)
        return mine if mine or not num(q.consumers) else self._prev_consumers.get((q.vhost, q.name), [])

    def channels_of(self, connection: str) -> list[Channel]:
        return self._channels_of.get(connection, [])

    def previous_channel(self, name: str) -> Channel | None:
        return self._prev_channels.get(name)

    def previous_queue(self, q: Queue) -> Queue | None:
        """The queue as the poll before saw it; None on the first poll or where it did not exist then."""
        # Built on first use: most polls have no rule that asks.
        before = self.once("previous-queues", lambda: {(p.vhost, p.name): p for p in self.previous.queues}
                           if self.previous else {})
        return before.get((q.vhost, q.name))

    def channel_at_window_start(self, name: str) -> Channel | None:
        return self._start_channels.get(name)

    @property
    def release(self) -> tuple[int, int] | None:
        """The broker's (major, minor), for what differs by release; None where it did not say."""
        return self.snapshot.overview.release

    def dead_lettered_over_window(self) -> dict[tuple[str, str, str], dict[str, int]] | None:
        """What the nodes' dead-letter counters grew by over the window: {(reason, queue type, strategy): {node:
        count}}, counts above 0 only; None where the window's start or end lacks the counters. A counter lower
        than at the start was reset (its node restarted): all of it is new."""
        start = self._start
        if start is None or DEAD_LETTER_COUNTS in self.snapshot.unreported or DEAD_LETTER_COUNTS in start.unreported:
            return None
        before = {(d.node, d.reason, d.queue_type, d.strategy): d.count for d in start.dead_lettered}
        grown: dict[tuple[str, str, str], dict[str, int]] = {}
        for d in self.snapshot.dead_lettered:
            then = before.get((d.node, d.reason, d.queue_type, d.strategy), 0)
            change = d.count - then if d.count >= then else d.count
            if change > 0:
                grown.setdefault((d.reason, d.queue_type, d.strategy), {})[d.node] = change
        return grown

    def deliveries_over_window(self, protocol: str) -> dict[str, tuple[int, int]] | None:
        """Deliveries and redeliveries to `protocol`'s consumers over the window, by queue type, summed over the
        nodes (a node that restarted counts from zero); None without the nodes' counters or on the first poll."""
        start = self._start
        if DEAD_LETTER_COUNTS in self.snapshot.unreported or start is None or self.window_seconds is None:
            return None
        before = {(c.node, c.queue_type): c for c in start.protocol_counts if c.protocol == protocol}
        grown: dict[str, tuple[int, int]] = {}
        for c in self.snapshot.protocol_counts:
            if c.protocol != protocol:
                continue
            then = before.get((c.node, c.queue_type))
            if then is None:  # not counted at the window's start: what it counted before is not the window's
                continue
            restarted = c.delivered < then.delivered or c.redelivered < then.redelivered
            delivered = c.delivered - (0 if restarted else then.delivered)
            redelivered = c.redelivered - (0 if restarted else then.redelivered)
            was = grown.get(c.queue_type, (0, 0))
            grown[c.queue_type] = (was[0] + delivered, was[1] + redelivered)
        return grown

    def removed_without_ack(self, q: Queue) -> int | None:
        """Messages that left the queue over the window neither acked nor delivered with automatic ack: what
        was published into it, less the acks, the auto-ack deliveries and gets, and what its depth grew. They
        were dead-lettered, dropped, expired or purged: an inference from the queue's counters, which the
        broker keeps for none of those. None where a counter is not reported."""
        published, acked = self.over_window(q, "publish"), self.over_window(q, "ack")
        # A stream removes only by retention, and its consumers' acks grant credit: nothing to infer.
        if published is None or q.messages_ready is None or q.stream:
            return None
        # The management API leaves out a counter never counted: a queue nobody acked from has no `ack`.
        acked = acked or 0
        auto = num(self.over_window(q, "deliver_no_ack")) + num(self.over_window(q, "get_no_ack"))
        start = self.at_window_start(q)
        depth = num(q.messages_ready) + num(q.messages_unacked)
        then = num(start.messages_ready) + num(start.messages_unacked) if start is not None else 0
        return max(0, published - acked - auto - (depth - then))

    # -- the recent window ---------------------------------------------------------------------------------
    @property
    def window_seconds(self) -> float | None:
        """How long the window is: from its first snapshot to this one; None on the first poll."""
        if self._start is None or self.snapshot.taken_at <= self._start.taken_at:
            return None
        return self.snapshot.taken_at - self._start.taken_at

    def at_window_start(self, record: Channel | Queue | Exchange) -> Channel | Queue | Exchange | None:
        if isinstance(record, Queue):
            return self._start_queues.get((record.vhost, record.name))
        if isinstance(record, Exchange):
            return self._start_exchanges.get((record.vhost, record.name))
        return self._start_channels.get(record.name)

    @property
    def window_start(self) -> Snapshot | None:
        """The snapshot the window starts at; None on the first poll."""
        return self._start

    def link_at_window_start(self, link: Link) -> Link | None:
        return self._start_links.get(link.key)

    def link_transfers(self, link: Link) -> int | None:
        """Transfers on an AMQP 1.0 link over the window (its delivery-count's growth, since the window's start or
        the link's attach within it); None on the first poll or where the broker did not say."""
        if link.delivery_count is None or self.window_seconds is None:
            return None
        then = self.link_at_window_start(link)
        # delivery-count is a sequence number: it wraps at 2**32.
        return (link.delivery_count - num(then.delivery_count if then is not None else 0)) % 2**32

    def over_window(self, record: Channel | Queue | Exchange, stat: str) -> int | None:
        """How much one of a channel's or queue's counters grew over the window: since the window's first
        snapshot, or since the object appeared within it. None on the first poll, where it is unreported, or where
        it went back (the queue deleted and declared again, its node restarted): how much it grew before is lost,
        and neither 0 nor what it counts now is the window's growth."""
        now = getattr(record.message_stats, stat)
        if now is None or self.window_seconds is None:
            return None
        then = self.at_window_start(record)
        grown = now - num(getattr(then.message_stats, stat) if then is not None else 0)
        return grown if grown >= 0 else None

    def window_rate(self, record: Channel | Queue | Exchange, stat: str) -> float | None:
        """Per second over the window (see over_window)."""
        change = self.over_window(record, stat)
        return None if change is None else change / self.window_seconds


@dataclass(frozen=True)
class Rule:
    id: str
    meaning: str
    remedy: str
    check: Callable[[Context, Rule], Iterable[Finding]]
    needs: tuple[str, ...] = ()  # facts a source may not report (ackscope.model.snapshot's constants)
    # Why the rule cannot apply to the broker's release, or None where it does (classic queue mirroring is
    # removed in RabbitMQ 4.0): it stays silent there and says so.
    inapplicable: Callable[[tuple[int, int] | None], str | None] = lambda release: None

    def finding(self, severity: str, vhost: str, obj: str, who: Connection | Channel | Consumer | Named | None,
                evidence: dict, explanation: str, remedy: str | None = None) -> Finding:
        """`who` is the record whose client is the culprit, a queue's consumers (Named), or None (a node).
        `remedy`: what to do in this case, where it differs from the rule's (by release, by queue type)."""
        if who is None:
            who = Named()
        return Finding(self.id, severity, vhost, obj, who.connection_name, evidence, explanation,
                       remedy or self.remedy, client=who.client or "",
                       identity=who.identity or who.connection_name)


def num(v) -> int:
    """A count the source may not have reported, as a number: None counts as 0."""
    return v or 0


MAX_NAMED = 3  # consumers a queue finding names before it counts the rest


@dataclass(frozen=True)
class Named:
    """A queue finding's culprit: its consumers, as a finding names a client (see Finding), each part the
    first few of its kind and a count of the rest; "" where there is none (nobody consumes, nobody named)."""
    connection_name: str = ""
    client: str = ""
    identity: str = ""


def few(items: Iterable[str]) -> str:
    """The first few of some names, sorted, and a count of the rest."""
    names = sorted(set(items))
    if len(names) <= MAX_NAMED:
        return ", ".join(names)
    return f"{', '.join(names[:MAX_NAMED])} and {len(names) - MAX_NAMED} more"


def consumers_named(ctx: Context, q: Queue) -> Named:
    """Who consumes from a queue: the names their connections were given, their clients, their identities."""
    return named(ctx.known_consumers_of(q))


def named(consumers: Iterable[Consumer]) -> Named:
    """Some consumers as a finding's culprit: the names their connections were given, their clients, their
    identities."""
    consumers = list(consumers)
    return Named(few({c.connection_name for c in consumers if c.connection_name}),
                 few({c.client for c in consumers if c.client}),
                 few({c.identity or c.connection_name or f"channel {c.channel}" for c in consumers}))


def named_channels(channels: Iterable[Channel]) -> Named:
    """Some channels (publishers) as a finding's culprit, as `named` names consumers."""
    channels = list(channels)
    return Named(few({c.connection_name for c in channels if c.connection_name}),
                 few({c.client for c in channels if c.client}),
                 few({c.identity or c.connection_name or f"channel {c.name}" for c in channels}))


def last_seen(ctx: Context, record: Channel | Queue, stat: str) -> str:
    """When a counter judged over the window last grew, as far as the polls tell, for a finding that holds for the
    window after its cause stopped: at this poll (since the one before), or before it."""
    if ctx.previous is None:
        return "at this poll"
    then = ctx.previous_queue(record) if isinstance(record, Queue) else ctx.previous_channel(record.name)
    poll = ctx.snapshot.taken_at - ctx.previous.taken_at
    now = num(getattr(record.message_stats, stat))
    if then is None or now > num(getattr(then.message_stats, stat)):
        return f"at this poll (within the last {poll:.0f}s)"
    return f"before the last poll (more than {poll:.0f}s ago)"


def rounded(v: float | None) -> float | None:
    """A rate or duration for evidence: three decimals."""
    return None if v is None else round(v, 3)
