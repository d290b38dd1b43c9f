"""A finding's evidence as a person reads it: a small table of (label, value) rows, the key in words and the
value with its unit, rounded to what matters. The one implementation the dashboard's cards and tables and
`diagnose`'s text report share; the JSON (/api/findings, `diagnose --format json`) keeps the evidence as the
rules built it."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .durations import describe

Row = tuple[str, str]

# The unit a key's last words name (a rule's evidence says `window_seconds`, `timeout_ms`, `oldest_message_age_s`,
# `publish_rate`, `per_minute`, `mem_used_bytes`), and the words after a unit that belong to the value, not the label.
_UNIT_WORDS = {"seconds": "s", "s": "s", "ms": "ms", "bytes": "bytes", "rate": "rate", "minute": "minute",
               "share": "share"}
_AFTER_THE_VALUE = {"ago"}
# Keys whose names do not say their unit: the node's memory and disk (bytes, as /api/nodes reports them), the
# publish rate a channel would reach confirming one message at a time (messages a second).
_UNITS = {"mem_used": "bytes", "mem_limit": "bytes", "disk_free": "bytes", "disk_free_limit": "bytes",
          "one_at_a_time_ceiling": "rate"}
# Names the words of a key would spell wrong.
_LABELS = {"rabbitmq": "RabbitMQ", "mem_used": "memory used", "mem_limit": "memory limit", "doc_url": "documentation",
           "uri": "URI", "source_uri": "source URI", "destination_uri": "destination URI", "ha_keys": "ha-* keys",
           "get_empty": "get-empty", "seconds": "over", "per_minute": "rate"}
# Words RabbitMQ spells with a hyphen.
_PHRASES = {"get empty": "get-empty", "auto delete": "auto-delete", "dead letter": "dead-letter",
            "auto ack": "auto-ack"}
# An empty name: in a channel's exchanges, the default exchange it published to; elsewhere, shown as empty.
_EXCHANGES = {"exchange", "exchanges"}
# A value that ends in an inference, "(inferred: …)" or "(an inference: …)": the inference goes on a line of its own.
_INFERENCE = re.compile(r"\((?:inferred|an inference): ")
# A list or mapping this short (each item, all together) reads on one line; longer, one line each.
_ONE_LINE_ITEM, _ONE_LINE = 32, 80


def rows(evidence: Mapping[str, Any]) -> list[Row]:
    """A finding's evidence dict → [(label, value), …] in the rules' order: the key in words without its unit
    (`window_seconds` → "window"), the value with it ("95 s"); durations in s (ms below a second, at most one
    decimal; minutes and hours beside them from 2 min), rates "10.5 a second" (a minute below 0.1 a second),
    shares as percentages, bytes in KiB/MiB/GiB, counts with thousands separators, other numbers to 3
    significant figures, booleans yes/no. A None value is left out (the rule had nothing to say). A list or
    mapping is a line per item (its first row labelled, the rest ""), on one line where all are short; a dict in
    a list (a queue at stake) is one line in words. An inference that ends a value, "… (inferred: why)", is a row
    of its own labelled "inferred". Never raises on a shape it does not know: it shows it as text."""
    out: list[Row] = []
    for key, value in evidence.items():
        if value is None:
            continue
        label, unit, after = _label(str(key))
        for i, line in enumerate(_lines(str(key), value, unit, after)):
            out.extend(_inference_split(label if i == 0 else "", line))
    return out


def text(evidence: Mapping[str, Any], between: str = " · ") -> str:
    """The rows on one line, "label: value" each, for a table's cell."""
    return between.join(f"{label}: {value}" if label else value for label, value in rows(evidence))


def _label(key: str) -> tuple[str, str | None, str]:
    """(the key in words without its unit, the unit, words that follow the value: "ago")."""
    if key in _LABELS or key in _UNITS:
        return _words(key), _UNITS.get(key) or _unit_of(key.split("_"))[0], ""
    words = key.split("_")
    unit, at = _unit_of(words)
    if unit is None:
        return _words(key), None, ""
    rest = words[at + 1:]
    after = " ".join(w for w in rest if w in _AFTER_THE_VALUE)
    kept = words[:at] + [w for w in rest if w not in _AFTER_THE_VALUE]
    if unit == "minute" and kept[-1:] == ["per"]:
        kept = kept[:-1]
    if unit in ("rate", "share"):  # the word is the label's: a publish rate, a waiting share
        kept = words[:at + 1] + [w for w in rest if w not in _AFTER_THE_VALUE]
    return _phrased(" ".join(kept)) or "rate", unit, after


def _unit_of(words: list[str]) -> tuple[str | None, int]:
    """The unit the key's words name and where, the last such word; "s" only as the last word (`age_s`)."""
    for i in range(len(words) - 1, -1, -1):
        w = words[i]
        if w in _UNIT_WORDS and (w != "s" or i == len(words) - 1) and (w != "minute" or words[i - 1:i] == ["per"]):
            return _UNIT_WORDS[w], i
    return None, -1


