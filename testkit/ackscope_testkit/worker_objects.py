"""Objects for tests/test_worker.py to run in a worker (core/worker.py): importable by the fresh interpreter the
worker is, which a test module is not."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

log = logging.getLogger("ackscope.testkit.tally")


class Tally:
    """Counts what it is given; logs, ends its process, or answers what cannot cross the socket on request; writes
    `closed_to` with its count when closed."""

    def __init__(self, closed_to: str | None = None, refuse: bool = False):
        if refuse:
            raise ValueError("refused to be made")
        self.count, self.closed_to = 0, closed_to

    def add(self, n: int) -> int:
        self.count += n
        return self.count

    def say(self, words: str) -> None:
        log.warning("said %s", words)
        log.debug("not said: below the exporter's level")

    def say_later(self, words: str) -> None:
        """From a thread of its own, after this call's answer: it comes back with the next."""
        threading.Timer(0.0, log.warning, args=("later %s", words)).start()

    def end(self, code: int) -> None:
        os._exit(code)

    def unsendable(self) -> object:
        return threading.Lock()

    def pid(self) -> int:
        return os.getpid()

    def close(self) -> int:
        if self.closed_to:
            Path(self.closed_to).write_text(str(self.count))
        return self.count
