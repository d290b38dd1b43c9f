"""What the node's log says where deliveries break, read from real nodes' logs: RabbitMQ 3.10.8, 4.0.5 and 4.3.6,
each in its plain and its JSON format (tests/data/record_broker_log.py and record_broker_log_drops.py recorded them),
and from lines no release writes. A warning or an error that makes no event is counted as not understood, never
passed over."""

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
    DEAD_LETTER_CYCLE,
    DEAD_LETTER_EXCHANGE_MISSING,
    DEAD_LETTERING_STUCK,
    DEPRECATED_FEATURE,
    MESSAGE_DROPPED,
)
from ackscope.sources.broker_log import lines
from ackscope.sources.broker_log.lines import MAX_RECORD_LINES, MAX_WAITING, LogReader

DATA = Path(__file__).parent / "data"
RELEASES = ("3.10.8", "4.0.5", "4.3.6")
# "version", not "release": tests/conftest.py takes a "release" parameter for a node's
LOGS = [(version, form) for version in RELEASES for form in ("plain", "json")]


def _read(version: str, form: str, recording: str = "broker-log"):
    reader = LogReader()
    lines = (DATA / f"{recording}-{version}" / f"{form}.log").read_text().splitlines()
    return reader, reader.feed(lines) + reader.flush()


def _what(events, kind):
    return [(e.connection_name, e.channel, e.operation, e.reason, e.text) for e in events if e.kind == kind]


@pytest.mark.parametrize(("version", "form"), LOGS)
def test_each_channel_the_broker_closed_is_named_with_its_connection_operation_and_reason(version, form):
    reader, events = _read(version, form)
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


@pytest.mark.parametrize(("version", "form"), LOGS)
def test_connections_opened_closed_dropped_and_refused_are_told_apart(version, form):
    _, events = _read(version, form)
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


@pytest.mark.parametrize("form", ["plain", "json"])
def test_on_4_3_an_amqp10_receivers_deliveries_released_at_the_timeout_are_an_event_naming_its_link_and_queue(form):
    """Recorded (tests/data/record_broker_log_amqp10.py): a Proton receiver holding 20 deliveries of quorum queue
    jobs past a 10 s timeout. 4.3.6 says it released them, once for the link; 4.0.5 says nothing in 40 s."""
    reader, events = _read("4.3.6", form, "broker-log-amqp10")
    [released] = [e for e in events if e.kind == CONSUMER_TIMEOUT]
    assert (released.reason, released.vhost, released.queue, released.channel) == ("released", "/", "jobs", None)
    assert released.link.startswith("proton-holding-") and released.link.endswith("-/queues/jobs")
    assert released.connection.startswith("127.0.0.1:") and " -> 127.0.0.1:" in released.connection
    assert released.text == "released unsettled messages due to consumer timeout"
    assert "released unsettled" not in (reader.counts.first_not_understood or "")
    _, events = _read("4.0.5", form, "broker-log-amqp10")
    assert not [e for e in events if e.kind == CONSUMER_TIMEOUT]


@pytest.mark.parametrize("version", RELEASES)
def test_the_plain_and_json_formats_give_the_same_events(version):
    def comparable(events):  # the two nodes had their own ports and processes
        return [e._replace(at=0.0, connection=None, pid=None) for e in events]

    assert comparable(_read(version, "plain")[1]) == comparable(_read(version, "json")[1])


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
    # Errors no parser reads: counted once each (a record, not its lines; the frames after the crash report are
    # a record of their own, of another process), the first line of the first kept for a human.
    assert reader.counts.not_understood == 2 and reader.counts.first_not_understood == header.replace("1013", "1014") \
        + "  crasher:"


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


# -- what the broker logs when it drops a message, loses a client, refuses a connection (issue 55, K4) -----------
@pytest.mark.parametrize(("version", "form"), LOGS)
def test_a_message_dropped_in_a_dead_letter_cycle_names_the_cycles_queues(version, form):
    reader, events = _read(version, form, "broker-log-drops")
    (dropped,) = [e for e in events if e.kind == MESSAGE_DROPPED]
    # The queue it was dead-lettered into, then those it died in, the most recent first (3.10 and 4.x alike).
    assert dropped.queues == ("cycle.work", "cycle.retry", "cycle.work") and dropped.queue == "cycle.retry"
    assert dropped.reason == DEAD_LETTER_CYCLE and dropped.vhost is None, "neither release names the vhost"
    assert dropped.text.startswith("Message dropped")
    assert ("cycle detected" in dropped.text) == (version == "3.10.8")
    assert ("without reason 'rejected'" in dropped.text) == (version != "3.10.8")
    assert reader.counts.unknown == 0 and reader.counts.not_understood == 0, reader.counts.first_not_understood


