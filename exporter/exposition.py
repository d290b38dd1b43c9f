"""Render a snapshot once per poll into the bytes every scrape then serves unchanged.

Only ackscope_snapshot_age_seconds depends on the moment of the scrape; it is written in front of the
pre-rendered body at serve time (as a separate gzip member when the body is compressed, which any
gzip reader, Prometheus' included, joins back into one stream).
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import time
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, generate_latest

from .cardinality import Limits, shape
from .collectors.channels import ChannelCollector
from .collectors.connections import ConnectionCollector
from .collectors.consumers import ConsumerCollector
from .collectors.nodes import NodeCollector
from .collectors.overview import OverviewCollector
from .collectors.queues import QueueCollector
from .collectors.self_metrics import SelfCollector
from .snapshot import Snapshot
from .status import PollStatus

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_GZIP_LEVEL = 5  # near level 9's size for a third of its CPU on exposition text


@dataclass(frozen=True)
class Exposition:
    metrics: bytes
    metrics_gz: bytes
    snapshot_json: bytes
    snapshot_taken_at: float | None

    def age_text(self, now: float | None = None) -> bytes:
        """The scrape-time family: seconds since the snapshot behind /api/snapshot was taken."""
        head = (b"# HELP ackscope_snapshot_age_seconds Seconds since the last good snapshot of the broker.\n"
                b"# TYPE ackscope_snapshot_age_seconds gauge\n")
        if self.snapshot_taken_at is None:
            return head
        age = max(0.0, (now or time.time()) - self.snapshot_taken_at)
        return head + f"ackscope_snapshot_age_seconds {age:.3f}\n".encode()

    def metrics_body(self, gzipped: bool, now: float | None = None) -> bytes:
        if gzipped:
            return gzip.compress(self.age_text(now), _GZIP_LEVEL) + self.metrics_gz
        return self.age_text(now) + self.metrics


def render(snapshot: Snapshot | None, status: PollStatus, limits: Limits) -> Exposition:
    """The exposition for the latest poll. Broker series come only from a snapshot the last poll produced:
    after a failed poll /metrics says so (ackscope_up 0) instead of repeating stale numbers, while
    /api/snapshot keeps the last good snapshot, marked stale, for the UI."""
    registry = CollectorRegistry(auto_describe=False)
    shaped = shape(snapshot, limits) if snapshot is not None and status.up else None
    registry.register(SelfCollector(status, shaped))
    if shaped is not None:
        for collector in (OverviewCollector(snapshot), NodeCollector(snapshot), ConnectionCollector(snapshot),
                          ChannelCollector(shaped), ConsumerCollector(shaped), QueueCollector(shaped)):
            registry.register(collector)
    metrics = generate_latest(registry)
    return Exposition(
        metrics=metrics,
        metrics_gz=gzip.compress(metrics, _GZIP_LEVEL),
        snapshot_json=snapshot_json(snapshot, status),
        snapshot_taken_at=snapshot.taken_at if snapshot is not None else None,
    )


def snapshot_json(snapshot: Snapshot | None, status: PollStatus) -> bytes:
    """/api/snapshot: the last good snapshot with the poller's status, `stale` when the last poll failed."""
    document = {
        "up": status.up,
        "stale": not status.up,
        "last_error": status.last_error,
        "last_success_at": status.last_success_at,
        "snapshot": None if snapshot is None else _plain(snapshot),
    }
    return json.dumps(document, separators=(",", ":")).encode()


def _plain(snapshot: Snapshot) -> dict:
    document = dataclasses.asdict(snapshot)
    # Derived facts the UI needs and should not recompute.
    for plain, channel in zip(document["channels"], snapshot.channels):
        plain["prefetch_limit"] = channel.prefetch_limit
    for plain, connection in zip(document["connections"], snapshot.connections):
        plain["blocked"] = connection.blocked
    return document
