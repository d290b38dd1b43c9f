"""The exposition is written by our own text writer (half the time of prometheus_client's generate_latest
at scale, docs/benchmarks.md); here it is held to generate_latest byte for byte, on every collector over
snapshots recorded from real nodes and on generated families of every type the collectors make."""

from __future__ import annotations

import json
import math
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, InfoMetricFamily

from ackscope.diagnosis.rules import Context, diagnose
from ackscope.exporter.cardinality import Limits, shape
from ackscope.exporter.collectors.channels import ChannelCollector
from ackscope.exporter.collectors.connections import ConnectionCollector
from ackscope.exporter.collectors.consumers import ConsumerCollector
from ackscope.exporter.collectors.findings import FindingCollector
from ackscope.exporter.collectors.nodes import NodeCollector
from ackscope.exporter.collectors.overview import OverviewCollector
from ackscope.exporter.collectors.probes import ProbeCollector
from ackscope.exporter.collectors.queues import QueueCollector
from ackscope.exporter.collectors.self_metrics import SelfCollector
from ackscope.exporter.status import PollStatus
from ackscope.exporter.text_format import text
from ackscope.model.probes import Histogram, ProbeStats, TargetStats
from ackscope.sources.management import normalise as management
from ackscope.sources.prometheus_plugin import normalise as plugin

DATA = Path(__file__).parent / "data"


def by_library(collectors) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    for c in collectors:
        registry.register(c)
    return generate_latest(registry)


def recorded(statistics: bool):
    if statistics:
        raw = {p.stem: json.loads(p.read_text()) for p in (DATA / "rabbitmq-3.10.8").glob("*.json")}
        return management.snapshot(raw, 1000.0)
    folder = DATA / "rabbitmq-3.10.8-stats-off"
    raw = {name: json.loads((folder / f"{name}.json").read_text())
           for name in ("overview", "nodes", "vhosts", "connections", "queues")}
    base = management.snapshot({**raw, "channels": [], "consumers": []}, 1000.0)
    return plugin.snapshot(base, plugin.parse((folder / "detailed.prom").read_text(), "metrics/detailed"),
                           plugin.parse((folder / "metrics.prom").read_text(), "metrics"))


def every_collector(snapshot):
    shaped = shape(snapshot, Limits())
    status = PollStatus(up=True, last_duration=0.25, errors={("metrics", "timeout"): 2}, source="prometheus")
    probes = ProbeStats(1000.0, (TargetStats("classic", "classic", True, True, {"published": 12.0},
                                             {"confirm_latency_seconds": Histogram(
                                                 ((0.005, 3.0), (0.1, 11.0), (math.inf, 12.0)), 0.31)},
                                             {"consumer_unacked": 2.0}),))
    return [SelfCollector(status, shaped), OverviewCollector(snapshot), NodeCollector(snapshot),
            ConnectionCollector(snapshot), ChannelCollector(shaped), ConsumerCollector(shaped),
            QueueCollector(shaped), FindingCollector(diagnose(Context(snapshot))), ProbeCollector(probes)]


def test_writes_what_generate_latest_writes_for_every_collector_with_statistics_on():
    collectors = every_collector(recorded(statistics=True))
    assert text(collectors) == by_library(collectors)


def test_writes_what_generate_latest_writes_for_every_collector_from_the_plugin():
    collectors = every_collector(recorded(statistics=False))
    assert text(collectors) == by_library(collectors)


names = st.from_regex(r"[a-z][a-z0-9_]{0,10}", fullmatch=True)
label_values = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
values = st.floats(allow_nan=True, allow_infinity=True) | st.integers(-2**60, 2**60).map(float)


@st.composite
def families(draw):
    out = []
    for i, name in enumerate(draw(st.lists(names, min_size=1, max_size=4, unique=True))):
        labels = draw(st.lists(names, max_size=3, unique=True))
        doc = draw(st.text(max_size=20))
        kind = draw(st.sampled_from(("gauge", "counter", "info", "histogram")))
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


@settings(max_examples=300, deadline=None)
@given(families())
def test_writes_what_generate_latest_writes_for_any_family_of_the_types_we_use(fams):
    assert text([Fixed(fams)]) == by_library([Fixed(fams)])
