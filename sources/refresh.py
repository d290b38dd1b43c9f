"""A fact read in the background, beside the polls: at the first poll and every so often after, and no poll
waits for it but the first (until its deadline). For what changes rarely and costs the broker or us more than a
poll should pay each time: the node's settings through its CLI (an Erlang VM started), the policies and deprecated
features an upgrade depends on. When a read fails, what was read before stays, and the trouble is said once."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, TypeVar

log = logging.getLogger("ackscope.sources")

T = TypeVar("T")


class Refreshed(Generic[T]):
    def __init__(self, what: str, read: Callable[[], T], refresh_seconds: float,
                 failures: tuple[type[BaseException], ...]):
        """`what` names it in the log ("the node's settings (rabbitmqctl)"); `read` raises one of `failures`
        when it cannot read, with a message a human understands."""
        self.what = what
        self.read = read
        self.refresh_seconds = refresh_seconds
        self.failures = failures
        self._value: T | None = None
        self._read_at: float | None = None  # monotonic time of the last attempt
        self._running: Future | None = None
        self._failing: str | None = None
        self._closed = False  # a read still running when the exporter stops says nothing after it
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ackscope-refresh")

    def latest(self, first_by: float | None = None) -> T | None:
        """The value last read; starts a read when one is due. Until a first read has answered, waits for it
        until the monotonic time `first_by` (then None, when it has not answered by then)."""
        now = time.monotonic()
        due = self._read_at is None or now - self._read_at >= self.refresh_seconds
        if due and (self._running is None or self._running.done()) and not self._closed:
            self._read_at = now
            self._running = self._pool.submit(self._read)
        if self._value is None and first_by is not None and self._running is not None:
            try:
                self._running.result(timeout=max(0.0, first_by - now))
            except TimeoutError:
                pass  # said by the read itself when it fails; a slow first read is there at a later poll
        return self._value

    def _read(self) -> None:
        try:
            self._value = self.read()
        except self.failures as e:
            message = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
            if message != self._failing and not self._closed:
                log.warning("%s not read%s: %s", self.what,
                            ", those read before kept" if self._value is not None else "", message)
                self._failing = message
            return
        if self._failing is not None:
            log.info("%s read again", self.what)
            self._failing = None

    def close(self) -> None:
        self._closed = True
        self._pool.shutdown(wait=False, cancel_futures=True)
