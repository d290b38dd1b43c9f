"""What a source of broker state promises its readers: `read()` gives a Snapshot or raises SourceFailed,
which names every endpoint that could not be read, each with a one-word reason (a label value) and a
sentence a human understands. Credentials never appear in either."""

from __future__ import annotations

from dataclasses import replace
from typing import Protocol

from .snapshot import Snapshot, Unread

# Errors that are the configuration's, not the moment's: a poll that meets one fails loudly rather than export
# the part that answered (a wrong password answers nothing right on any endpoint).
FATAL = frozenset({"unauthorized", "forbidden", "tls"})


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


def as_fetch_error(endpoint: str, error: BaseException) -> FetchError:
    """A read's failure as a FetchError of the part `endpoint` that failed: a part made of several reads (a
    vhost's exchanges and bindings) is counted, and its facts marked unreported, under the part's own name, the
    read inside it named in the message. Anything but a FetchError is a bug, said in one line all the same."""
    if not isinstance(error, FetchError):
        return FetchError(endpoint, "internal", f"{type(error).__name__}: {error}")
    if error.endpoint != endpoint:
        return FetchError(endpoint, error.reason, str(error), error.status)
    return error


def partial(snapshot: Snapshot, errors: list[FetchError], missed: frozenset[str]) -> Snapshot:
    """`snapshot` as a partial poll: the endpoints in `errors` unread, the facts they give (`missed`)
    unreported, so that the rules needing them say "not evaluated" instead of judging an empty list."""
    if not errors:
        return snapshot
    return replace(snapshot, unreported=snapshot.unreported | missed,
                   unread=tuple(Unread(e.endpoint, e.reason, str(e)) for e in sorted(errors, key=lambda e: e.endpoint)))


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
