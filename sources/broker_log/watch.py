"""The node's log as a poll reads it: everything written since the last read, as events; what could not be read
or understood counted, and said once in the log of ackscope (when it starts, and when it is over)."""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass

from ackscope.model.events import BrokerEvent

from .follow import FileFollower, StreamFollower, follow
from .lines import LogCounts, LogReader

log = logging.getLogger("ackscope.broker_log")

# Events one read keeps, the newest: a burst beyond it is counted in `dropped`, never held.
MAX_EVENTS = 10_000


@dataclass(frozen=True)
class LogRead:
    """One read of the log: its new events (at most MAX_EVENTS, the newest), how many more there were, the
    reader's counts since it started, and why the log could not be read, if it could not."""

    events: tuple[BrokerEvent, ...]
    dropped: int
    counts: LogCounts
    truncated: int  # lines cut at follow.MAX_LINE, since it started
    problem: str | None


class BrokerLogWatch:
    """`--broker-log PATH` (or "-"): read at each poll."""

    def __init__(self, path: str, from_start: bool = False,
                 follower: FileFollower | StreamFollower | None = None):
        self.path = path
        self._follower = follower or follow(path, from_start)
        self._reader = LogReader()
        self._truncated = 0
        self._problem: str | None = None
        self._unknown_said = False
        self._truncated_said = False

    def read(self) -> LogRead:
        events: deque[BrokerEvent] = deque(maxlen=MAX_EVENTS)
        seen = 0
        problem = None
        while True:
            batch = self._follower.read()
            problem = batch.problem
            self._truncated += batch.truncated
            if not batch.lines:
                break
            got = self._reader.feed(batch.lines)
            seen += len(got)
            events.extend(got)
        got = self._reader.flush()
        seen += len(got)
        events.extend(got)
        self._say(problem)
        return LogRead(tuple(events), seen - len(events), LogCounts(**vars(self._reader.counts)), self._truncated,
                       problem)

    def close(self) -> None:
        self._follower.close()

    def _say(self, problem: str | None) -> None:
        if problem != self._problem:
            if problem:
                log.warning("broker log: %s", problem)
            else:
                log.info("broker log: %s is read again", self.path)
            self._problem = problem
        counts = self._reader.counts
        if counts.unknown and not self._unknown_said:
            self._unknown_said = True
            log.warning("broker log: %s has lines in neither of RabbitMQ's formats (plain or JSON), passed over and "
                        "counted; the first: %r", self.path, counts.first_unknown)
        if self._truncated and not self._truncated_said:
            self._truncated_said = True
            log.warning("broker log: %s has lines longer than 64 KiB; each is read up to that and counted",
                        self.path)
