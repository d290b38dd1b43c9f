"""The probes' families (ackscope_probe_*), from an immutable ProbeStats: per target, labelled with its
queue type and persistence."""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.utils import floatToGoString

from ackscope.model.probes import ProbeStats

LABELS = ("target", "queue_type", "persistent")
HISTOGRAMS = {
    "confirm_latency_seconds": "From just before the publish frame is written to the basic.ack that settles it.",
    "confirm_batch_size": "Messages one basic.ack or basic.nack frame settled (multiple=true settles many: the "
                          "broker's fsync batching).",
    "delivery_latency_seconds": "From publish to delivery to the probe's consumer.",
    "redelivery_latency_seconds": "From the probe's nack with requeue=true to the redelivery.",
}
COUNTERS = {
    "published": "Messages the probe published (republishes included).",
    "confirmed": "Publishes the broker confirmed with basic.ack.",
    "nacked": "Publishes the broker refused with basic.nack (it took no responsibility for them).",
    "returned": "Mandatory publishes the broker returned as unroutable (basic.return).",
    "confirm_timeouts": "Publishes with no basic.ack or basic.nack within the confirm timeout.",
    "republished": "Unconfirmed messages published again after their channel or connection was lost.",
    "held_back": "Publishes the probe held back while the broker blocked its publishing connection (a resource "
                 "alarm).",
    "delivered": "Deliveries the probe's consumer received (redeliveries included).",
    "redelivered": "Deliveries flagged redelivered by the broker.",
    "requeued": "Deliveries the probe nacked with requeue=true (once per message, on purpose).",
    "duplicates": "Deliveries of a sequence number already delivered and not requeued by the probe.",
    "out_of_order_first": "First deliveries (not flagged redelivered) that came after a message published later was "
                          "first delivered to the same probe consumer: RabbitMQ's ordering guarantee broken.",
    "out_of_order_redelivered": "Redeliveries that came after messages published later were delivered to the same "
                                "probe consumer: expected (a requeued message goes back to its place).",
    "lost": "Confirmed messages not delivered within the loss deadline.",
    "reconnects": "Times the probe's connection was re-established after it was lost.",
    "consumer_cancels": "Times the broker cancelled the probe's consumer (basic.cancel: its queue deleted, its "
                        "queue's node down, a mirrored queue failing over); the probe consumes again.",
}
GAUGES = {
    "consumer_unacked": "Deliveries the probe's consumer holds unacknowledged (client side).",
    "consumer_prefetch": "The probe consumer's prefetch.",
    "consumers": "The probe's consumers of the target's queue, each on a channel of its own.",
    "awaiting_delivery": "Confirmed messages not yet delivered to the probe's consumer (within the loss deadline).",
    "oldest_awaiting_seconds": "Age of the oldest confirmed message not yet delivered (0 when none): it nears the "
                               "loss deadline before a message counts as lost.",
}


class ProbeCollector:
    def __init__(self, stats: ProbeStats):
        self._stats = stats

    def collect(self):
        targets = self._stats.targets
        for name, doc in HISTOGRAMS.items():
            family = HistogramMetricFamily(f"ackscope_probe_{name}", doc, labels=LABELS)
            for t in targets:
                h = t.histograms.get(name)
                if h is not None:
                    family.add_metric(list(t.labels), [(floatToGoString(le), n) for le, n in h.buckets], h.sum)
            yield family
        for name, doc in COUNTERS.items():
            family = CounterMetricFamily(f"ackscope_probe_{name}", doc, labels=LABELS)
            for t in targets:
                family.add_metric(list(t.labels), t.counters.get(name, 0.0))
            yield family
        for name, doc in GAUGES.items():
            family = GaugeMetricFamily(f"ackscope_probe_{name}", doc, labels=LABELS)
            for t in targets:
                if name in t.gauges:
                    family.add_metric(list(t.labels), t.gauges[name])
            yield family
        up = GaugeMetricFamily("ackscope_probe_up", "1 when the target's publisher and consumer channels are open.",
                               labels=LABELS)
        for t in targets:
            up.add_metric(list(t.labels), int(t.up))
        yield up
        failures = CounterMetricFamily("ackscope_probe_connection_failures", "Failed attempts to open, and losses "
                                       "of, the probes' publishing or consuming connection.", labels=("role",))
        for role, n in sorted(self._stats.connection_failures.items()):
            failures.add_metric([role], n)
        yield failures
        by_entry = HistogramMetricFamily(
            "ackscope_probe_entry_confirm_latency_seconds", "Confirm latency by the node the probe published through "
            "(label entry, host:port of one of its AMQP URLs): through a quorum queue's leader against through "
            "another node, the hop between nodes.", labels=("target", "entry"))
        for (target, entry), h in self._stats.entry_confirm_latency.items():
            by_entry.add_metric([target, entry], [(floatToGoString(le), n) for le, n in h.buckets], h.sum)
        yield by_entry
        entries = GaugeMetricFamily("ackscope_probe_connection_entry", "1 for the node (host:port) each of the "
                                    "probes' connections is on, while it is open.", labels=("role", "entry"))
        for role, entry in sorted(self._stats.entries.items()):
            entries.add_metric([role, entry], 1)
        yield entries
        yield GaugeMetricFamily("ackscope_probe_publisher_blocked", "1 while the broker blocks the probe's "
                                "publishing connection (a memory or disk alarm).",
                                value=int(self._stats.publisher_blocked))
