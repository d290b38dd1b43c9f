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
from dataclasses import dataclass, replace
from types import MappingProxyType

from ackscope.model.probes import NAMESPACE, is_probe_connection
from ackscope.model.snapshot import CHANNELS, QUEUE_COUNTS, Channel, Consumer, Queue, Snapshot


@dataclass(frozen=True, slots=True)
class DepartedChannel:
    """A channel the broker had delivered to without ack, listed at one poll and not at the next."""

    record: Channel  # as the last poll that listed it saw it
    auto_ack_queues: tuple[str, ...]  # the queues it consumed from with automatic acknowledgement then, sorted
    last_seen: float  # taken_at of that poll
    noticed: float  # taken_at of the first poll that did not list it
    # Deliveries without ack it received from the window's start (or its opening within it) to its last poll, as
    # that poll's window; None where that poll was the window's start, or the start did not read the channels (how
    # much came lately is not known).
    received_lately: int | None


@dataclass(frozen=True, slots=True)
class DepartedQueue:
    """A queue that held messages at one poll and, at the next, was gone, or was declared again (auto-delete, deleted
    as its last consumer went: it counts no consumer now, or no statistics yet) holding fewer."""

    record: Queue  # as the last poll that listed it (before its deletion) saw it
    # Its consumers at that poll, or, where that poll listed none, at the poll before it (a consumer that lived a few
    # seconds: a 4.3 node under load listed none on the last poll).
    consumers: tuple[Consumer, ...]
    consumers_at: float  # taken_at of the poll they are from
    last_seen: float
    noticed: float
    again: Queue | None  # as declared again; None: gone
    with_vhost: bool  # its vhost was gone too


@dataclass(frozen=True)
class Departed:
    """What the rules read: channel name -> DepartedChannel, (vhost, queue) -> DepartedQueue."""

    channels: Mapping[str, DepartedChannel]
    queues: Mapping[tuple[str, str], DepartedQueue]


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


def _delivered_without_ack(ch: Channel) -> int:
    return ch.message_stats.deliver_no_ack or 0


def channels_departed(before: Snapshot | None, now: Snapshot, start: Snapshot | None) -> dict[str, DepartedChannel]:
    """Channel name -> the channels `before` listed and `now` does not that may have had something in hand: consumers
    with automatic acknowledgement then, or deliveries without ack over the window that starts at `start` (the
    channel as the window's start saw it). Only those: a fleet of clients restarting takes thousands of channels
    with it. Nothing where either poll did not read the channels (its list is empty, not closed). The probes' own
    channels and queues are left to the probe rules, here and in queues_departed."""
    if before is None or CHANNELS in before.unreported or CHANNELS in now.unreported:
        return {}
    listed = {c.name for c in now.channels}
    went = [ch for ch in before.channels if _delivered_without_ack(ch) and ch.name not in listed
            and not is_probe_connection(ch.connection_name)]
    if not went:
        return {}
    auto_ack: dict[str, list[str]] = {}
    for c in before.consumers:
        if c.ack_required is False:
            auto_ack.setdefault(c.channel, []).append(c.queue)
    known = start is not None and before is not start and CHANNELS not in start.unreported
    then = {c.name: c for c in start.channels} if known else {}
    gone = {}
    for ch in went:
        received = None
        if known:
            at_start = then.get(ch.name)
            received = max(0, _delivered_without_ack(ch) - (_delivered_without_ack(at_start) if at_start else 0))
        queues = tuple(sorted(auto_ack.get(ch.name, ())))
        if queues or received:
            gone[ch.name] = DepartedChannel(ch, queues, before.taken_at, now.taken_at, received)
    return gone


