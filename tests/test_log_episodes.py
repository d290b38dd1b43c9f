"""Over a lossy link a poll fails, the next answers, the next fails again. The log says such an outage once when
it starts and once when polls have been good for five intervals, however often it flaps in between; the same
for polls overrunning the interval. What flaps is in ackscope_up and ackscope_poll_errors_total, not in a flood."""

from __future__ import annotations

import logging
from types import SimpleNamespace

from snapshot_builders import snapshot

from ackscope.core.episode import Episode
from ackscope.exporter.poller import SETTLE_INTERVALS, Poller
from ackscope.model.source import FetchError, SourceFailed


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_an_episode_starts_once_and_ends_only_after_it_has_been_quiet_for_the_settle_time():
    clock = Clock()
    episode = Episode(settle=10.0, clock=clock)
    said = []
    for at, troubled in [(0, False), (1, True), (2, False), (3, True), (4, True), (5, False), (14, False),
                         (15, False), (16, False), (17, True)]:
        clock.now = at
        said.append(episode.update(troubled))
    assert said == [None, "start", None, None, None, None, None, "end", None, "start"]


class Flapping:
    """A source whose reads fail or answer in the order given (a broker behind a lossy link)."""

    name = "test"
    base_url = "http://broker.test"

    def __init__(self, outcomes):
        self.outcomes = iter(outcomes)

    def read(self):
        outcome = next(self.outcomes)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def close(self):
        pass


def test_a_flapping_broker_is_one_outage_in_the_log_and_every_flip_in_ackscope_up(caplog, monkeypatch):
    caplog.set_level(logging.DEBUG, logger="ackscope")
    clock = Clock()
    monkeypatch.setattr("ackscope.core.episode.time", SimpleNamespace(monotonic=clock))
    down = SourceFailed([FetchError("overview", "timeout", "no answer within 5.0s")])
    good = snapshot()
    outcomes = [good, down, good, down, down, good, down, good] + [good] * (SETTLE_INTERVALS + 1)
    poller = Poller(Flapping(outcomes), interval=1.0)
    ups = []
    for _ in outcomes:
        poller.poll_once()
        ups.append(poller.status.up)
        clock.now += 1.0
    assert ups == [True, False, True, False, False, True, False] + [True] * (SETTLE_INTERVALS + 2)
    said = [(r.levelname, r.getMessage()) for r in caplog.records if r.levelno >= logging.INFO]
    assert said == [("ERROR", "poll failed: overview: no answer within 5.0s"),
                    ("INFO", "the broker answers again at http://broker.test")], said