@pytest.mark.parametrize(("version", "form"), LOGS)
def test_a_close_for_missed_heartbeats_names_the_client_and_its_timeout(version, form):
    _, events = _read(version, form, "broker-log-drops")
    (lost,) = [e for e in events if e.connection_name == "heartbeat-sleeper" and e.kind != CONNECTION_OPENED]
    assert (lost.kind, lost.reason, lost.text) == (CONNECTION_CLOSED, "missed heartbeats",
                                                    "missed heartbeats from client, timeout: 2s")


@pytest.mark.parametrize(("version", "form"), LOGS)
def test_a_celery_producer_refused_its_declare_five_times_is_five_channel_errors_naming_the_queue(version, form):
    _, events = _read(version, form, "broker-log-drops")
    refused = [e for e in events if e.kind == CHANNEL_ERROR]
    assert [(e.operation, e.reason, e.queue, e.vhost) for e in refused] == \
        [("queue.declare", "precondition_failed", "celery.priority", "/")] * 5
    assert refused[0].text.startswith("inequivalent arg 'x-message-ttl' for queue 'celery.priority' in vhost '/'")
    opened = {e.connection: e.connection_name for e in events if e.kind == CONNECTION_OPENED}
    assert {opened[e.connection] for e in refused} == {"celery-inequivalent-producer"}


@pytest.mark.parametrize(("version", "form"), LOGS)
def test_connection_exceptions_each_become_an_event_with_the_error_the_client_got(version, form):
    _, events = _read(version, form, "broker-log-drops")
    errors = [(e.reason, e.operation, e.connection_name, e.vhost, e.user, e.channel, e.text)
              for e in events if e.kind == CONNECTION_ERROR]
    assert errors == [
        ("handshake_timeout", None, None, None, None, None, "{handshake_timeout,handshake}"),
        ("access_refused", None, None, None, None, None, "PLAIN login refused: user 'guest' - invalid credentials"),
        ("not_allowed", None, None, None, "guest", None, "vhost no-such-vhost not found"),
        ("channel_error", "channel.open", "reopening-client", "/", "guest", 1, "second 'channel.open' seen")]


@pytest.mark.parametrize("version", RELEASES)
def test_the_plain_and_json_formats_give_the_same_events_of_drops_and_refusals(version):
    def comparable(events):  # the cycle's drop comes a TTL after its publish: beside the next client's lines, in
        # either order
        return sorted(repr(e._replace(at=0.0, connection=None, pid=None)) for e in events)

    assert comparable(_read(version, "plain", "broker-log-drops")[1]) == \
        comparable(_read(version, "json", "broker-log-drops")[1])


@pytest.mark.parametrize(("version", "form"), LOGS)
def test_a_quorum_queue_that_cannot_forward_its_dead_letters_names_the_queue_and_why(version, form):
    _, events = _read(version, form, "broker-log-drops")
    (stuck,) = [e for e in events if e.kind == DEAD_LETTERING_STUCK]
    assert (stuck.queue, stuck.vhost, stuck.reason) == ("stuck", "/", DEAD_LETTER_EXCHANGE_MISSING)
    assert stuck.text == "its configured dead-letter-exchange exchange 'no-such-exchange' in vhost '/' does not exist"
    used = [e.reason for e in events if e.kind == DEPRECATED_FEATURE]
    assert used == ([] if version == "3.10.8" else
                    ["management_metrics_collection", "transient_nonexcl_queues", "global_qos"])


def test_4x_says_which_deprecated_features_are_used():
    for version in ("4.0.5", "4.3.6"):
        _, events = _read(version, "plain")
        used = [(e.reason, e.text) for e in events if e.kind == DEPRECATED_FEATURE]
        assert used == [("management_metrics_collection", "Feature `management_metrics_collection` is deprecated."),
                        ("transient_nonexcl_queues", "Feature `transient_nonexcl_queues` is deprecated.")]


