"""The probes' wire clock: a frame's time is when the socket moved its last byte; the latency buckets are
fine enough that interpolated percentiles stay near the exact ones."""

from __future__ import annotations

import random
import statistics

import pytest

from ackscope.core.quantile import histogram_quantile, sample_quantile
from ackscope.probes.statistics import LATENCY_BUCKETS, Bucketed
from ackscope.probes.wire import WireClock


def test_a_frame_leaves_when_the_socket_has_taken_its_last_byte():
    clock, left = WireClock(), []
    clock.emitted(100)  # publish 1: 100 bytes
    clock.when_sent(lambda at: left.append((1, at)))
    clock.emitted(50)  # publish 2
    clock.when_sent(lambda at: left.append((2, at)))
    clock.sent(60, at_ns=10)  # a partial write: publish 1 not out yet
    assert left == []
    clock.sent(40, at_ns=20)
    assert left == [(1, 20)]
    clock.sent(50, at_ns=30)
    assert left == [(1, 20), (2, 30)]


def test_one_write_carrying_many_frames_times_them_all_at_once():
    clock, left = WireClock(), []
    for seq in range(3):
        clock.emitted(30)
        clock.when_sent(lambda at, seq=seq: left.append((seq, at)))
    clock.sent(90, at_ns=7)
    assert left == [(0, 7), (1, 7), (2, 7)]


def test_what_was_read_is_timed_by_the_read():
    clock = WireClock()
    clock.read(42)
    assert clock.read_ns == 42


@pytest.mark.parametrize("median_s, spread", [(0.0006, 0.3), (0.002, 0.5), (0.002, 1.2), (0.03, 0.8), (0.4, 0.6),
                                              (2.0, 0.4)])
def test_interpolated_percentiles_stay_within_ten_percent_of_the_exact_ones(median_s, spread):
    rng = random.Random(14)
    values = sorted(rng.lognormvariate(0, spread) * median_s for _ in range(2000))
    histogram = Bucketed(LATENCY_BUCKETS)
    for v in values:
        histogram.observe(v)
    for q in (0.5, 0.99):
        exact = values[int(q * len(values))]
        assert histogram_quantile(histogram.frozen().buckets, q) == pytest.approx(exact, rel=0.10)


def test_the_exact_sample_quantile_is_pythons_inclusive_one():
    values = [random.Random(7).expovariate(1000) for _ in range(501)]
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    for q in (0.5, 0.9, 0.99):
        assert sample_quantile(values, q) == pytest.approx(cuts[round(q * 100) - 1])
    assert sample_quantile([3.0], 0.99) == 3.0 and sample_quantile([], 0.5) is None
