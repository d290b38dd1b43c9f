"""Keep series per object up to a limit; fold the rest into per-vhost totals, never all-or-nothing.

The largest objects keep their own series (queues by messages held, channels by unacked plus unconfirmed,
then by traffic), ties broken by name so the choice is stable between polls while sizes are.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, fields

from ackscope.model.snapshot import Channel, Consumer, MessageStats, Queue, Snapshot

FOLDED = "(folded)"  # label value standing for every folded object of a vhost


@dataclass(frozen=True)
class Limits:
    max_queues: int = 20_000
    max_channels: int = 10_000


@dataclass(frozen=True)
class Folded:
    """A vhost's folded objects of one kind, summed."""

    vhost: str
    count: int
    messages_ready: int = 0
    messages_unacked: int = 0
    messages_persistent: int = 0
    messages_unconfirmed: int = 0
    consumers: int = 0
    message_stats: MessageStats = MessageStats()


@dataclass(frozen=True)
class Shaped:
    """What the exposition shows: kept objects with their own series, folded totals per vhost."""

    queues: tuple[Queue, ...]
    channels: tuple[Channel, ...]
    consumers: tuple[Consumer, ...]
    folded_queues: tuple[Folded, ...]
    folded_channels: tuple[Folded, ...]
    folded_consumers: tuple[Folded, ...]


def _queue_size(q: Queue) -> tuple:
    return (-((q.messages_ready or 0) + (q.messages_unacked or 0)), q.vhost, q.name)


def _channel_size(c: Channel) -> tuple:
    s = c.message_stats
    traffic = (s.publish or 0) + (s.deliver_get or 0)
    return (-((c.messages_unacked or 0) + (c.messages_unconfirmed or 0)), -traffic, c.vhost, c.name)


def _sum_stats(stats: list[MessageStats]) -> MessageStats:
    return MessageStats(**{f.name: sum(getattr(s, f.name) or 0 for s in stats) for f in fields(MessageStats)})


def shape(snapshot: Snapshot, limits: Limits) -> Shaped:
    """Split the snapshot's queues, channels and consumers into kept and folded-per-vhost."""
    queues = sorted(snapshot.queues, key=_queue_size)
    channels = sorted(snapshot.channels, key=_channel_size)
    kept_q, rest_q = queues[:limits.max_queues], queues[limits.max_queues:]
    kept_c, rest_c = channels[:limits.max_channels], channels[limits.max_channels:]
    # A consumer keeps its series exactly when its channel does.
    folded_names = {c.name for c in rest_c}
    kept_consumers = [c for c in snapshot.consumers if c.channel not in folded_names]
    rest_consumers = [c for c in snapshot.consumers if c.channel in folded_names]
    return Shaped(
        queues=tuple(kept_q), channels=tuple(kept_c), consumers=tuple(kept_consumers),
        folded_queues=tuple(_fold_queues(rest_q)), folded_channels=tuple(_fold_channels(rest_c)),
        folded_consumers=tuple(Folded(vhost, len(group)) for vhost, group in _by_vhost(rest_consumers).items()),
    )


def _by_vhost(objects) -> dict[str, list]:
    groups: dict[str, list] = defaultdict(list)
    for o in objects:
        groups[o.vhost].append(o)
    return dict(sorted(groups.items()))


def _fold_queues(queues: list[Queue]) -> list[Folded]:
    return [Folded(vhost, len(group),
                   messages_ready=sum(q.messages_ready or 0 for q in group),
                   messages_unacked=sum(q.messages_unacked or 0 for q in group),
                   messages_persistent=sum(q.messages_persistent or 0 for q in group),
                   consumers=sum(q.consumers or 0 for q in group),
                   message_stats=_sum_stats([q.message_stats for q in group]))
            for vhost, group in _by_vhost(queues).items()]


def _fold_channels(channels: list[Channel]) -> list[Folded]:
    return [Folded(vhost, len(group),
                   messages_unacked=sum(c.messages_unacked or 0 for c in group),
                   messages_unconfirmed=sum(c.messages_unconfirmed or 0 for c in group),
                   message_stats=_sum_stats([c.message_stats for c in group]))
            for vhost, group in _by_vhost(channels).items()]
