"""Helpers that turn rows of a snapshot into metric families, leaving out values the broker did not report."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

T = TypeVar("T")
Value = Callable[[T], "float | int | bool | None"]


def gauge(name: str, doc: str, labels: Sequence[str], rows: Iterable[T], labelvalues: Callable[[T], Sequence[str]],
          value: Value) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=labels)
    _fill(family, rows, labelvalues, value)
    return family


def counter(name: str, doc: str, labels: Sequence[str], rows: Iterable[T],
            labelvalues: Callable[[T], Sequence[str]], value: Value) -> CounterMetricFamily:
    family = CounterMetricFamily(name, doc, labels=labels)
    _fill(family, rows, labelvalues, value)
    return family


def _fill(family, rows, labelvalues, value) -> None:
    for row in rows:
        v = value(row)
        if v is not None:  # not reported by this broker: no series rather than a made-up zero
            family.add_metric(list(labelvalues(row)), float(v))


def flag(v: bool | None) -> int | None:
    return None if v is None else int(v)


def with_folded(prefix: str, labels: Sequence[str], defs, objects, labelvalues, folded, folded_labelvalues):
    """Families over kept objects, each followed by the per-vhost totals of the folded ones.

    `defs` rows are (name, doc, gauge or counter, value of an object, value of a Folded total).
    """
    for name, doc, kind, value, folded_value in defs:
        family = kind(prefix + name, doc, labels, objects, labelvalues, value)
        for f in folded:
            family.add_metric(list(folded_labelvalues(f)), float(folded_value(f)))
        yield family
