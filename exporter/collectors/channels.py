"""Per-channel series: prefetch, unacked, unconfirmed, confirm/transaction mode and message counters,
each labelled with the client's connection name and its library and version (`client`) so the culprit is named,
not just its socket (the channel label already carries the peer address and port)."""

from __future__ import annotations

from ackscope.model.snapshot import Channel

from ..cardinality import FOLDED, Folded, Shaped
from .families import counter, flag, gauge, with_folded

LABELS = ("vhost", "channel", "connection_name", "user", "client")


def _labels(c: Channel) -> tuple[str, ...]:
    return (c.vhost, c.name, c.connection_name, c.user, c.client or "")


def _folded_labels(f: Folded) -> tuple[str, ...]:
    return (f.vhost, FOLDED, "", "", "")


def _utilisation(c: Channel) -> float | None:
    limit = c.prefetch_limit
    return None if limit is None or c.messages_unacked is None else c.messages_unacked / limit


GAUGES = (
    ("prefetch_count", "Per-consumer prefetch limit set by basic.qos (0 = unlimited).", lambda c: c.prefetch_count),
    ("global_prefetch_count", "Channel-wide prefetch limit set by basic.qos global (0 = unlimited).",
     lambda c: c.global_prefetch_count),
    ("confirm_mode", "1 when the channel is in publisher-confirm mode.", lambda c: flag(c.confirm)),
    ("transactional", "1 when the channel is in transaction mode (tx.select).", lambda c: flag(c.transactional)),
    ("prefetch_utilisation", "Unacked deliveries over the channel's prefetch limit as the broker applies it "
     "(the prefetch each consumer got when it subscribed, summed, capped by the global prefetch); absent when "
     "no limit binds.", _utilisation),
)
# Gauges and counters that also have a folded per-vhost total: (name, doc, kind, of channel, of folded).
SUMMABLE = (
    ("messages_unacked", "Deliveries on the channel not yet acknowledged.", gauge,
     lambda c: c.messages_unacked, lambda f: f.messages_unacked),
    ("messages_unconfirmed", "Published messages not yet confirmed by the broker.", gauge,
     lambda c: c.messages_unconfirmed, lambda f: f.messages_unconfirmed),
    ("published_total", "Messages published on the channel.", counter,
     lambda c: c.message_stats.publish, lambda f: f.message_stats.publish),
    ("confirmed_total", "Publisher confirms (basic.ack) the broker sent on the channel.", counter,
     lambda c: c.message_stats.confirm, lambda f: f.message_stats.confirm),
    ("delivered_total", "Messages delivered to consumers or fetched with basic.get, with or without ack.",
     counter, lambda c: c.message_stats.deliver_get, lambda f: f.message_stats.deliver_get),
    ("acked_total", "Deliveries the client acknowledged.", counter,
     lambda c: c.message_stats.ack, lambda f: f.message_stats.ack),
    ("redelivered_total", "Deliveries flagged redelivered (requeued, or unacked when a channel closed).",
     counter, lambda c: c.message_stats.redeliver, lambda f: f.message_stats.redeliver),
    ("unroutable_returned_total", "Mandatory messages that matched no queue and were returned (basic.return).",
     counter, lambda c: c.message_stats.return_unroutable, lambda f: f.message_stats.return_unroutable),
    ("unroutable_dropped_total", "Messages that matched no queue and were dropped silently (not mandatory).",
     counter, lambda c: c.message_stats.drop_unroutable, lambda f: f.message_stats.drop_unroutable),
)


class ChannelCollector:
    def __init__(self, shaped: Shaped):
        self._shaped = shaped

    def collect(self):
        channels, folded = self._shaped.channels, self._shaped.folded_channels
        for name, doc, value in GAUGES:
            yield gauge(f"ackscope_channel_{name}", doc, LABELS, channels, _labels, value)
        yield from with_folded("ackscope_channel_", LABELS, SUMMABLE, channels, _labels, folded, _folded_labels)
