"""The probes' statistics at one moment, as plain values: what the rules, the exporter's collectors and
/api/probes read. The probes keep them (ackscope.probes.statistics); nothing reads them back out of a
metrics registry."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

_EMPTY: Mapping = MappingProxyType({})

# Every resource the probes (and the confirms benchmark) touch is named ackscope.probe.<...>, so a user
# whose permissions match only ^ackscope\\.probe\\. can run them, and nothing else is ever touched.
NAMESPACE = "ackscope.probe."
# The probes' connections name themselves "ackscope-probe <role>": the rules never judge the client the probes
# are (a probe consumer is slow on purpose on some targets), and the alerts leave them out.
CONNECTION_PREFIX = "ackscope-probe"


def is_probe_connection(connection_name: str) -> bool:
    return connection_name == CONNECTION_PREFIX or connection_name.startswith(CONNECTION_PREFIX + " ")


@dataclass(frozen=True)
class Histogram:
    """Cumulative bucket counts, (upper bound, count), the last bound +Inf; and the sum of observations."""

    buckets: tuple[tuple[float, float], ...]
    sum: float = 0.0

    @property
    def count(self) -> float:
        return self.buckets[-1][1] if self.buckets else 0.0


@dataclass(frozen=True)
class TargetStats:
    target: str
    queue_type: str
    persistent: bool
    up: bool
    counters: Mapping[str, float] = field(default_factory=lambda: _EMPTY)  # published, confirmed, lost, ...
    histograms: Mapping[str, Histogram] = field(default_factory=lambda: _EMPTY)  # confirm_latency_seconds, ...
    gauges: Mapping[str, float] = field(default_factory=lambda: _EMPTY)  # consumer_unacked, consumer_prefetch

    @property
    def labels(self) -> tuple[str, str, str]:
        return (self.target, self.queue_type, "true" if self.persistent else "false")

    def buckets(self, histogram: str) -> tuple[tuple[float, float], ...]:
        h = self.histograms.get(histogram)
        return h.buckets if h is not None else ()

    def to_json(self) -> dict:
        """As /api/probes serves it (the +Inf bucket's bound as the string "+Inf")."""
        return {"target": self.target, "queue_type": self.queue_type, "persistent": self.persistent, "up": self.up,
                "counters": dict(self.counters), "gauges": dict(self.gauges),
                "histograms": {name: [["+Inf" if math.isinf(le) else le, count] for le, count in h.buckets]
                               for name, h in self.histograms.items()}}


@dataclass(frozen=True)
class ProbeStats:
    """Every target at `taken_at`, whether the broker blocks the probes' publishing connection, how often the
    probes' connections failed, which node each is on, and confirm latency per node published through."""

    taken_at: float
    targets: tuple[TargetStats, ...] = ()
    publisher_blocked: bool = False
    connection_failures: Mapping[str, float] = field(default_factory=lambda: _EMPTY)  # by role: publisher, consumer
    entries: Mapping[str, str] = field(default_factory=lambda: _EMPTY)  # role -> node (host:port) it is on
    # (target, entry node) -> confirm latency of publishes made through that node
    entry_confirm_latency: Mapping[tuple[str, str], Histogram] = field(default_factory=lambda: _EMPTY)

    def json(self) -> bytes:
        """/api/probes: every target's counters, gauges and histogram buckets."""
        return json.dumps({"taken_at": self.taken_at, "probes": [t.to_json() for t in self.targets]},
                          separators=(",", ":")).encode()
