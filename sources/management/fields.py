"""A field of the management API's JSON as the model holds it, or None (or {}) when the answer has no such
value: what normalise.py, links.py and streams.py read every field through."""

from __future__ import annotations

import math
from typing import Any


def is_number(v: Any) -> bool:
    # bool is an int to Python, and json reads Infinity and NaN: none of them is a count.
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def as_int(v: Any) -> int | None:
    """A finite JSON number, as an int."""
    return int(v) if is_number(v) else None


def as_float(v: Any) -> float | None:
    return float(v) if is_number(v) else None


def as_bool(v: Any) -> bool | None:
    return v if isinstance(v, bool) else None


def as_str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def as_names(v: Any) -> tuple[str, ...] | None:
    """A list of node names, sorted; None when it is not a list of strings (a queue that is not replicated)."""
    return tuple(sorted(v)) if isinstance(v, list) and all(isinstance(n, str) for n in v) else None


def as_dict(v: Any) -> dict:
    # The API renders an empty Erlang proplist as [], where a full one is an object.
    return v if isinstance(v, dict) else {}
