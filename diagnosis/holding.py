"""Since when each channel has held deliveries without settling any, and which consumers went away from a
channel that stays open while holding: memory beside the pure rules, like Onset and Recent.

A consumer that stalls (its callback hangs, a lock, a deadlock) holds its deliveries and acks none: its
channel's unacked count stays above 0 and its ack counter stays flat. How long that has lasted is what the
consumer timeout is measured against. On RabbitMQ 4.3 the broker cancels such a quorum queue consumer at the
timeout without a word in its log: its channel stays, its consumer is gone, its messages go back to ready. An AMQP
1.0 receiver so dropped keeps its link and its unsettled deliveries while its queue counts no consumer; one poll
cannot tell that from a queue whose statistics lag its new link by a few seconds (measured on 4.3.6: a quorum
queue listed 0 consumers and 0 messages for 4 s while its receiver's link held 300), so how long it has lasted is
kept too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from ackscope.model.snapshot import Channel, Link, Queue, Snapshot

LinkKey = tuple[str, int, int]  # (connection, session, handle): one link of one AMQP 1.0 connection


@dataclass(frozen=True)
class Gone:
    """A consumer last seen holding deliveries, on a channel that is still open without it."""

    vhost: str
    queue: str
    consumer_tag: str
    channel: str
    unacked: int  # what its channel held when it was last seen
    last_seen: float  # the poll it was last seen at
    held_since: float  # since when its channel had held deliveries without settling any, then


@dataclass(frozen=True)
class Held:
    """What the rules read: per channel name, since when it has held deliveries without settling one (the first
    poll that saw it so, a lower bound); the consumers gone from channels still open, keyed (channel, queue); per
    receiver link, since when it has held unsettled deliveries while its quorum queue counted no consumer."""

    since: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    gone: Mapping[tuple[str, str], Gone] = field(default_factory=lambda: MappingProxyType({}))
    stranded: Mapping[LinkKey, float] = field(default_factory=lambda: MappingProxyType({}))


def link_key(link: Link) -> LinkKey:
    return link.connection, link.session, link.handle


def stranded(link: Link, q: Queue | None) -> int:
    """The deliveries a receiver link holds unsettled while its quorum queue counts no consumer (0 otherwise):
    what RabbitMQ 4.3 leaves behind when it drops an AMQP 1.0 receiver at the queue's consumer timeout."""
    held = link.unsettled  # the session's count, where the session has no other receiver: never another's
    if link.role != "receiver" or link.settled is not False or q is None or q.type != "quorum" or q.consumers != 0:
        return 0
    return held or 0


def _settles(ch: Channel) -> tuple[int | None, int | None]:
    """What moves when a channel settles or takes a delivery: its acks and its deliveries."""
    return ch.message_stats.ack, ch.message_stats.deliver_get


class Holding:
    def __init__(self) -> None:
        self._since: dict[str, tuple[float, tuple[int | None, int | None]]] = {}
        self._gone: dict[tuple[str, str], Gone] = {}
        self._stranded: dict[LinkKey, float] = {}
        self._previous: Snapshot | None = None

    def update(self, s: Snapshot) -> Held:
        channels = {c.name: c for c in s.channels}
        since = {}
        for name, ch in channels.items():
            # Where the counters are not reported (statistics off without the plugin's per-channel counters),
            # nothing says the channel settles nothing: it is not judged.
            if not ch.messages_unacked or ch.message_stats.ack is None and ch.message_stats.deliver_get is None:
                continue
            was = self._since.get(name)
            since[name] = was if was is not None and was[1] == _settles(ch) else (s.taken_at, _settles(ch))
        queues = {(q.vhost, q.name): q for q in s.queues}
        self._gone = self._still_gone(s, channels, queues)
        self._stranded = {key: self._stranded.get(key, s.taken_at) for key, link in
                          ((link_key(link), link) for link in s.links)
                          if stranded(link, queues.get((link.vhost, link.queue or "")))}
        self._since = since
        self._previous = s
        return Held(MappingProxyType({k: v[0] for k, v in since.items()}), MappingProxyType(dict(self._gone)),
                    MappingProxyType(dict(self._stranded)))

    def _still_gone(self, s: Snapshot, channels: dict[str, Channel],
                    queues: dict[tuple[str, str], Queue]) -> dict[tuple[str, str], Gone]:
        consuming = {(c.channel, c.queue) for c in s.consumers
                     if not _dropped(queues.get((c.vhost, c.queue)), channels.get(c.channel))}
        gone = {k: g for k, g in self._gone.items() if g.channel in channels and k not in consuming}
        before: dict[str, Channel] | None = None  # the last poll's channels, by name: built only when one is gone
        # Last poll's consumers that are gone, and this poll's that their queue no longer counts.
        for c in (*(self._previous.consumers if self._previous is not None else ()), *s.consumers):
            key = (c.channel, c.queue)
            held = self._since.get(c.channel)
            if key in consuming or key in gone or c.channel not in channels or held is None or not c.ack_required:
                continue
            if before is None:
                before = {ch.name: ch for ch in self._previous.channels} if self._previous is not None else {}
            was = before.get(c.channel) or channels[c.channel]
            gone[key] = Gone(c.vhost, c.queue, c.consumer_tag, c.channel, was.messages_unacked or 0,
                             self._previous.taken_at if self._previous is not None else s.taken_at, held[0])
        return gone


def _dropped(q: Queue | None, ch: Channel | None) -> bool:
    """A quorum queue that counts no consumer while a consumer listed on it holds deliveries the queue no longer
    counts as unacked: a consumer the queue dropped. RabbitMQ 4.3.6 times out a Java client's consumer so: its queue
    counts 0 consumers and takes the deliveries that timed out back as ready, while /api/consumers still lists it and
    its channel still claims them all (measured). Each delivery times out on its own (rabbit_fifo): deliveries that
    came later may stay unacked on the queue (measured: 7 ready and 3 unacked of the 10, with 5 on the channel).
    Where the queue counts fewer messages than the channel holds, its figures are older than the channel's (a new
    quorum queue lists 0 of everything for its first seconds): nothing is judged from them."""
    if q is None or q.type != "quorum" or q.consumers != 0:
        return False
    unacked = q.messages_unacked or 0
    if ch is None:
        return not unacked
    held = ch.messages_unacked or 0
    return unacked < held and (q.messages_ready or 0) + unacked >= held
