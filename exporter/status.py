"""The poller's own state, as an immutable value the exposition and the JSON API read."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType


@dataclass(frozen=True)
class PollStatus:
    up: bool = False
    last_duration: float | None = None  # seconds, of the last poll that completed (good or failed)
    last_attempt_at: float | None = None  # unix time
    last_success_at: float | None = None  # unix time
    last_error: str | None = None  # one line, for humans
    failing: frozenset[tuple[str, str]] = frozenset()  # (endpoint, reason) of the last poll's errors
    errors: Mapping[tuple[str, str], int] = field(default_factory=lambda: MappingProxyType({}))
    source: str | None = None  # the source the last good poll read: management, prometheus
