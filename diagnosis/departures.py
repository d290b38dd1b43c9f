"""Channels and queues that went over the window, each as the last poll that listed it saw it: memory beside the pure
rules, like ChannelTurnover.

What went is judged for the window it went in, not only at the first poll that no longer lists it:
- a critical finding said at one poll only is gone before an alert's `for:` has passed;
- how a channel ended may be told later than the polls see it go. The broker drops a killed client's channel from its
  statistics about when it logs the connection's close, and a poll between the two reads the one without the other
  (measured on 4.3.6 under a clean-clone run's load). A later poll within the window judges it with what the log said.

A channel or queue gone at one poll and listed again at a later one was left out of a list once (a paged list, a
node's plugin that missed a poll): it never went. The broker keeps a queue's counters under its name across a deletion
(measured: diagnosis.deleted_queues), so a queue deleted and declared again reads the same, and is taken back too,
unless its listing tells (an auto-delete queue that lost its last consumer: declared_again).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from ackscope.model.snapshot import CHANNELS, QUEUE_COUNTS, Channel, Consumer, Queue, Snapshot


@dataclass(frozen=True, slots=True)
class DepartedChannel:
    """A channel listed at one poll and not at a later one."""

    record: Channel  # as the last poll that listed it saw it
    auto_ack_queues: tuple[str, ...]  # the queues it consumed from with automatic acknowledgement then, sorted
    last_seen: float  # taken_at of that poll
    noticed: float  # taken_at of the first poll that did not list it
    # Deliveries without ack it received over the window up to its last poll: since the window's start, or since it
    # opened within it; None where that poll was the window's start (how much came lately is not known).
    received_lately: int | None


@dataclass(frozen=True, slots=True)
class DepartedQueue:
    """A queue that held messages at one poll and, at the next, was gone, or was declared again (auto-delete, deleted
    as its last consumer went: it counts no consumer now, or no statistics yet) holding fewer."""

    record: Queue  # as the last poll before saw it
    # Its consumers at that poll, or, where that poll listed none while the poll before it did (a consumer that lived
    # a few seconds: a 4.3 node under load listed none on the last poll), at that earlier poll.
    consumers: tuple[Consumer, ...]
    consumers_at: float  # taken_at of the poll they are from
    last_seen: float
    noticed: float
    again: Queue | None  # as declared again at the poll that noticed; None: gone
    with_vhost: bool  # its vhost was gone too


@dataclass(frozen=True)
class Departed:
    """What the rules read: channel name -> DepartedChannel, (vhost, queue) -> DepartedQueue."""

    channels: Mapping[str, DepartedChannel] = field(default_factory=lambda: MappingProxyType({}))
    queues: Mapping[tuple[str, str], DepartedQueue] = field(default_factory=lambda: MappingProxyType({}))


def held_messages(q: Queue) -> int:
    """Ready and unacked: what a queue holds that goes with it."""
    return (q.messages_ready or 0) + (q.messages_unacked or 0)


def declared_again(before: Queue, now: Queue) -> bool:
    """Whether an auto-delete queue that had a consumer at the last poll was deleted since, when its last consumer
    went, and declared again holding fewer: it counts no consumer now, or is listed without statistics (a new
    queue's, until its first emission)."""
    if not before.auto_delete or not before.consumers or held_messages(now) >= held_messages(before):
        return False
    return now.consumers == 0 or now.consumers is None and now.messages_ready is None


def channels_departed(before: Snapshot | None, now: Snapshot, start: Snapshot | None) -> dict[str, DepartedChannel]:
    """Channel name -> the channels `before` listed and `now` does not, that the broker had delivered to without ack
    (what is judged of a channel gone: what it may have had in hand), over the window that starts at `start` (the
    channel as the window's start saw it). Nothing where either poll did not read the channels (its list is empty, not
    closed). Only those: a fleet of clients restarting takes thousands of channels with it."""
    if before is None or CHANNELS in before.unreported or CHANNELS in now.unreported:
        return {}
    listed = {c.name for c in now.channels}
    auto_ack: dict[str, list[str]] = {}
    for c in before.consumers:
        if c.ack_required is False:
            auto_ack.setdefault(c.channel, []).append(c.queue)
    then = {c.name: c for c in start.channels} if start is not None and before is not start else {}
    gone = {}
    for ch in before.channels:
        if ch.name in listed or not ch.message_stats.deliver_no_ack:
            continue
        received = None
        if before is not start:
            at_start = then.get(ch.name)
            was = at_start.message_stats.deliver_no_ack or 0 if at_start is not None else 0
            received = max(0, (ch.message_stats.deliver_no_ack or 0) - was)
        gone[ch.name] = DepartedChannel(ch, tuple(sorted(auto_ack.get(ch.name, ()))), before.taken_at, now.taken_at,
                                        received)
    return gone


def queues_departed(before: Snapshot | None, now: Snapshot,
                    earlier: Snapshot | None) -> dict[tuple[str, str], DepartedQueue]:
    """(vhost, queue) -> the queues that held messages at `before` and are gone at `now`, or declared again; their
    consumers from `before`, or from `earlier` (a poll before it) where `before` listed none. A queue not listed while
    its node is down is out of reach, not gone (node-down says so); a stream keeps what it holds by retention."""
    if before is None or QUEUE_COUNTS in before.unreported:
        return {}
    down = {n.name for n in now.nodes if n.running is False}
    vhosts = set(now.vhosts)
    listed = {(q.vhost, q.name): q for q in now.queues}
    gone = {}
    for q in before.queues:
        key = (q.vhost, q.name)
        if not held_messages(q) or q.stream or q.messages_ready is None:
            continue
        again = listed.get(key)
        if again is None and q.node in down or again is not None and not declared_again(q, again):
            continue
        consumers, at = tuple(c for c in before.consumers if (c.vhost, c.queue) == key), before.taken_at
        if not consumers and earlier is not None:
            consumers = tuple(c for c in earlier.consumers if (c.vhost, c.queue) == key)
            at = earlier.taken_at if consumers else at
        gone[key] = DepartedQueue(q, consumers, at, before.taken_at, now.taken_at, again,
                                  again is None and bool(vhosts) and q.vhost not in vhosts)
    return gone


class Departures:
    """The channels (delivered to without ack) and queues (holding messages) that went over the last
    `window_seconds`, from poll to poll. A poll that did not read the channels (the queues' counts), or that is not
    newer than the last one, is passed over for them."""

    def __init__(self, window_seconds: float) -> None:
        self.window_seconds = window_seconds
        self._polls: dict[str, Snapshot] = {}  # the last poll that read the channels, the queues' counts
        self._earlier: Snapshot | None = None  # the poll before the last that read the queues' counts
        self._channels: dict[str, DepartedChannel] = {}
        self._queues: dict[tuple[str, str], DepartedQueue] = {}

    def update(self, s: Snapshot, start: Snapshot | None) -> Departed:
        """What went over the window up to `s`; `start` is the window's first snapshot as this poll's diagnosis takes
        it."""
        since = s.taken_at - self.window_seconds
        if self._newer(s, CHANNELS):
            listed = {c.name for c in s.channels}
            kept = {n: d for n, d in self._channels.items() if n not in listed and d.noticed >= since}
            for name, d in channels_departed(self._polls.get(CHANNELS), s, start).items():
                kept.setdefault(name, d)
            self._channels = kept
            self._polls[CHANNELS] = s
        if self._newer(s, QUEUE_COUNTS):
            listed = {(q.vhost, q.name): q for q in s.queues}
            kept = {}
            for key, d in self._queues.items():
                back = listed.get(key) if d.again is None else None
                if d.noticed >= since and (back is None or declared_again(d.record, back)):
                    kept[key] = d if back is None else replace(d, again=back)
            before = self._polls.get(QUEUE_COUNTS)
            for key, d in queues_departed(before, s, self._earlier).items():
                kept.setdefault(key, d)
            self._queues = kept
            self._earlier, self._polls[QUEUE_COUNTS] = before, s
        # Each update builds new dicts: the views handed out never change under a rule.
        return Departed(MappingProxyType(self._channels), MappingProxyType(self._queues))

    def _newer(self, s: Snapshot, fact: str) -> bool:
        last = self._polls.get(fact)
        return fact not in s.unreported and (last is None or s.taken_at > last.taken_at)
