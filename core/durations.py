"""The one duration grammar of every option (--window, the pipeline's --window and --since), and the one
way a duration is shown to a human."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

_DURATION = re.compile(r"\s*([0-9]*\.?[0-9]+)\s*(ms|s|m|h|d)?\s*")
_UNIT = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}


def parse_duration(v: Any) -> float:
    """'500ms', '5s', '1m', '6h', '2d' or a plain number of seconds → seconds (above 0)."""
    m = _DURATION.fullmatch(str(v))
    seconds = float(m.group(1)) * _UNIT[m.group(2)] if m else 0.0
    if not m or seconds <= 0:
        raise ValueError(f"must be a duration such as 500ms, 5s, 1m, 6h or 2d, not {v!r}")
    return seconds


def point_in_time(v: Any, now: datetime | None = None) -> datetime:
    """An ISO 8601 date or time (UTC unless it says otherwise), or a duration with a unit meaning that long ago."""
    text = str(v).strip()
    m = _DURATION.fullmatch(text)
    if m and m.group(2):
        return (now or datetime.now(UTC)) - timedelta(seconds=parse_duration(text))
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"expected a time such as 2026-11-22, 2026-11-22T03:00 or 6h (ago), not {v!r}") from None
    return t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)


def describe(seconds: float) -> str:
    """3 s, 4 min, 2 h 5 min, 3 d 4 h."""
    s = int(max(0, seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"
