"""What the node's log says where deliveries break, read from real nodes' logs: RabbitMQ 3.10.8, 4.0.5 and 4.3.6,
each in its plain and its JSON format (tests/data/record_broker_log.py recorded them), and from lines no release
writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ackscope.model.events import (
    CHANNEL_ERROR,
    CONNECTION_CLOSED,
    CONNECTION_ERROR,
    CONNECTION_OPENED,
    CONSUMER_TIMEOUT,
)
from ackscope.sources.broker_log import lines
from ackscope.sources.broker_log.lines import MAX_RECORD_LINES, MAX_WAITING, LogReader

DATA = Path(__file__).parent / "data"
RELEASES = ("3.10.8", "4.0.5", "4.3.6")
LOGS = [(release, form) for release in RELEASES for form in ("plain", "json")]


def _read(release: str, form: str):
    reader = LogReader()
    lines = (DATA / f"broker-log-{release}" / f"{form}.log").read_text().splitlines()
    return reader, reader.feed(lines) + reader.flush()


def _what(events, kind):
    return [(e.connection_name, e.channel, e.operation, e.reason, e.text) for e in events if e.kind == kind]


@pytest.mark.parametrize(("release", "form"), LOGS)
def test_each_channel_the_broker_closed_is_named_with_its_connection_operation_and_reason(release, form):
    reader, events = _read(release, form)
    assert reader.counts.unknown == 0
    errors = [e for e in events if e.kind == CHANNEL_ERROR]
    assert [(e.channel, e.operation, e.reason) for e in errors] == [
        (1, "basic.ack", "precondition_failed"),  # the double ack
        (2, "basic.ack", "precondition_failed"),  # the ack on another channel
        (2, "queue.declare", "precondition_failed"),  # a redeclare with other arguments
        (2, "basic.consume", "not_found"),
        (2, "queue.declare", "access_refused"),
        (2, "basic.consume", "resource_locked"),
    ]
    assert errors[0].text == "unknown delivery tag 1"
    assert errors[2].text.startswith("inequivalent arg 'x-max-length' for queue 'orders' in vhost '/'")
    # The connection is named as /api/connections names it, and the client's own name is where the log gave it.
    opened = {e.connection: e.connection_name for e in events if e.kind == CONNECTION_OPENED}
    assert {opened[e.connection] for e in errors} == {"orders-worker"}
    assert {(e.vhost, e.user) for e in errors} == {("/", "guest")}


@pytest.mark.parametrize(("release", "form"), LOGS)
def test_connections_opened_closed_dropped_and_refused_are_told_apart(release, form):
    _, events = _read(release, form)
    publishers = [f"per-message-publisher-{i}" for i in range(5)]
    opened = [e.connection_name for e in events if e.kind == CONNECTION_OPENED]
    assert opened == ["orders-worker", "exclusive-owner", *publishers, "dropped-client", "stalled-worker"]
    closed = {e.connection_name: e.reason for e in events if e.kind == CONNECTION_CLOSED}
    assert closed == {"exclusive-owner": "closed", "orders-worker": "closed", **dict.fromkeys(publishers, "closed"),
                      "dropped-client": "dropped", "stalled-worker": "closed"}
    dropped = next(e for e in events if e.connection_name == "dropped-client" and e.kind == CONNECTION_CLOSED)
    assert dropped.text == "client unexpectedly closed TCP connection"
    refused = [e for e in events if e.kind == CONNECTION_ERROR]
    assert [(e.reason, e.connection_name, e.vhost) for e in refused] == [("frame_error", None, None)]
    assert refused[0].text.startswith("type 1, all octets = <<0,10,0,11>>")


def test_a_consumer_timeout_on_4_0_names_the_consumer_queue_delivery_and_timeout():
    for form in ("plain", "json"):
        _, events = _read("4.0.5", form)
        timeouts = [e for e in events if e.kind == CONSUMER_TIMEOUT]
        assert [(e.connection_name, e.channel, e.queue, e.consumer_tag, e.delivery_tag, e.timeout_ms, e.reason)
                for e in timeouts] == [
            (None, 2, "stalled-classic", "stalled-classic-consumer", 1, 15000, "precondition_failed"),
            (None, 3, "stalled-quorum", "stalled-quorum-consumer", 1, 15000, "precondition_failed")]
        assert len({e.connection for e in timeouts}) == 1
        assert not [e for e in events if e.kind == CHANNEL_ERROR and e.channel in (2, 3) and e.operation is None]


def test_a_consumer_timeout_on_3_10_names_the_channel_and_timeout_not_the_queue_or_the_tag():
    for form in ("plain", "json"):
        _, events = _read("3.10.8", form)
        timeouts = [e for e in events if e.kind == CONSUMER_TIMEOUT]
        assert [(e.channel, e.queue, e.consumer_tag, e.timeout_ms) for e in timeouts] == [
            (2, None, None, 15000), (3, None, None, 15000)]
        assert timeouts[0].text.startswith("delivery acknowledgement on channel 2 timed out")


def test_on_4_3_the_log_says_nothing_of_a_timed_out_consumer():
    # 4.3 cancels the quorum queue's consumer without a line, and never times out the classic queue's: the
    # stalled worker's connection has no event between its opening and its close.
    for form in ("plain", "json"):
        _, events = _read("4.3.6", form)
        stalled = [e.kind for e in events if e.connection_name == "stalled-worker" or (
            e.connection in {o.connection for o in events if o.connection_name == "stalled-worker"})]
        assert stalled == [CONNECTION_OPENED, CONNECTION_CLOSED]


@pytest.mark.parametrize("release", RELEASES)
def test_the_plain_and_json_formats_give_the_same_events(release):
    def comparable(events):  # the two nodes had their own ports and processes
        return [e._replace(at=0.0, connection=None, pid=None) for e in events]

    assert comparable(_read(release, "plain")[1]) == comparable(_read(release, "json")[1])


def test_a_record_split_between_two_reads_is_joined():
    lines = (DATA / "broker-log-4.0.5" / "plain.log").read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if "Channel error on connection" in line)
    reader = LogReader()
    first = reader.feed(lines[:at + 1])
    rest = reader.feed(lines[at + 1:]) + reader.flush()
    assert not [e for e in first if e.kind == CHANNEL_ERROR]
    assert rest[0].kind == CHANNEL_ERROR and rest[0].text == "unknown delivery tag 1"


def test_lines_in_neither_format_are_counted_and_the_first_is_kept_for_a_human():
    reader = LogReader()
    events = reader.feed(["=INFO REPORT==== 26-Nov-2026::08:23:17 ===", "",
                          '{"time": "2026-11-26 08:23:17.8+00:00", "level": "error", "msg": "Channel error on conn',
                          '{"level": "info", "msg": "no time"}', "[1764145397] <0.1.0> epoch time format",
                          "2026-11-26 08:23:17.586861+00:00 [info] <0.1.0> a message no rule reads"])
    assert events == [] and reader.flush() == []
    assert reader.counts.lines == 6 and reader.counts.unknown == 4 and reader.counts.events == 0
    assert reader.counts.first_unknown == "=INFO REPORT==== 26-Nov-2026::08:23:17 ==="


def test_a_record_of_thousands_of_lines_is_kept_to_its_first_lines_and_a_crash_report_not_at_all():
    reader = LogReader()
    header = "2026-11-26 08:23:18.468072+00:00 [error] <0.1013.0> "
    reader.feed([header + "closing AMQP connection (127.0.0.1:1 -> 127.0.0.1:5672):"]
                + [header + f"    frame {i}" for i in range(10_000)])
    assert len(reader._pending.lines) == MAX_RECORD_LINES  # noqa: SLF001 — the bound is the point
    reader.feed([header.replace("1013", "1014") + "  crasher:"] + [header + f"    frame {i}" for i in range(10_000)])
    assert reader._pending.lines is None  # noqa: SLF001 — a message not read here keeps no line
    assert reader.flush() == [] and reader.counts.lines == 20_002 and reader.counts.unknown == 0


def test_timeout_warnings_without_their_channel_error_are_bounded():
    reader = LogReader()
    warning = ("Consumer 'c' on channel 2 and queue 'q' in vhost '/' has timed out waiting for a consumer "
               "acknowledgement of a delivery with delivery tag = 1. Timeout used: 15000 ms.")
    reader.feed([json.dumps({"time": "2026-11-26 08:23:18+00:00", "level": "warning", "pid": f"<0.{i}.0>",
                             "msg": warning}) for i in range(3 * MAX_WAITING)])
    reader.flush()
    assert len(reader._timeouts) == MAX_WAITING  # noqa: SLF001 — the bound is the point


def test_a_burst_of_error_lines_keeps_no_line():
    reader = LogReader()
    line = ("2026-11-26 08:23:17.{:06d}+00:00 [error] <0.{}.0> Channel error on connection <0.820.0> "
            "(127.0.0.1:36854 -> 127.0.0.1:5672, vhost: '/', user: 'guest'), channel 1:")
    second = "2026-11-26 08:23:17.{:06d}+00:00 [error] <0.{}.0> operation basic.ack caused a channel exception " \
             "precondition_failed: unknown delivery tag 1"
    events = []
    for i in range(10_000):
        events += reader.feed([line.format(i, i), second.format(i, i)])
    events += reader.flush()
    assert len(events) == 10_000 and reader.counts.events == 10_000
    assert reader._pending is None  # noqa: SLF001


@pytest.mark.parametrize("stamp, expected", [
    ("2026-11-26 08:23:18.809615+00:00", 1_795_681_398.809615),
    ("2026-11-26T08:23:18.5Z", 1_795_681_398.5),
    ("2026-11-26 09:23:18+01:00", 1_795_681_398.0),
    ("2026-11-26 08:23:18.1.2+00:00", None),
    ("2026-13-26 08:23:18+00:00", None),
])
def test_timestamps_are_read_in_each_form_the_formats_write(stamp, expected):
    at = lines._timestamp(stamp)  # noqa: SLF001 — the parsing itself is the point
    assert at == (pytest.approx(expected) if expected else None)