def _lines(key: str, value: Any, unit: str | None, after: str) -> list[str]:
    """The value as one line or several (a list's items, a mapping's entries)."""
    if isinstance(value, Mapping):
        items = [f"{k}: {_value(k, v, None)}" for k, v in value.items() if v is not None]
        return _one_or_many(items) or ["none"]
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [_described(v) if isinstance(v, Mapping) else _value(key, v, unit) for v in value if v is not None]
        if any(isinstance(v, Mapping) for v in value):
            return items or ["none"]
        return _one_or_many(items) or ["none"]
    shown = _value(key, value, unit)
    return [f"{shown} {after}" if after else shown]


def _one_or_many(items: list[str]) -> list[str]:
    joined = ", ".join(items)
    if all(len(i) <= _ONE_LINE_ITEM for i in items) and len(joined) <= _ONE_LINE:
        return [joined] if items else []
    return items


def _described(d: Mapping[str, Any]) -> str:
    """A dict in a list (stakes' queue: {'queue': …, 'durable': True, 'persistent': '…'}) as one line: its name,
    then each fact in words; a True flag is its word ("durable"), a False one "not durable"."""
    name_key = next((k for k in ("queue", "name") if k in d), None)
    parts = []
    for k, v in d.items():
        if k == name_key or v is None:
            continue
        word = _words(str(k))
        parts.append(word if v is True else f"not {word}" if v is False else f"{word}: {_value(k, v, None)}")
    head = str(d[name_key]) if name_key else ""
    return f"{head} — {', '.join(parts)}" if head and parts else head or ", ".join(parts)


def _value(key: Any, v: Any, unit: str | None) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, str):
        return ("the default exchange" if key in _EXCHANGES else "(empty)") if v == "" else v
    if not isinstance(v, (int, float)):
        return str(v)
    if unit == "s":
        return duration(v)
    if unit == "ms":
        return duration(v / 1000)
    if unit == "rate":
        return rate(v)
    if unit == "minute":
        return f"{number(v)} a minute"
    if unit == "share":
        return f"{number(v * 100)}%"
    if unit == "bytes":
        return size(v)
    return number(v)


def number(v: float) -> str:
    """A count exactly, with thousands separators; any other number to 3 significant figures, whole from 100."""
    if isinstance(v, int) or float(v).is_integer() and abs(v) >= 100:
        return f"{int(v):,}"
    if abs(v) >= 100:
        return f"{round(v):,}"
    if v == 0:
        return "0"
    shown = f"{v:.3g}"
    return shown if "e" not in shown else f"{v:.2e}"


def duration(seconds: float) -> str:
    """Seconds for a person: "1.8 ms" below a second (at most one decimal), "57.5 s", "95 s", and from 2 minutes
    the minutes or hours beside them: "1,800 s (30 min)"."""
    if seconds == 0:
        return "0 s"
    if abs(seconds) < 1:
        ms = round(seconds * 1000, 1)
        return f"{ms:g} ms"
    shown = f"{number(float(seconds))} s"
    return f"{shown} ({describe(seconds)})" if seconds >= 120 else shown


def rate(per_second: float) -> str:
    """Messages (or events) a second: "10.5 a second"; below 0.1 a second, a minute: "0.18 a minute"."""
    if per_second and abs(per_second) < 0.1:
        return f"{number(per_second * 60)} a minute"
    return f"{number(float(per_second))} a second"


def size(n: float) -> str:
    """Bytes in IEC units, 3 significant figures: "954 MiB"."""
    units, i = ("B", "KiB", "MiB", "GiB", "TiB"), 0
    while abs(n) >= 1024 and i < len(units) - 1:
        n, i = n / 1024, i + 1
    return f"{number(n)} {units[i]}"


def _words(key: str) -> str:
    return _LABELS.get(key) or _phrased(key.replace("_", " "))


def _phrased(words: str) -> str:
    for plain, spelt in _PHRASES.items():
        words = words.replace(plain, spelt)
    return words


def _inference_split(label: str, line: str) -> list[Row]:
    """A line that ends "… (inferred: why)" as two rows: what, and the inference on a line of its own."""
    for m in reversed(list(_INFERENCE.finditer(line))):
        start = m.start()
        if _closes_at_end(line, start) and line[:start].strip():
            head = line[:start].rstrip()
            return [(label, head), ("inferred", line[m.end():-1])]
    return [(label, line)]


def _closes_at_end(line: str, start: int) -> bool:
    """Whether the parenthesis opened at `start` closes at the line's last character."""
    depth = 0
    for i in range(start, len(line)):
        depth += {"(": 1, ")": -1}.get(line[i], 0)
        if depth == 0:
            return i == len(line) - 1
    return False
