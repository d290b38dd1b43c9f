"""Generated metric families of every type ackscope's collectors make (gauge, counter, info, histogram), with
label values that may hold anything a queue name can: the cases on which our own exposition reader and writer
are held to prometheus_client's."""

from __future__ import annotations

from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, InfoMetricFamily

from ackscope.exporter.collectors.families import RowFamily

names = st.from_regex(r"[a-z][a-z0-9_]{0,10}", fullmatch=True)
label_values = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
values = st.floats(allow_nan=True, allow_infinity=True) | st.integers(-2**60, 2**60).map(float)


@st.composite
def families(draw):
    out = []
    for i, name in enumerate(draw(st.lists(names, min_size=1, max_size=4, unique=True))):
        labels = draw(st.lists(names, max_size=3, unique=True))
        doc = draw(st.text(max_size=20))
        kind = draw(st.sampled_from(("gauge", "counter", "info", "histogram", "rows")))
        name = f"{name}_{i}"
        if kind == "info":
            family = InfoMetricFamily(name, doc, labels=labels)
            for _ in range(draw(st.integers(0, 3))):
                family.add_metric([draw(label_values) for _ in labels], {"version": draw(label_values)})
        elif kind == "histogram":
            family = HistogramMetricFamily(name, doc, labels=labels)
            for _ in range(draw(st.integers(0, 3))):
                family.add_metric([draw(label_values) for _ in labels],
                                  [("0.5", draw(values)), ("+Inf", draw(values))], draw(values))
        elif kind == "rows":  # ours: a gauge or counter kept as the rows it comes from
            family = RowFamily(name, doc, draw(st.sampled_from(("gauge", "counter"))), labels)
            for _ in range(draw(st.integers(0, 2))):
                rows = [(tuple(draw(label_values) for _ in labels), draw(values | st.none()))
                        for _ in range(draw(st.integers(0, 3)))]
                family.add_rows(rows, lambda row: row[0], lambda row: row[1])
        else:
            family = (GaugeMetricFamily if kind == "gauge" else CounterMetricFamily)(name, doc, labels=labels)
            for _ in range(draw(st.integers(0, 4))):
                family.add_metric([draw(label_values) for _ in labels], draw(values))
        out.append(family)
    return out


class Fixed:
    def __init__(self, families):
        self.families = families

    def collect(self):
        return self.families


def written_by_library(collectors) -> bytes:
    """What prometheus_client's generate_latest writes for `collectors`, in order."""
    registry = CollectorRegistry(auto_describe=False)
    for c in collectors:
        registry.register(c)
    return generate_latest(registry)
