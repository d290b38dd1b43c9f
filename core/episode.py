"""A trouble that comes and goes (the broker down, polls overrunning), said in one line when it starts and one
when it ends, however often it flaps in between: over a lossy link a poll fails, the next answers, the next
fails again, and a line per flip would flood the log with what ackscope_up already shows."""

from __future__ import annotations

import time
from collections.abc import Callable


class Episode:
    """update(troubled) after each observation returns "start" for the first trouble, "end" once there has been
    none for `settle` seconds, and None otherwise: a trouble within `settle` of the last continues the same
    episode."""

    def __init__(self, settle: float, clock: Callable[[], float] | None = None):
        self.settle = settle
        self.active = False  # said to have started, not yet said to have ended
        self._clock = clock  # time.monotonic when None
        self._quiet_since: float | None = None

    def update(self, troubled: bool) -> str | None:
        if troubled:
            self._quiet_since = None
            if self.active:
                return None
            self.active = True
            return "start"
        if not self.active:
            return None
        now = self._clock() if self._clock else time.monotonic()
        if self._quiet_since is None:
            self._quiet_since = now
        if now - self._quiet_since < self.settle:
            return None
        self.active, self._quiet_since = False, None
        return "end"