PLAIN = "2026-11-29 08:02:42.575770+00:00 [{}] <0.{}.0> {}"
MIRRORED = "Mirrored queue 'q' in vhost '/': Stopping all nodes on master shutdown"  # 3.x, no event of ackscope's


def test_a_warning_or_an_error_no_parser_reads_is_counted_as_not_understood_with_its_first_line():
    reader = LogReader()
    reader.feed([PLAIN.format("info", 1, "accepting AMQP connection <0.1.0> (127.0.0.1:1 -> 127.0.0.1:5672)"),
                 PLAIN.format("warning", 2, MIRRORED),
                 PLAIN.format("warning", 2, "since no synchronised mirror is available"),
                 PLAIN.format("error", 3, "closing AMQP connection in a form no release writes"),
                 PLAIN.format("error", 4, "Channel error on connection in a form no release writes"),
                 json.dumps({"time": "2026-11-29 08:02:43+00:00", "level": "error", "pid": "<0.9.0>",
                             "msg": "Queue 'q' in vhost '/' crashed\nstack"})])
    assert reader.flush() == []
    assert reader.counts.not_understood == 4, "the mirrored queue's two lines are one record"
    assert reader.counts.first_not_understood == PLAIN.format("warning", 2, MIRRORED)
    assert reader.counts.events == 0 and reader.counts.unknown == 0


def test_warnings_known_to_make_no_event_are_not_counted_as_not_understood():
    reader = LogReader()
    events = reader.feed([
        PLAIN.format("warning", 1, 'Message store "628WB79CIFDYO9LJI6DKMI09L/msg_store_persistent": rebuilding indices '
                                "from scratch"),
        PLAIN.format("warning", 2, "Classic peer discovery backend: list of nodes does not contain the local node []"),
        # The node's own AMQP client (its management API's publish, as tests use it) connecting.
        PLAIN.format("warning", 2, "AMQP 0-9-1 client call timeout was 70000 ms, is updated to a safe effective value "
                                   "of 130000 ms"),
        # 4.3 says a failed login twice: the connection's error after it names the connection.
        PLAIN.format("warning", 3, "User 'guest' failed to authenticate: user 'guest' - invalid credentials"),
        # The node's alarms, which polls read (memory-alarm): a record of several lines, and its clearing.
        PLAIN.format("warning", 6, "memory resource limit alarm set on node 'rabbit@host'."),
        PLAIN.format("warning", 6, "*** Publishers will be blocked until this alarm clears ***"),
        PLAIN.format("warning", 6, "memory resource limit alarm cleared across the cluster").replace("42.5", "43.5"),
        # A consumer's timeout waits for its channel's close, which makes the event.
        PLAIN.format("warning", 4, "Consumer 1 on channel 2 has timed out waiting for delivery acknowledgement. "
                                   "Timeout used: 15000 ms."),
        PLAIN.format("info", 5, "a message no rule reads")]) + reader.flush()
    assert events == [] and reader.counts.not_understood == 0


def test_a_queue_name_the_broker_prints_as_bytes_is_read_back():
    reader = LogReader()
    cycle = '[<<"caf\u00e9"/utf8>>,<<99,97,102,195,169>>,<<"caf\u00e9"/utf8>>]'
    line = PLAIN.format("warning", 1, f"Message dropped. Dead-letter queues cycle detected: {cycle}")
    (dropped,) = reader.feed([line]) + reader.flush()
    assert dropped.queues == ("caf\u00e9",) * 3


def test_a_line_shown_as_not_understood_never_carries_a_uris_credentials():
    """A shovel's warning can name its source with the password in the URI: counted, shown, without it."""
    reader = LogReader()
    reader.feed(["2026-11-29 08:00:00.000000+00:00 [warning] <0.1.0> Shovel 'move' could not connect to "
                 "amqp://shovel:s3cret@10.0.0.9:5672/%2f, retrying"])
    reader.flush()
    assert reader.counts.not_understood == 1 and "s3cret" not in reader.counts.first_not_understood
    assert "amqp://…@10.0.0.9:5672" in reader.counts.first_not_understood
