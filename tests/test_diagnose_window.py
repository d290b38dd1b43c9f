"""`ackscope diagnose` beyond its own two samples, without a service: the stall it judges across them (never a
consumer at its prefetch), the node's log of the last --since (--broker-log), a running exporter's window
(--exporter-url), and what it says of bad input: one line, no traceback, nothing else lost. On real nodes:
tests/test_diagnose_window_broker.py."""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
from snapshot_builders import channel, consumer, queue, snapshot, stats

from ackscope.apps import cli
from ackscope.apps.diagnose import UNREACHABLE, LogWindow, judge_samples
from ackscope.diagnosis.thresholds import Thresholds
from ackscope.model.events import EVENTS
from ackscope.workloads.ports import free_port

# A double ack as RabbitMQ 3.10.8 logs it (tests/data/broker-log-3.10.8/plain.log), its time to be filled in.
DOUBLE_ACK = ("{at} [error] <0.831.0> Channel error on connection <0.820.0> (127.0.0.1:36854 -> 127.0.0.1:44759, "
              "vhost: '/', user: 'guest'), channel 1:\n"
              "{at} [error] <0.831.0> operation basic.ack caused a channel exception precondition_failed: unknown "
              "delivery tag 1\n")
GARBAGE = "\x00\x01 not a log line\n}{ nor this\n"


