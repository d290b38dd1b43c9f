"""The probes' Prometheus metrics, in a registry of their own that the exporter serves beside its own.

Buckets are fine enough to tell a 0.5 ms confirm from a 5 ms one, and reach past 5 s.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from .targets import Target

LABELS = ("target", "queue_type", "persistent")
LATENCY_BUCKETS = (0.00025, 0.0005, 0.00075, 0.001, 0.0015, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.025,
                   0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0, 5.0, 10.0, 30.0)
BATCH_BUCKETS = (1, 2, 3, 5, 10, 20, 50, 100, 200, 500, 1000)

_COUNTERS = {
    "published": "Messages the probe published (republishes included).",
    "confirmed": "Publishes the broker confirmed with basic.ack.",
    "nacked": "Publishes the broker refused with basic.nack (it took no responsibility for them).",
    "returned": "Mandatory publishes the broker returned as unroutable (basic.return).",
    "confirm_timeouts": "Publishes with no basic.ack or basic.nack within the confirm timeout.",
    "republished": "Unconfirmed messages published again after their channel or connection was lost.",
    "delivered": "Deliveries the probe's consumer received (redeliveries included).",
    "redelivered": "Deliveries flagged redelivered by the broker.",
    "requeued": "Deliveries the probe nacked with requeue=true (once per message, on purpose).",
    "duplicates": "Deliveries of a sequence number already delivered and not requeued by the probe.",
    "lost": "Confirmed messages not delivered within the loss deadline.",
    "reconnects": "Times the probe's connection was re-established after it was lost.",
}


class ProbeMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.confirm_latency = Histogram(
            "ackscope_probe_confirm_latency_seconds", "From just before the publish frame is written to the "
            "basic.ack that settles it.", LABELS, buckets=LATENCY_BUCKETS, registry=r)
        self.confirm_batch_size = Histogram(
            "ackscope_probe_confirm_batch_size", "Messages one basic.ack or basic.nack frame settled (multiple=true "
            "settles many: the broker's fsync batching).", LABELS, buckets=BATCH_BUCKETS, registry=r)
        self.delivery_latency = Histogram(
            "ackscope_probe_delivery_latency_seconds", "From publish to delivery to the probe's consumer.", LABELS,
            buckets=LATENCY_BUCKETS, registry=r)
        self.redelivery_latency = Histogram(
            "ackscope_probe_redelivery_latency_seconds", "From the probe's nack with requeue=true to the "
            "redelivery.", LABELS, buckets=LATENCY_BUCKETS, registry=r)
        self.counters = {name: Counter(f"ackscope_probe_{name}", doc, LABELS, registry=r)
                         for name, doc in _COUNTERS.items()}
        self.consumer_unacked = Gauge("ackscope_probe_consumer_unacked", "Deliveries the probe's consumer holds "
                                      "unacknowledged (client side).", LABELS, registry=r)
        self.consumer_prefetch = Gauge("ackscope_probe_consumer_prefetch", "The probe consumer's prefetch.",
                                       LABELS, registry=r)
        self.up = Gauge("ackscope_probe_up", "1 when the target's publisher and consumer channels are open.",
                        LABELS, registry=r)
        self.blocked = Gauge("ackscope_probe_publisher_blocked", "1 while the broker blocks the probe's "
                             "publishing connection (a memory or disk alarm).", registry=r)

    def add_target(self, t: Target) -> None:
        """Create the target's series at zero, so a probe that never connected still shows them."""
        labels = t.labels
        for c in self.counters.values():
            c.labels(*labels)
        for h in (self.confirm_latency, self.confirm_batch_size, self.delivery_latency, self.redelivery_latency):
            h.labels(*labels)
        self.consumer_unacked.labels(*labels).set(0)
        self.consumer_prefetch.labels(*labels).set(t.prefetch)
        self.up.labels(*labels).set(0)

    def count(self, name: str, t: Target, n: int = 1) -> None:
        if n:
            self.counters[name].labels(*t.labels).inc(n)
