"""The node's log as a poll reads it: new events each read; a log that is missing, unreadable, in an unknown
format or bursting is counted and said once, and never stops the reading."""

from __future__ import annotations

import logging
from pathlib import Path

from ackscope.model.events import CHANNEL_ERROR, CONNECTION_OPENED
from ackscope.sources.broker_log import follow
from ackscope.sources.broker_log.follow import MAX_LINE
from ackscope.sources.broker_log.watch import BrokerLogWatch, LogRead

RECORDED = Path(__file__).parent / "data" / "broker-log-4.0.5" / "plain.log"
ERROR = ("2026-11-26 08:23:18.{0:06d}+00:00 [error] <0.{0}.0> Channel error on connection <0.742.0> "
         "(127.0.0.1:47800 -> 127.0.0.1:5672, vhost: '/', user: 'guest'), channel 1:\n"
         "2026-11-26 08:23:18.{0:06d}+00:00 [error] <0.{0}.0> operation basic.ack caused a channel exception "
         "precondition_failed: unknown delivery tag 1\n")


def _read(watching: BrokerLogWatch) -> tuple[list, LogRead]:
    events: list = []
    read = watching.read(events.extend)
    return events, read


def _said(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "ackscope.broker_log"]


def test_each_read_gives_what_was_written_since_the_last(tmp_path):
    log = tmp_path / "rabbit.log"
    log.write_text("2026-11-26 08:23:17.000000+00:00 [info] <0.1.0> before ackscope started\n")
    watching = BrokerLogWatch(str(log))
    assert _read(watching)[0] == []
    with open(log, "a") as f:
        f.write(RECORDED.read_text())
    events, first = _read(watching)
    assert [e.kind for e in events].count(CHANNEL_ERROR) == 6
    opened = [e for e in events if e.kind == CONNECTION_OPENED]  # after the node's deprecated features, on 4.0
    assert opened[0].connection_name == "orders-worker"
    assert first.problem is None and first.counts.events == len(events)
    assert _read(watching)[0] == []


def test_a_missing_log_is_said_once_and_its_return_once(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="ackscope.broker_log")
    log = tmp_path / "rabbit.log"
    watching = BrokerLogWatch(str(log))
    for _ in range(3):
        assert _read(watching)[1].problem.startswith(f"the broker log {log} does not exist (yet)")
    log.write_text(ERROR.format(1))
    events, read = _read(watching)
    assert read.problem is None and [e.kind for e in events] == [CHANNEL_ERROR]
    assert _said(caplog) == [
        f"broker log: the broker log {log} does not exist (yet): it is looked for again at each poll",
        f"broker log: {log} is read again"]


def test_lines_in_an_unknown_format_and_overlong_lines_are_said_once_and_the_rest_is_read(tmp_path, caplog):
    log = tmp_path / "rabbit.log"
    log.write_text("")
    watching = BrokerLogWatch(str(log))
    with open(log, "a") as f:
        f.write("=ERROR REPORT==== 26-Nov-2026::08:23:17 ===\n" + "x" * (2 * MAX_LINE) + "\n" + ERROR.format(1))
    first, _ = _read(watching)
    with open(log, "a") as f:
        f.write("=ERROR REPORT==== again\n" + "y" * (2 * MAX_LINE) + "\n" + ERROR.format(2))
    second_events, second = _read(watching)
    assert [e.kind for e in first + second_events] == [CHANNEL_ERROR, CHANNEL_ERROR]
    assert second.counts.unknown == 4 and second.truncated == 2
    assert _said(caplog) == [
        f"broker log: {log} has lines in neither of RabbitMQ's formats (plain or JSON), passed over and counted; "
        "the first: '=ERROR REPORT==== 26-Nov-2026::08:23:17 ==='",
        f"broker log: {log} has lines longer than 64 KiB; each is read up to that and counted"]


def test_warnings_not_understood_are_said_once_with_the_first_and_counted(tmp_path, caplog):
    log = tmp_path / "rabbit.log"
    log.write_text("")
    watching = BrokerLogWatch(str(log))
    mirrored = "2026-11-29 08:02:42.575770+00:00 [warning] <0.{}.0> Mirrored queue 'q' in vhost '/': Stopping all nodes"
    for pid in (1, 2):
        with open(log, "a") as f:
            f.write(mirrored.format(pid) + "\n" + ERROR.format(pid))
        events, read = _read(watching)
        assert [e.kind for e in events] == [CHANNEL_ERROR], "what follows is read"
    assert read.counts.not_understood == 2 and read.counts.first_not_understood == mirrored.format(1)
    assert _said(caplog) == [
        f"broker log: {log} has warnings or errors ackscope does not understand (it makes no event of them), "
        f"counted in ackscope_broker_log_not_understood_lines_total; the first: {mirrored.format(1)!r}"]


def test_a_burst_is_handed_over_in_batches_of_bounded_size_each_event_once(tmp_path, monkeypatch):
    monkeypatch.setattr(follow, "READ_BYTES", 4096)
    log = tmp_path / "rabbit.log"
    log.write_text("")
    watching = BrokerLogWatch(str(log))
    log.write_text("".join(ERROR.format(i) for i in range(1000)))
    batches: list[list] = []
    read = watching.read(batches.append)
    events = [e for batch in batches for e in batch]
    assert len(events) == 1000 == read.counts.events and len(batches) > 50
    assert max(len(b) for b in batches) <= 4096 // len(ERROR.format(0).split("\n")[0])
    assert [e.at for e in events] == sorted(e.at for e in events)
