"""Which queues a channel's publishes reached, where the management API lists the channels and each node's
Prometheus plugin counts publishes per channel and queue (channel_queue_exchange_metrics): read only for the
vhosts where a channel publishes without confirms or in transactions, so a healthy broker pays nothing.

The plugin names a channel by its process id, the API never does: a channel is tied to the plugin's by its
lifetime publish count, which both read from one counter. The API's copy is refreshed each statistics interval,
so the plugin's may be ahead by what the channel published since. That is an inference, said as one, and it names
no queue where it cannot tell: a channel two of the plugin's could be, or a plugin channel two of the API's could
be, is tied to none.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import replace

from ackscope.model.snapshot import Channel, Snapshot

from .prometheus_plugin.normalise import ChannelRoutes


def attribute(snapshot: Snapshot, routes: Sequence[ChannelRoutes]) -> Snapshot:
    """The snapshot with the queues each publisher without confirms (or in transactions) reached, where the
    plugin's counts tie it to one of the plugin's channels."""
    by_vhost: dict[str, list[ChannelRoutes]] = defaultdict(list)
    for r in routes:
        by_vhost[r.vhost].append(r)
    publishing = [ch for ch in snapshot.channels if (ch.message_stats.publish or 0) > 0 and ch.routed_into is None]
    could_be = {ch.name: [r for r in by_vhost[ch.vhost] if _same_count(ch.message_stats.publish, r.published)]
                for ch in publishing}
    claimed = Counter(r.channel for found in could_be.values() for r in found)
    tied = {ch.name: found[0] for ch in publishing if _at_risk(ch)
            and len(found := could_be[ch.name]) == 1 and claimed[found[0].channel] == 1}
    if not tied:
        return snapshot
    return replace(snapshot, channels=tuple(_tied(ch, tied[ch.name]) if ch.name in tied else ch
                                            for ch in snapshot.channels))


def _same_count(api: int, plugin: int) -> bool:
    """The plugin's count may be ahead of the API's refresh (every 5 s on RabbitMQ 4, whatever the statistics
    interval): by ten messages, or by a twentieth of a busy channel's count."""
    return 0 <= plugin - api <= max(10, api // 20)


def _at_risk(ch: Channel) -> bool:
    return ch.confirm is False or ch.transactional is True


def _tied(ch: Channel, r: ChannelRoutes) -> Channel:
    return replace(ch, routed_into=r.queues, routed_match=(
        f"inferred: the Prometheus plugin's channel {r.channel}, the only one of vhost {ch.vhost} whose publishes "
        f"({r.published}) are this channel's ({ch.message_stats.publish}, as the management API last refreshed "
        "them)"))
