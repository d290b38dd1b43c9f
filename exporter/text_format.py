"""The Prometheus text format (0.0.4) of our collectors' families, byte for byte what prometheus_client's
generate_latest writes for them, in half its time.

generate_latest checks and escapes every label name of every sample, for names that may be UTF-8; ours
are fixed identifiers. At 5,000 queues and 600 channels (38,000 samples) it took 344 ms of each poll's
render, this 166 ms (docs/benchmarks.md); the tests hold the two to the same bytes. It writes the family
types the collectors make (gauge, counter, info, histogram), never OpenMetrics-only samples (_created).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator

from prometheus_client.utils import floatToGoString

from .collectors.families import RowFamily

# A family's type as the text format names it, and the suffix its samples carry beyond its name.
_TYPE = {"counter": ("counter", "_total"), "info": ("gauge", "_info"), "gauge": ("gauge", ""),
         "histogram": ("histogram", "")}
_ZEROS = (floatToGoString(0.0), floatToGoString(-0.0))


def _escape(value: str) -> str:
    if "\\" in value or "\n" in value or '"' in value:
        return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return value


class LabelSets:
    """Each row's label set as the last render wrote it, for the next: a record that did not change between
    two polls is the same object in both (model.snapshot.sharing), so its label set is not written again. Kept
    by whoever renders poll after poll; it holds only the rows of the last render."""

    def __init__(self) -> None:
        self.written: dict[tuple, dict[int, tuple[object, str]]] = {}


def families(collectors: Iterable, label_sets: LabelSets | None = None) -> Iterator[bytes]:
    """Every family of every collector's collect(), in order, each as its exposition text."""
    # An object's label set is written once and reused by each of its families (a channel has 14), and so is
    # each distinct value (most are small counts). A RowFamily's rows are looked up by identity, with no
    # sample made, and an unchanged row's label set comes from the last render: at 5,000 queues and 5,000
    # channels the render took 240 ms a poll through samples, 66 ms so (docs/benchmarks.md).
    labelled: dict[tuple, str] = {}
    # (label names, how a row's label values are read): {id(row): (row, label set)}; the row is kept so that
    # its id is not another's while the entry lives.
    earlier = label_sets.written if label_sets is not None else {}
    by_row: dict[tuple, dict[int, tuple[object, str]]] = {}
    written: dict[float, str] = {}

    def value_text(v: float) -> str:
        if v:
            return written.get(v) or written.setdefault(v, floatToGoString(v))
        return _ZEROS[math.copysign(1.0, v) < 0]  # 0.0 and -0.0 are one key to a dict, not one text

    for collector in collectors:
        for family in collector.collect():
            kind, suffix = _TYPE[family.type]
            name = family.name + suffix
            doc = family.documentation.replace("\\", r"\\").replace("\n", r"\n")
            lines = [f"# HELP {name} {doc}\n# TYPE {name} {kind}\n"]
            if isinstance(family, RowFamily):
                for pairs, labelvalues in family.parts:
                    if not family.labelnames:
                        lines += [f"{name} {value_text(v)}\n" for _, v in pairs]
                        continue
                    key = (family.labelnames, labelvalues)
                    now, before = by_row.setdefault(key, {}), earlier.get(key, {})
                    for row, v in pairs:
                        entry = now.get(id(row))
                        if entry is None:
                            entry = before.get(id(row))
                            if entry is None or entry[0] is not row:
                                entry = (row, _label_set(family.labelnames, labelvalues(row)))
                            now[id(row)] = entry
                        lines.append(f"{name}{{{entry[1]}}} {value_text(v)}\n")
            else:
                for s in family.samples:
                    if s.labels:
                        key = tuple(s.labels.items())
                        labels = labelled.get(key)
                        if labels is None:
                            labels = labelled[key] = _label_set(s.labels.keys(), s.labels.values())
                        lines.append(f"{s.name}{{{labels}}} {value_text(s.value)}\n")
                    else:
                        lines.append(f"{s.name} {value_text(s.value)}\n")
            # Joined and encoded family by family: one join of a large broker's whole text holds the GIL for
            # tens of milliseconds, a scrape's worth.
            yield "".join(lines).encode()
    if label_sets is not None:
        label_sets.written = by_row


def _label_set(names: Iterable[str], values: Iterable[str]) -> str:
    return ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(zip(names, values)))


def text(collectors: Iterable, label_sets: LabelSets | None = None) -> bytes:
    """Every family of every collector's collect(), in order, as exposition text."""
    return b"".join(families(collectors, label_sets))
