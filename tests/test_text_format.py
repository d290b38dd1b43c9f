"""The exposition is written by our own text writer (half the time of prometheus_client's generate_latest
at scale, docs/benchmarks.md); here it is held to generate_latest byte for byte, on every collector over
snapshots recorded from real nodes and on generated families of every type the collectors make."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
from generated_families import Fixed, families, written_by_library
from hypothesis import given, settings
from snapshot_builders import recorded_plugin_snapshot

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
from ackscope.exporter.text_format import LabelSets, text
from ackscope.model.probes import Histogram, ProbeStats, TargetStats
from ackscope.model.snapshot import sharing
from ackscope.sources.management import normalise as management

DATA = Path(__file__).parent / "data"


def recorded(statistics: bool):
    if statistics:
        raw = {p.stem: json.loads(p.read_text()) for p in (DATA / "rabbitmq-3.10.8").glob("*.json")}
        return management.snapshot(raw, 1000.0)
    return recorded_plugin_snapshot()


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
    assert text(collectors) == written_by_library(collectors)


def test_writes_what_generate_latest_writes_for_every_collector_from_the_plugin():
    collectors = every_collector(recorded(statistics=False))
    assert text(collectors) == written_by_library(collectors)


@pytest.mark.thorough  # 300 cases
@settings(max_examples=300, deadline=None)
@given(families())
def test_writes_what_generate_latest_writes_for_any_family_of_the_types_we_use(fams):
    assert text([Fixed(fams)]) == written_by_library([Fixed(fams)])


def test_the_next_render_reuses_unchanged_rows_label_sets_and_writes_changed_rows_anew():
    first = recorded(statistics=True)
    assert len(first.channels) > 1
    renamed = replace(first.channels[0], connection_name="renamed-by-the-client")
    second = sharing(replace(first, taken_at=first.taken_at + 10, channels=(renamed, *first.channels[1:])), first)
    assert second.channels[1] is first.channels[1]  # unchanged: the very record, so its label set is reused
    label_sets = LabelSets()
    text(every_collector(first), label_sets)
    collectors = every_collector(second)
    written = text(collectors, label_sets)
    assert written == written_by_library(collectors)
    assert b'connection_name="renamed-by-the-client"' in written
