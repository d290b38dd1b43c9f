"""The one histogram quantile: what Prometheus' histogram_quantile() computes, so the rules, the
dashboard and a Grafana panel over the same buckets agree."""

from __future__ import annotations

import math
from collections.abc import Sequence

Buckets = Sequence[Sequence]  # cumulative (upper bound, count); the bound may be the string "+Inf" (JSON)


def _bounds(buckets: Buckets) -> list[tuple[float, float]]:
    return [(math.inf if le == "+Inf" else float(le), float(count)) for le, count in buckets]


def histogram_quantile(buckets: Buckets, q: float) -> float | None:
    """Linear within the bucket that holds quantile q, from 0 for the first; the largest finite bound when
    the quantile lies in the +Inf bucket (all that is known of it); None without observations."""
    bounds = _bounds(buckets)
    if not bounds or bounds[-1][1] == 0:
        return None
    rank = q * bounds[-1][1]
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in bounds:
        if count >= rank:
            if math.isinf(bound):
                return lower_bound
            if count == lower_count:
                return bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (count - lower_count)
        lower_bound, lower_count = bound, count
    return None


def sample_quantile(values: Sequence[float], q: float) -> float | None:
    """The q-quantile of every value in a sample, exact: linear between the two nearest ranks (Python's
    statistics.quantiles, method "inclusive"); None for an empty sample."""
    ordered = sorted(values)
    if not ordered:
        return None
    position = q * (len(ordered) - 1)
    below = math.floor(position)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (position - below)


def beyond_largest_bucket(buckets: Buckets, q: float) -> bool:
    """True when quantile q lies in the +Inf bucket: above the largest finite bound, by an unknown amount."""
    bounds = _bounds(buckets)
    if len(bounds) < 2 or bounds[-1][1] == 0:
        return False
    return bounds[-2][1] < q * bounds[-1][1]