def _stamp(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S.%f+00:00")


# -- the stall diagnose can see across its samples ----------------------------------------------------------------
def _samples(acked: int, apart: float = 5.0):
    """A prefetch-5 consumer holding 5 of a queue of 20 (acking `acked` between the samples, `apart` seconds
    apart), and beside it a healthy one: prefetch 50, acking all the while, holding a few."""
    def sample(at: float, acks: int, healthy_acks: int):
        return snapshot(taken_at=at,
                        channels=(channel("stalled", prefetch_count=5, messages_unacked=5, connection_name="stalled",
                                          message_stats=stats(ack=acks, deliver_get=5 + acks)),
                                  channel("healthy", messages_unacked=3, connection_name="healthy",
                                          message_stats=stats(ack=healthy_acks, deliver_get=healthy_acks + 3))),
                        consumers=(consumer("work", "stalled", prefetch_count=5, connection_name="stalled"),
                                   consumer("orders", "healthy", connection_name="healthy")),
                        queues=(queue("work", messages_ready=15, messages_unacked=5, messages_persistent=20),
                                queue("orders", messages_ready=0, messages_unacked=3, messages_persistent=3)))
    return sample(1000.0, 0, 100), sample(1000.0 + apart, acked, 150)


def _by_rule(verdict) -> dict[str, list]:
    found: dict[str, list] = {}
    for f in verdict.findings:
        found.setdefault(f.rule, []).append(f)
    return found


def test_a_consumer_that_acks_nothing_across_the_samples_is_stalled_for_at_least_that_long_not_saturated():
    verdict = judge_samples(*_samples(acked=0), Thresholds())
    found = _by_rule(verdict)
    assert "prefetch-saturated" not in found
    (stalled,) = found["consumer-stalled"]
    assert stalled.object == "channel stalled" and stalled.evidence["held_for_at_least_seconds"] == 5
    assert "acked none for at least 5 s" in stalled.explanation
    loud = [(f.rule, f.object) for f in verdict.findings if f.severity != "info"]
    assert loud == [], "the healthy consumer beside it, and the stall of 5 s against a 30-minute timeout"
    assert not [f for f in verdict.findings if "healthy" in f.object]


def test_a_stall_seen_only_across_the_samples_is_info_where_the_release_would_call_it_a_warning():
    """Reviewed: on 4.3 a classic queue has no consumer timeout, and a stall is a warning from the start; a consumer
    on one 8 s job acks nothing across samples 5 s apart, and is slow, not stalled."""
    from snapshot_builders import OVERVIEW
    on_43 = [replace(s, overview=replace(OVERVIEW, rabbitmq_version="4.3.6")) for s in _samples(acked=0)]
    (stalled,) = _by_rule(judge_samples(*on_43, Thresholds()))["consumer-stalled"]
    assert stalled.severity == "info" and "one long job" in stalled.evidence["seen"]
    # Seen as long as the exporter would judge it: the release's own severity.
    (long,) = _by_rule(judge_samples(*on_43, Thresholds(stalled_consumer_seconds=5)))["consumer-stalled"]
    assert long.severity == "warning"


def test_a_consumer_that_acks_across_the_samples_is_at_its_prefetch_not_stalled():
    found = _by_rule(judge_samples(*_samples(acked=5), Thresholds()))
    assert "consumer-stalled" not in found
    assert [f.object for f in found["prefetch-saturated"]] == ["channel stalled"]


def test_samples_closer_than_the_statistics_interval_tell_no_stall():
    # The management API refreshes a channel's counters every 5 s by default: 1.5 s of unmoved counters say nothing.
    assert "consumer-stalled" not in _by_rule(judge_samples(*_samples(acked=0, apart=1.5), Thresholds()))


def test_the_configured_stall_threshold_applies_where_it_is_shorter_than_the_samples():
    found = _by_rule(judge_samples(*_samples(acked=0, apart=30.0), Thresholds(stalled_consumer_seconds=10)))
    assert found["consumer-stalled"][0].evidence["held_for_at_least_seconds"] == 30


# -- the node's log of the last --since ---------------------------------------------------------------------------
@pytest.fixture
def logged_a_minute_ago(tmp_path: Path) -> tuple[Path, float]:
    """A log holding garbage and a double ack logged 60 s ago."""
    at = time.time() - 60
    path = tmp_path / "rabbit.log"
    path.write_text(GARBAGE + DOUBLE_ACK.format(at=_stamp(at)) + GARBAGE)
    return path, at


def _read(path: Path, since: float) -> LogWindow:
    log = LogWindow(str(path), since)
    log.read(None)
    log.read(None, last=True)
    return log


def test_a_double_ack_logged_within_since_is_found_with_when_it_was_logged(logged_a_minute_ago):
    path, at = logged_a_minute_ago
    log = _read(path, 15 * 60)
    assert log.problem is None and len(log.breaks.events) == 1 and log.breaks.unknown_lines == 4
    note = log.note()
    assert "\n" not in note and "1 event of 6 lines read" in note and "4 lines in neither" in note
    now = time.time()
    verdict = judge_samples(snapshot(taken_at=now - 5), snapshot(taken_at=now), Thresholds(), (), log.breaks,
                            log.since)
    (closed,) = _by_rule(verdict)["closed-on-error"]
    assert closed.evidence["reason"] == "unknown_delivery_tag" and closed.since == pytest.approx(at, abs=1e-3)
    assert closed.evidence["logged"].startswith(f"at {datetime.fromtimestamp(at, UTC):%Y-%m-%d %H:%M:%S} UTC, "
                                                "the last 1 min before")
    assert closed.evidence["window_seconds"] == 900
    assert EVENTS not in {n for skipped in verdict.not_evaluated for n in skipped.needs}


def test_a_double_ack_logged_before_since_is_not_found_and_the_log_rules_still_run(logged_a_minute_ago):
    path, _ = logged_a_minute_ago
    log = _read(path, 10)
    assert log.breaks.events == ()
    now = time.time()
    verdict = judge_samples(snapshot(taken_at=now - 5), snapshot(taken_at=now), Thresholds(), (), log.breaks, 10)
    assert "closed-on-error" not in _by_rule(verdict)
    assert not [n for n in verdict.not_evaluated if EVENTS in n.needs]


@pytest.mark.parametrize("where", ["missing", "directory"])
def test_a_log_that_cannot_be_read_is_one_line_and_its_rules_are_said_not_evaluated(tmp_path, where):
    path = tmp_path / "nowhere.log" if where == "missing" else tmp_path
    log = _read(path, 900)
    words = {"missing": "No such file or directory", "directory": "Is a directory"}[where]
    assert log.breaks is None
    assert log.note() == f"broker log: the broker log {path} cannot be read: {words}: the rules that need it are " \
                         "not evaluated"
    verdict = judge_samples(snapshot(taken_at=995.0), snapshot(taken_at=1000.0), Thresholds())
    assert {"closed-on-error", "consumer-timed-out"} <= {n.rule for n in verdict.not_evaluated if EVENTS in n.needs}


# -- arguments ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("argv, said", [
    (["--since", "5m"], "--since: how far back --broker-log is read, and no --broker-log is given"),
    (["--broker-log", "rabbit.log", "--since", "soon"], "--since: must be a duration"),
    (["--broker-log", "rabbit.log", "--since", "0s"], "--since: must be a duration"),
    (["--broker-log", "rabbit.log", "--since", "100000000d"], "--since: from a second to"),
    (["--broker-log", "-"], "--broker-log: diagnose reads a file once"),
    (["--brokers", "brokers.toml", "--broker-log", "rabbit.log"], "--broker-log: the log of one node"),
    (["--exporter-url", "http://localhost:9577", "--broker-log", "rabbit.log"], "--exporter-url: the exporter's "
                                                                               "findings are reported as it judged"),
    (["--exporter-url", "ftp://localhost:9577"], "--exporter-url: must look like http(s)://host:port"),
    (["--exporter-url", "http://me:secret@localhost:9577"], "--exporter-url: must not carry credentials"),
])
def test_options_that_cannot_be_met_are_refused_in_one_line(capsys, argv, said):
    assert cli.main(["diagnose", *argv]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"ackscope diagnose: {said}") and err.count("\n") == 1, err
    assert "secret" not in err


