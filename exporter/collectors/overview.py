"""Broker-wide series: global message counters and what the broker is."""

from __future__ import annotations

from prometheus_client.core import InfoMetricFamily

from ackscope.model.snapshot import Overview, Snapshot

from .families import counter

COUNTERS = (
    ("published_total", "Messages published to the broker.", lambda s: s.publish),
    ("confirmed_total", "Publisher confirms sent by the broker.", lambda s: s.confirm),
    ("delivered_total", "Messages delivered to consumers or fetched with basic.get.", lambda s: s.deliver_get),
    ("acked_total", "Deliveries acknowledged by consumers.", lambda s: s.ack),
    ("redelivered_total", "Deliveries flagged redelivered.", lambda s: s.redeliver),
    ("unroutable_returned_total", "Unroutable mandatory messages returned to publishers.",
     lambda s: s.return_unroutable),
    ("unroutable_dropped_total", "Unroutable messages dropped silently.", lambda s: s.drop_unroutable),
)

CHURN = (
    ("connections_opened_total", "Connections opened on the broker's nodes since they started (churn: a "
     "connection shorter than a poll is seen only here and in the broker's log).", lambda c: c.connections_opened),
    ("connections_closed_total", "Connections closed on the broker's nodes since they started.",
     lambda c: c.connections_closed),
    ("channels_opened_total", "Channels opened on the broker's nodes since they started.",
     lambda c: c.channels_opened),
    ("channels_closed_total", "Channels closed on the broker's nodes since they started.",
     lambda c: c.channels_closed),
)


class OverviewCollector:
    def __init__(self, snapshot: Snapshot):
        self._snapshot = snapshot

    def collect(self):
        overview = self._snapshot.overview
        for name, doc, value in COUNTERS:
            yield counter(f"ackscope_overview_{name}", doc, (), [overview.message_stats], lambda _: (), value)
        churn = [overview.churn] if overview.churn is not None else []
        for name, doc, value in CHURN:
            yield counter(f"ackscope_overview_{name}", doc, (), churn, lambda _: (), value)
        info = InfoMetricFamily("ackscope_broker", "The broker ackscope polls.")
        info.add_metric([], _info(overview))
        yield info


def _info(o: Overview) -> dict[str, str]:
    fields = {"rabbitmq_version": o.rabbitmq_version, "erlang_version": o.erlang_version,
              "management_version": o.management_version, "cluster_name": o.cluster_name}
    return {k: v for k, v in fields.items() if v}
