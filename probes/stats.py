"""The probes' statistics as plain values, read from their registry: what the diagnosis rules and the
JSON API see (a rule must not depend on prometheus_client's objects)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry

_PREFIX = "ackscope_probe_"


@dataclass(frozen=True)
class TargetStats:
    target: str
    queue_type: str
    persistent: bool
    up: bool
    counters: dict[str, float] = field(default_factory=dict)  # published, confirmed, nacked, lost, ...
    # Cumulative bucket counts, (upper bound, count), of each histogram: confirm_latency_seconds, ...
    histograms: dict[str, tuple[tuple[float, float], ...]] = field(default_factory=dict)
    gauges: dict[str, float] = field(default_factory=dict)  # consumer_unacked, consumer_prefetch, ...

    def to_json(self) -> dict:
        """As /api/probes serves it (the +Inf bucket's bound as the string "+Inf")."""
        return {"target": self.target, "queue_type": self.queue_type, "persistent": self.persistent, "up": self.up,
                "counters": self.counters, "gauges": self.gauges,
                "histograms": {h: [["+Inf" if math.isinf(le) else le, count] for le, count in buckets]
                               for h, buckets in self.histograms.items()}}

    def quantile(self, histogram: str, q: float) -> float | None:
        """The upper bound of the bucket that holds quantile q (None with no observations)."""
        buckets = self.histograms.get(histogram, ())
        if not buckets or buckets[-1][1] == 0:
            return None
        total = buckets[-1][1]
        return next(le for le, count in buckets if count >= q * total)


def read(registry: CollectorRegistry) -> tuple[TargetStats, ...]:
    """Every target's statistics, as the registry holds them now."""
    rows: dict[str, dict] = {}
    for family in registry.collect():
        if not family.name.startswith(_PREFIX):
            continue
        name = family.name[len(_PREFIX):]
        for s in family.samples:
            target = s.labels.get("target")
            if target is None:
                continue
            row = rows.setdefault(target, {"labels": s.labels, "counters": {}, "buckets": {}, "gauges": {},
                                           "up": 0.0})
            if family.type == "counter" and s.name.endswith("_total"):
                row["counters"][name] = s.value
            elif family.type == "histogram" and s.name.endswith("_bucket"):
                row["buckets"].setdefault(name, []).append((float(s.labels["le"]), s.value))
            elif name == "up":
                row["up"] = s.value
            elif family.type == "gauge":
                row["gauges"][name] = s.value
    return tuple(
        TargetStats(target=t, queue_type=r["labels"]["queue_type"], persistent=r["labels"]["persistent"] == "true",
                    up=r["up"] == 1, counters=r["counters"], gauges=r["gauges"],
                    histograms={h: tuple(sorted(b)) for h, b in r["buckets"].items()})
        for t, r in sorted(rows.items()))


def probes_json(stats: tuple[TargetStats, ...], taken_at: float) -> bytes:
    """/api/probes: every target's counters, gauges and histogram buckets."""
    return json.dumps({"taken_at": taken_at, "probes": [t.to_json() for t in stats]},
                      separators=(",", ":")).encode()