# -- an exporter that cannot be read ------------------------------------------------------------------------------
@pytest.fixture
def exporter_answering() -> Iterator[Callable[[int, bytes], str]]:
    """An HTTP server answering every GET with the status and body given (None: it hangs until the test ends)."""
    release = threading.Event()
    answer: dict = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if answer["body"] is None:
                release.wait(30)
                return
            self.send_response(answer["status"])
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(answer["body"])

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()

    def answering(status: int, body: bytes | None) -> str:
        answer.update(status=status, body=body)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield answering
    release.set()
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("status, body, said", [
    (500, b"Internal Server Error", "answered HTTP 500 for /api/snapshot"),
    (200, b"{not json", "sent malformed JSON for /api/snapshot"),
    (200, b"[1, 2, 3]", "sent documents that are not an ackscope exporter's"),
    (200, b'{"up": true, "snapshot": {"taken_at": 1}, "findings": [{"rule": "x", "severity": "dire"}]}',
     "sent documents that are not an ackscope exporter's"),
    (200, b'{"up": true, "snapshot": {"taken_at": 1e300, "overview": {}}, "findings": []}',
     "sent documents that are not an ackscope exporter's"),
    (200, b'{"up": true, "snapshot": {"taken_at": 1, "overview": {}}, "findings": [{"rule": "x", "severity": '
          b'"info", "vhost": "/", "object": "o", "connection_name": "", "evidence": {}, "explanation": "", '
          b'"remedy": "", "since": "yesterday"}]}', "sent documents that are not an ackscope exporter's"),
    (200, b'{"up": false, "last_error": "login failed", "snapshot": null, "findings": []}',
     "has no poll of the broker yet: login failed"),
    (200, None, "did not answer within 0.5 s"),
])
def test_an_exporter_that_cannot_be_read_exits_3_with_one_line(capsys, exporter_answering, status, body, said):
    url = exporter_answering(status, body)
    assert cli.main(["diagnose", "--exporter-url", url, "--timeout", "0.5"]) == UNREACHABLE
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("ackscope diagnose: ") and err.count("\n") == 1, err
    assert said in err and "Traceback" not in err


def test_an_exporter_that_is_not_there_exits_3_with_one_line(capsys):
    assert cli.main(["diagnose", "--exporter-url", f"http://127.0.0.1:{free_port()}"]) == UNREACHABLE
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "cannot be reached" in err, err
