"""The recent window the rate-like rules judge: what happened in the last few minutes, not since a
connection opened (a Celery worker drops one unroutable message at start-up and is fine for days after)."""

from __future__ import annotations

from collections import deque
from typing import Generic, Protocol, TypeVar


class _Taken(Protocol):
    taken_at: float


T = TypeVar("T", bound=_Taken)

KEPT = 10  # snapshots kept per window at most: a window's start is known to a tenth of the window


class Recent(Generic[T]):
    """Remembers snapshots (or the applications' trace windows) over the last `seconds`, a few per window, so that
    each poll's diagnosis can compare with the one at the window's start. Like Onset, memory beside pure rules."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self._kept: deque[T] = deque()

    def __len__(self) -> int:
        """Snapshots kept (at most KEPT + 1 or so, whatever the poll interval: the memory it costs)."""
        return len(self._kept)

    def start(self, snapshot: T) -> T | None:
        """The kept snapshot closest to `seconds` before this one (the oldest, while the exporter is younger
        than the window); then keeps this one. None on the first poll."""
        kept = self._kept
        # Drop what a younger snapshot already covers: the newest one at least a window old is the start.
        while len(kept) >= 2 and kept[1].taken_at <= snapshot.taken_at - self.seconds:
            kept.popleft()
        start = kept[0] if kept else None
        if not kept or snapshot.taken_at - kept[-1].taken_at >= self.seconds / KEPT:
            kept.append(snapshot)
        return start

