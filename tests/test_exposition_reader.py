"""The Prometheus plugin's answers are read by our own sample reader (faster than prometheus_client's parser
at scale, docs/benchmarks.md); here it is held to prometheus_client's parser, sample for sample, on
generated expositions and on one recorded from a real node, and refuses what is not an exposition."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from generated_families import Fixed, families, written_by_library
from hypothesis import given, settings
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


@pytest.mark.thorough  # 300 cases
@settings(max_examples=300, deadline=None)
@given(families())
def test_reads_what_prometheus_clients_parser_reads_on_any_exposition_it_writes(fams):
    text = written_by_library([Fixed(fams)]).decode()
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
