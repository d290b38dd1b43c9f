"""Publishers that wait for each confirm (diagnosis/confirm_waits.py and the publisher-waits-each-confirm rule),
from small snapshots; the figures `ackscope bench confirms --save` writes, read back. Real clients on every
release: tests/test_versions.py."""

from __future__ import annotations

import json

import pytest
from snapshot_builders import channel, snapshot, stats

from ackscope.apps import bench
from ackscope.core.config import ConfigError
from ackscope.diagnosis.confirm_waits import ConfirmWaits
from ackscope.diagnosis.rules import Context, evaluate
from ackscope.diagnosis.thresholds import Thresholds
from ackscope.model.confirm_bench import ConfirmBench, StrategyRate
from ackscope.model.probes import Histogram, TargetStats

RULE = "publisher-waits-each-confirm"
T = Thresholds(window_seconds=60.0, confirm_wait_samples=4)


def _polls(unconfirmed: list[int], every: float = 5.0, rate: int = 500, confirm: bool = True):
    """Snapshots of one channel publishing `rate` a second, its unconfirmed count sampled as listed; the tracker's
    view of the last, and that last snapshot and the first."""
    tracker, seen = ConfirmWaits(T.window_seconds), None
    shots = [snapshot(1000.0 + i * every, channels=[channel(confirm=confirm, messages_unconfirmed=n,
                                                             message_stats=stats(publish=int(i * every * rate)))])
             for i, n in enumerate(unconfirmed)]
    for s in shots:
        seen = tracker.update(s)
    return seen, shots[-1], shots[0]


def _judged(unconfirmed: list[int], probes=(), bench_figures=None, **kw):
    seen, now, start = _polls(unconfirmed, **kw)
    ctx = Context(now, start, probes, T, window=start, in_flight=seen, confirm_bench=bench_figures)
    return [f for f in evaluate(ctx) if f.rule == RULE]


def test_samples_are_kept_only_while_the_channel_publishes_and_only_over_the_window():
    tracker = ConfirmWaits(10.0)
    quiet = [snapshot(1000.0 + i, channels=[channel(messages_unconfirmed=1, message_stats=stats(publish=7))])
             for i in range(5)]
    for s in quiet:
        assert tracker.update(s) == {}  # one refresh read by many polls, or a channel that publishes nothing
    busy = [snapshot(1005.0 + i, channels=[channel(messages_unconfirmed=i % 2, message_stats=stats(publish=8 + i))])
            for i in range(20)]
    for s in busy:
        seen = tracker.update(s)
    assert (seen["ch 1"].samples, seen["ch 1"].peak) == (11, 1)  # 10 s of samples, one a second, ends included
    assert tracker.update(snapshot(1030.0, channels=[])) == {}  # a closed channel is forgotten
    untracked = snapshot(1031.0, channels=[channel(confirm=False, messages_unconfirmed=0,
                                                   message_stats=stats(publish=99))])
    assert tracker.update(untracked) == {}


def test_a_publisher_never_seen_with_two_unconfirmed_that_waits_most_of_its_time_is_a_warning():
    [f] = _judged([1, 1, 0, 1, 1, 1, 1, 1, 1])
    assert f.severity == "warning" and f.evidence["unconfirmed_peak"] == 1 and f.evidence["unconfirmed_samples"] == 8
    assert f.evidence["waiting_share"] == 0.88 and f.evidence["publish_rate"] == 500
    assert f.evidence["waiting_share_from"] == ("inferred: the broker's unconfirmed count, averaged while it "
                                                "published")
    assert "'ackscope bench confirms' measures each strategy" in f.remedy
    assert "ceiling, about 571/s here: it publishes at it" in f.explanation


def test_one_that_waits_less_is_info_and_one_that_waits_little_or_streams_is_not_named():
    [f] = _judged([0, 1, 0, 1, 0, 1, 0, 0, 1])
    assert f.severity == "info" and f.evidence["waiting_share"] == 0.5
    assert _judged([0, 0, 0, 1, 0, 0, 0, 0, 1]) == []  # it waits a quarter of its time: not bound
    assert _judged([0, 0, 0, 0, 0, 0, 0, 0, 0], probes=(_probe(0.01),)) == []  # never seen waiting: no latency says it
    assert _judged([0, 1, 1, 1, 2, 1, 1, 1, 1]) == []  # two unconfirmed once: it does not wait for each
    assert _judged([0, 1, 1, 1]) == []  # three samples: too few to tell
    assert _judged([1, 1, 1, 1, 1, 1], confirm=False) == []  # no confirms: publisher-without-confirms's business


def _probe(upper: float) -> TargetStats:
    """A probe target whose confirms all took between 1 ms and `upper` seconds."""
    return TargetStats("latency", "classic", True, True, histograms={"confirm_latency_seconds": Histogram(
        ((0.001, 0.0), (upper, 100.0), (float("inf"), 100.0)))})


def test_the_probes_confirm_latency_counts_the_round_trip_the_broker_does_not_see():
    # 500/s at a 1.8 ms median confirm: waiting 90% of its time, though the broker holds one only a third of it.
    [f] = _judged([0, 1, 0, 0, 1, 0, 1, 0, 1], probes=(_probe(0.0025),))
    assert f.severity == "warning" and f.evidence["probe_confirm_p50_seconds"] == 0.00175
    assert f.evidence["waiting_share_from"] == ("inferred: its rate times the probes' median confirm latency")


def test_the_remedy_quotes_what_the_bench_measured_on_this_broker():
    figures = ConfirmBench("amqp://ackscope@rabbit:5672/%2F", 1.7e9, (
        StrategyRate("confirm and wait, per message", "classic", 812.4, 0.0011),
        StrategyRate("publish 100, then wait for their confirms", "classic", 9400.0, 0.009),
        StrategyRate("streaming confirms, window 500", "classic", 15100.0, 0.02),
        StrategyRate("transaction per message", "classic", 300.0, 0.003)))
    [f] = _judged([1] * 9, bench_figures=figures)
    assert f.remedy.endswith("Measured on this broker by 'ackscope bench confirms': classic queue: confirm and "
                             "wait, per message 812 msg/s, publish 100, then wait for their confirms 9,400 msg/s, "
                             "streaming confirms, window 500 15,100 msg/s.")


def test_saved_bench_figures_read_back_and_a_bad_file_is_one_line(tmp_path):
    figures = ConfirmBench("amqp://rabbit/%2F", 1.7e9, (StrategyRate("streaming confirms, window 500", "quorum",
                                                                     4000.0, None),))
    good = tmp_path / "confirms.json"
    good.write_text(json.dumps(figures.to_json()))
    assert bench.saved(str(good)) == figures
    for text, said in (("{", "Expecting property name"), ('{"rates": [{"strategy": "x"}]}', "rate 1 is not"),
                       ('{"rates": []}', "when it was measured"), ("[]", "not a saved")):
        good.write_text(text)
        with pytest.raises(ConfigError) as e:
            bench.saved(str(good))
        assert str(e.value).startswith(f"--confirm-bench {good}: ") and said in str(e.value)
        assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="No such file"):
        bench.saved(str(tmp_path / "missing.json"))
