"""Per-consumer series: prefetch and whether it acknowledges, attributed to the client's connection name."""

from __future__ import annotations

from ackscope.model.snapshot import Consumer

from ..cardinality import Shaped
from .families import flag, gauge

LABELS = ("vhost", "queue", "consumer_tag", "channel", "connection_name", "client")


def _labels(c: Consumer) -> tuple[str, ...]:
    return (c.vhost, c.queue, c.consumer_tag, c.channel, c.connection_name, c.client or "")


class ConsumerCollector:
    def __init__(self, shaped: Shaped):
        self._shaped = shaped

    def collect(self):
        consumers = self._shaped.consumers
        yield gauge("ackscope_consumer_prefetch_count", "Prefetch limit of the consumer (0 = unlimited).",
                    LABELS, consumers, _labels, lambda c: c.prefetch_count)
        yield gauge("ackscope_consumer_ack_required", "1 for manual acknowledgement, 0 for auto-ack.",
                    LABELS, consumers, _labels, lambda c: flag(c.ack_required))
