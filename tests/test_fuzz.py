"""Arbitrary answers, from wrong types to NaN, huge numbers, control characters and duplicated objects, through
everything a poll's answer goes through: the management normaliser, the rules, the exposition and the JSON
documents. Nothing may escape but the normaliser's own MalformedResponse (which the poller counts); what comes
out is valid exposition text and valid JSON; and nothing is invented: a count the answer did not give as a
number is no count. And Parquet files cut short or with bytes flipped: the pipeline's footer check gives a
reason or the rows, the dashboard's report reader a table or one problem line; neither raises."""

from __future__ import annotations

import gzip
import json
import math
import os
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from ackscope.dashboard.reports import load as load_reports
from ackscope.diagnosis.rules import Context, diagnose
from ackscope.exporter.cardinality import Limits
from ackscope.exporter.exposition import render
from ackscope.exporter.status import PollStatus
from ackscope.model.schemas import EVENTS, REPORTS
from ackscope.pipeline.inputs import check_footer, physical_types
from ackscope.sources.management import normalise
from ackscope.sources.management.normalise import COLUMNS, MalformedResponse
from ackscope.sources.prometheus_plugin.exposition import MalformedExposition, read_samples

# Service-free but slow (see the `thorough` marker in pyproject.toml): CI runs them, the fast loop does not.
pytestmark = pytest.mark.thorough

NAMES = st.text(st.characters(min_codepoint=0, blacklist_categories=("Cs",)), max_size=40)
SCALARS = (st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=True, allow_infinity=True)
           | NAMES)
ANY_JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(NAMES, inner, max_size=3),
                        max_leaves=8)
# Mostly numbers and names where the API puts them, so the rules and the families have something to work on.
PLAUSIBLE = st.integers(0, 10**6) | st.sampled_from(["/", "rabbit@a", "classic", "quorum", "running", "flow"])
VALUE = PLAUSIBLE | ANY_JSON


@st.composite
def api_object(draw, endpoint: str) -> dict:
    """An object of `endpoint` with some of its real keys (dotted ones nested) and values of any type."""
    obj: dict = {}
    for key in draw(st.lists(st.sampled_from(COLUMNS[endpoint]), max_size=len(COLUMNS[endpoint]), unique=True)):
        *path, last = key.split(".")
        at = obj
        for part in path:
            at = at.setdefault(part, {}) if isinstance(at.get(part, {}), dict) else {}
        at[last] = draw(VALUE)
    for key, v in draw(st.dictionaries(NAMES, ANY_JSON, max_size=2)).items():
        obj.setdefault(key, v)
    return obj


@st.composite
def poll_answer(draw) -> dict:
    raw: dict = {"overview": draw(api_object("overview"))}
    for endpoint in ("nodes", "vhosts", "connections", "channels", "consumers", "queues"):
        objects = draw(st.lists(api_object(endpoint), max_size=4))
        if objects and draw(st.booleans()):
            objects.append(dict(objects[0]))  # the same object listed twice
        raw[endpoint] = objects if draw(st.integers(0, 19)) else draw(ANY_JSON)  # now and then not a list
    return raw


# A few hundred cases each in the suite; bench/fuzz.py runs 10,000 (ACKSCOPE_FUZZ_EXAMPLES).
EXAMPLES = int(os.environ.get("ACKSCOPE_FUZZ_EXAMPLES", "300"))


def _finite_or_none(v) -> bool:
    return v is None or (isinstance(v, int | float) and math.isfinite(v))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(poll_answer())
def test_any_answer_is_normalised_or_refused_and_every_output_stays_valid(raw):
    try:
        snapshot = normalise.snapshot(raw, 1_700_000_000.0)
    except MalformedResponse:
        return  # refused whole, and counted by the poller as a malformed answer
    for q in snapshot.queues:  # nothing invented: counts are numbers the answer gave, or unknown
        assert all(_finite_or_none(v) for v in (q.messages_ready, q.messages_unacked, q.consumers))
    for c in snapshot.channels:
        assert all(_finite_or_none(v) for v in (c.prefetch_count, c.messages_unacked, c.messages_unconfirmed))
    diagnosis = diagnose(Context(snapshot, None))
    exposition = render(snapshot, PollStatus(up=True, last_success_at=1.0, source="management"), Limits(),
                        diagnosis)
    text = gzip.decompress(exposition.metrics_gz).decode()
    assert list(text_string_to_metric_families(text))
    json.loads(gzip.decompress(exposition.snapshot.gz()), parse_constant=_refuse)
    json.loads(gzip.decompress(exposition.findings.gz()), parse_constant=_refuse)


def _refuse(constant: str):
    raise AssertionError(f"{constant} in a JSON document: not JSON a browser parses")


def _valid_events_file() -> bytes:
    rows = {f.name: [] for f in EVENTS}
    for seq in range(200):
        for name, v in (("run_id", "r1"), ("probe", "quorum"), ("queue_type", "quorum"), ("persistent", True),
                        ("seq", seq), ("kind", "confirmed"), ("ts", 1_700_000_000_000_000 + seq),
                        ("latency_s", 0.001 * seq), ("batch_size", 1), ("redelivered", False)):
            rows[name].append(v)
    for name, column in rows.items():
        if not column:
            column.extend([None] * 200)
    sink = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pydict(rows, schema=EVENTS), sink)
    return sink.getvalue().to_pybytes()


VALID = _valid_events_file()


@settings(max_examples=EXAMPLES, deadline=None)
@given(cut=st.integers(0, len(VALID)), flips=st.lists(st.tuples(st.integers(0, len(VALID) - 1), st.integers(1, 255)),
                                                      max_size=6))
def test_a_cut_or_corrupted_parquet_file_is_a_reason_or_its_rows_never_an_exception(cut, flips):
    data = bytearray(VALID[:cut])
    for at, mask in flips:
        if at < len(data):
            data[at] ^= mask
    with tempfile.TemporaryDirectory() as root:
        report = Path(root) / REPORTS[0]
        report.mkdir()
        path = report / "part-0.parquet"
        path.write_bytes(bytes(data))
        why, rows, _ = check_footer((path.as_uri(), len(data), physical_types(EVENTS), frozenset(), "ts"))
        if why is None:
            assert rows == 200  # a footer that reads says what the file holds
        else:
            assert rows == 0 and "\n" not in why
        loaded = load_reports(root)  # the dashboard's History page: a table, or one problem line
        assert REPORTS[0] in loaded.tables or any(REPORTS[0] in p and "\n" not in p for p in loaded.problems)


EXPOSITION_LINES = st.lists(st.sampled_from([
    "# HELP rabbitmq_queue_messages_ready Messages ready", "# TYPE rabbitmq_queue_messages_ready gauge",
    'rabbitmq_queue_messages_ready{vhost="/",queue="q"} 3', 'rabbitmq_queue_messages_ready{vhost="/",queue="q"} NaN',
    "rabbitmq_identity_info 1", "# EOF", "", "<html><body>502 Bad Gateway</body></html>",
]) | NAMES, max_size=8).map("\n".join)


@settings(max_examples=EXAMPLES, deadline=None)
@given(EXPOSITION_LINES)
def test_any_text_from_the_plugin_is_read_or_refused_as_not_an_exposition(text):
    try:
        samples = read_samples(text)
    except MalformedExposition as e:
        assert "\n" not in str(e)  # one line, for the poll's error
        return
    for name, series in dict(samples).items():
        assert name and all(isinstance(labels, dict) and isinstance(v, float) for labels, v in series)
