"""The node's log as a poll reads it: everything written since the last read, as events; what could not be read
or understood counted, and said once in the log of ackscope (when it starts, and when it is over)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from ackscope.model.events import BrokerEvent

from .follow import FileFollower, StreamFollower, follow
from .lines import LogCounts, LogReader

log = logging.getLogger("ackscope.broker_log")


@dataclass(frozen=True)
class LogRead:
    """How one read of the log went: the reader's counts since it started, and why the log could not be read,
    if it could not."""

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
        self._not_understood_said = False
        self._truncated_said = False

    def read(self, take: Callable[[list[BrokerEvent]], None]) -> LogRead:
        """Everything written since the last read, handed to `take` a batch (at most follow.READ_BYTES of lines)
        at a time, oldest first: a burst is counted as it passes, never held whole."""
        while True:
            batch = self._follower.read()
            self._truncated += batch.truncated
            if not batch.lines:
                break
            take(self._reader.feed(batch.lines))
        take(self._reader.flush())
        self._say(batch.problem)
        return LogRead(LogCounts(**vars(self._reader.counts)), self._truncated, batch.problem)

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
        if counts.not_understood and not self._not_understood_said:
            self._not_understood_said = True
            log.warning("broker log: %s has warnings or errors ackscope does not understand (it makes no event of "
                        "them), counted in ackscope_broker_log_not_understood_lines_total; the first: %r", self.path,
                        counts.first_not_understood)
        if self._truncated and not self._truncated_said:
            self._truncated_said = True
            log.warning("broker log: %s has lines longer than 64 KiB; each is read up to that and counted",
                        self.path)
