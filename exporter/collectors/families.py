"""Helpers that turn rows of a snapshot into metric families, leaving out values the broker did not report."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from prometheus_client.core import Metric
from prometheus_client.samples import Sample

T = TypeVar("T")
Value = Callable[[T], "float | int | bool | None"]
LabelValues = Callable[[T], Sequence[str]]


class RowFamily(Metric):
    """A gauge or counter whose samples are kept as the rows they come from: (row, value) pairs with the
    function that reads a row's label values. Our text writer writes a row's label set once for all the
    families it is in; a sample per row, with its labels dict, is made only for whoever reads `samples`
    (prometheus_client's generate_latest, the tests). At 5,000 queues and 5,000 channels the samples alone took
    a third of each poll's render (docs/benchmarks.md)."""

    def __init__(self, name: str, doc: str, kind: str, labels: Sequence[str]):
        if kind == "counter" and name.endswith("_total"):  # as CounterMetricFamily names it
            name = name[:-6]
        super().__init__(name, doc, kind)
        self.labelnames = tuple(labels)
        self.parts: list[tuple[list[tuple[object, float]], LabelValues]] = []

    def add_rows(self, rows: Iterable[T], labelvalues: LabelValues, value: Value) -> None:
        # A value the broker did not report is no series rather than a made-up zero.
        self.parts.append(([(row, float(v)) for row in rows if (v := value(row)) is not None], labelvalues))

    @property
    def sample_name(self) -> str:
        return self.name + "_total" if self.type == "counter" else self.name

    @property
    def samples(self) -> list[Sample]:
        return [Sample(self.sample_name, dict(zip(self.labelnames, labelvalues(row))), v, None, None)
                for pairs, labelvalues in self.parts for row, v in pairs]

    @samples.setter
    def samples(self, value: list) -> None:
        # Metric.__init__ starts every family with no samples; a RowFamily's samples are its rows.
        if value:
            raise TypeError("a RowFamily's samples are its rows: use add_rows")


def gauge(name: str, doc: str, labels: Sequence[str], rows: Iterable[T], labelvalues: LabelValues,
          value: Value) -> RowFamily:
    family = RowFamily(name, doc, "gauge", labels)
    family.add_rows(rows, labelvalues, value)
    return family


def counter(name: str, doc: str, labels: Sequence[str], rows: Iterable[T], labelvalues: LabelValues,
            value: Value) -> RowFamily:
    family = RowFamily(name, doc, "counter", labels)
    family.add_rows(rows, labelvalues, value)
    return family


def flag(v: bool | None) -> int | None:
    return None if v is None else int(v)


def with_folded(prefix: str, labels: Sequence[str], defs, objects, labelvalues, folded, folded_labelvalues):
    """Families over kept objects, each followed by the per-vhost totals of the folded ones.

    `defs` rows are (name, doc, gauge or counter, value of an object, value of a Folded total).
    """
    for name, doc, kind, value, folded_value in defs:
        family = kind(prefix + name, doc, labels, objects, labelvalues, value)
        family.add_rows(folded, folded_labelvalues, folded_value)
        yield family
