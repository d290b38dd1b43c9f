"""What a source of broker state promises its readers: `read()` gives a Snapshot or raises SourceFailed,
which names every endpoint that could not be read, each with a one-word reason (a label value) and a
sentence a human understands. Credentials never appear in either."""

from __future__ import annotations

from typing import Protocol

from .snapshot import Snapshot


class FetchError(Exception):
    """One endpoint could not be read. `reason` is a label value; str() is the human sentence."""

    def __init__(self, endpoint: str, reason: str, message: str, status: int | None = None):
        super().__init__(f"{endpoint}: {message}")
        self.endpoint = endpoint
        self.reason = reason
        self.status = status


class SourceFailed(Exception):
    """A read of the broker failed; `errors` says where and why, sorted by endpoint."""

    def __init__(self, errors: list[FetchError]):
        errors = sorted(errors, key=lambda e: e.endpoint)
        super().__init__("; ".join(str(e) for e in errors))
        self.errors = errors


class Source(Protocol):
    """Where snapshots come from: the management API, or the broker's Prometheus plugin. A read may be
    partial (Snapshot.unread) when one endpoint fails and the rest stands."""

    name: str  # "management", "prometheus": ackscope_source_info says it
    base_url: str  # where it reads, for log lines
    deadline: float  # seconds one read may take

    def read(self) -> Snapshot:
        """The broker's state now, within the source's own deadline, or SourceFailed."""

    def close(self) -> None:
        """Release connections and worker threads."""
