"""The Prometheus plugin's answers are read by our own sample reader (faster than prometheus_client's parser
at scale, docs/benchmarks.md); here it is held to prometheus_client's parser, sample for sample, on
generated expositions and on one recorded from a real node, and refuses what is not an exposition."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.parser import text_string_to_metric_families

from ackscope.sources.prometheus_plugin.exposition import MalformedExposition, read_samples

DATA = Path(__file__).parent / "data" / "rabbitmq-3.10.8-stats-off"


def by_library(text: str) -> dict:
    out: dict = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if math.isfinite(s.value):
                out.setdefault(s.name, []).append((s.labels, s.value))
    return out


names = st.from_regex(r"[a-z_][a-z0-9_]{0,12}", fullmatch=True)
label_values = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)  # queue names may hold anything
values = st.floats(allow_nan=True, allow_infinity=True) | st.integers(-2**53, 2**53).map(float)


@st.composite
def families(draw):
    out = []
    for name in draw(st.lists(names, min_size=1, max_size=4, unique=True)):
        labels = draw(st.lists(names.filter(lambda n: not n.startswith("__")), max_size=3, unique=True))
        kind = draw(st.sampled_from((GaugeMetricFamily, CounterMetricFamily)))
        family = kind(name, "help with \\ and\nnewline", labels=labels)
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
def test_reads_what_prometheus_clients_parser_reads_on_any_exposition_it_writes(fams):
    registry = CollectorRegistry(auto_describe=False)
    # Two families of one name would be refused by the registry; the generator draws unique names.
    registry.register(Fixed(fams))
    text = generate_latest(registry).decode()
    assert dict(read_samples(text)) == by_library(text)


def test_reads_a_real_nodes_detailed_answer_as_prometheus_client_does():
    text = (DATA / "detailed.prom").read_text()
    assert dict(read_samples(text)) == by_library(text)


def test_reads_only_the_names_asked_for():
    text = (DATA / "detailed.prom").read_text()
    wanted = {"rabbitmq_detailed_channel_messages_unacked"}
    assert set(read_samples(text, wanted)) == wanted


@pytest.mark.parametrize("text, said", [
    ("<html><body>502 Bad Gateway</body></html>\n", "line 1 is not a sample"),
    ('# TYPE x gauge\nx{queue="invoi', "line 2 is not a sample"),
    ('x{queue="a" vhost="/"} 1\n', "line 1 has malformed labels"),
    ("x 12abc\n", "line 1 has no number"),
    ("\x00\x01garbage\n", "line 1 is not a sample"),
])
def test_refuses_what_is_not_an_exposition_with_the_line_it_stopped_at(text, said):
    with pytest.raises(MalformedExposition, match=said):
        read_samples(text)