def queues_departed(before: Snapshot | None, now: Snapshot,
                    earlier: Snapshot | None) -> dict[tuple[str, str], DepartedQueue]:
    """(vhost, queue) -> the queues that held messages at `before` and are gone at `now`, or declared again; their
    consumers from `before`, or from `earlier` (a poll before it) where `before` listed none. A queue on a node down
    is out of reach, not gone (node-down says so), and where `now` failed to read the node list `before` read, none
    is judged gone; a stream keeps what it holds by retention."""
    if before is None or QUEUE_COUNTS in before.unreported or before.nodes and not now.nodes:
        return {}
    down = {n.name for n in now.nodes if n.running is False}
    vhosts = set(now.vhosts)
    listed = {(q.vhost, q.name): q for q in now.queues}
    gone = {}
    for q in before.queues:
        key = (q.vhost, q.name)
        if not held_messages(q) or q.stream or q.messages_ready is None or q.node in down or q.name.startswith(
                NAMESPACE):
            continue
        again = listed.get(key)
        if again is None or declared_again(q, again):
            gone[key] = (q, again)
    if not gone:
        return {}
    consumers = _consumers_by_queue(before)
    before_that = _consumers_by_queue(earlier) if earlier is not None else {}
    found = {}
    for key, (q, again) in gone.items():
        mine, at = consumers.get(key, ()), before.taken_at
        if not mine and key in before_that:
            mine, at = before_that[key], earlier.taken_at
        found[key] = DepartedQueue(q, tuple(mine), at, before.taken_at, now.taken_at, again,
                                   again is None and bool(vhosts) and q.vhost not in vhosts)
    return found


def _consumers_by_queue(s: Snapshot) -> dict[tuple[str, str], list[Consumer]]:
    by_queue: dict[tuple[str, str], list[Consumer]] = {}
    for c in s.consumers:
        by_queue.setdefault((c.vhost, c.queue), []).append(c)
    return by_queue


class Departures:
    """The channels (that may have had deliveries in hand) and queues (holding messages) that went over the last
    `window_seconds`, from poll to poll. Two polls are compared only where both read the list and no poll between
    them failed to: one that did not read it (the channels, the queues' counts) leaves nothing to compare the next
    one with, as `ackscope diagnose`'s two samples would not be."""

    def __init__(self, window_seconds: float) -> None:
        self.window_seconds = window_seconds
        self._channels_read: Snapshot | None = None  # the last poll, where it read the channels
        self._queues_read: Snapshot | None = None  # the last poll, where it read the queues' counts
        self._queues_read_before: Snapshot | None = None  # and the one before it, where it did too
        self._channels: dict[str, DepartedChannel] = {}
        self._queues: dict[tuple[str, str], DepartedQueue] = {}

    def update(self, s: Snapshot, start: Snapshot | None) -> Departed:
        """What went over the window up to `s`; `start` is the window's first snapshot as this poll's diagnosis takes
        it. A poll not newer than the last one changes nothing."""
        last = max((p.taken_at for p in (self._channels_read, self._queues_read) if p is not None), default=None)
        if last is None or s.taken_at > last:
            since = s.taken_at - self.window_seconds
            self._update_channels(s, start, since)
            self._update_queues(s, since)
        # Each update builds new dicts: the views handed out never change under a rule.
        return Departed(MappingProxyType(self._channels), MappingProxyType(self._queues))

    def _update_channels(self, s: Snapshot, start: Snapshot | None, since: float) -> None:
        if CHANNELS in s.unreported:
            self._channels_read = None
            return
        kept = {}
        if self._channels:
            listed = {c.name: c for c in s.channels}
            for name, d in self._channels.items():
                back = listed.get(name)
                # Listed again with its counters as high: left out of a list once. Lower: a new channel under the
                # number (a client reopens the number an error closed).
                if d.noticed >= since and (back is None or _delivered_without_ack(back) < _delivered_without_ack(
                        d.record)):
                    kept[name] = d
        for name, d in channels_departed(self._channels_read, s, start).items():
            kept.setdefault(name, d)
        self._channels, self._channels_read = kept, s

    def _update_queues(self, s: Snapshot, since: float) -> None:
        if QUEUE_COUNTS in s.unreported:
            self._queues_read = self._queues_read_before = None
            return
        kept = {}
        if self._queues:
            listed = {(q.vhost, q.name): q for q in s.queues}
            down = {n.name for n in s.nodes if n.running is False}
            for key, d in self._queues.items():
                back = listed.get(key) if d.again is None else None
                if d.noticed >= since and d.record.node not in down and (
                        back is None or declared_again(d.record, back)):
                    kept[key] = d if back is None else replace(d, again=back)
        for key, d in queues_departed(self._queues_read, s, self._queues_read_before).items():
            kept.setdefault(key, d)
        self._queues, self._queues_read, self._queues_read_before = kept, s, self._queues_read
