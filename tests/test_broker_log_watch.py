"""The node's log as a poll reads it: new events each read; a log that is missing, unreadable, in an unknown
format or bursting is counted and said once, and never stops the reading."""

from __future__ import annotations

import logging
from pathlib import Path

from ackscope.model.events import CHANNEL_ERROR, CONNECTION_OPENED
from ackscope.sources.broker_log import watch
from ackscope.sources.broker_log.follow import MAX_LINE
from ackscope.sources.broker_log.watch import BrokerLogWatch

RECORDED = Path(__file__).parent / "data" / "broker-log-4.0.5" / "plain.log"
ERROR = ("2026-11-26 08:23:18.{0:06d}+00:00 [error] <0.{0}.0> Channel error on connection <0.742.0> "
         "(127.0.0.1:47800 -> 127.0.0.1:5672, vhost: '/', user: 'guest'), channel 1:\n"
         "2026-11-26 08:23:18.{0:06d}+00:00 [error] <0.{0}.0> operation basic.ack caused a channel exception "
         "precondition_failed: unknown delivery tag 1\n")


def _said(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "ackscope.broker_log"]


def test_each_read_gives_what_was_written_since_the_last(tmp_path):
    log = tmp_path / "rabbit.log"
    log.write_text("2026-11-26 08:23:17.000000+00:00 [info] <0.1.0> before ackscope started\n")
    watching = BrokerLogWatch(str(log))
    assert watching.read().events == ()
    with open(log, "a") as f:
        f.write(RECORDED.read_text())
    first = watching.read()
    assert [e.kind for e in first.events].count(CHANNEL_ERROR) == 6
    assert first.events[0].kind == CONNECTION_OPENED and first.events[0].client == "orders-worker"
    assert first.problem is None and first.dropped == 0
    assert watching.read().events == ()


def test_a_missing_log_is_said_once_and_its_return_once(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="ackscope.broker_log")
    log = tmp_path / "rabbit.log"
    watching = BrokerLogWatch(str(log))
    for _ in range(3):
        assert watching.read().problem.startswith(f"the broker log {log} does not exist (yet)")
    log.write_text(ERROR.format(1))
    read = watching.read()
    assert read.problem is None and [e.kind for e in read.events] == [CHANNEL_ERROR]
    assert _said(caplog) == [
        f"broker log: the broker log {log} does not exist (yet): it is looked for again at each poll",
        f"broker log: {log} is read again"]


def test_lines_in_an_unknown_format_and_overlong_lines_are_said_once_and_the_rest_is_read(tmp_path, caplog):
    log = tmp_path / "rabbit.log"
    log.write_text("")
    watching = BrokerLogWatch(str(log))
    with open(log, "a") as f:
        f.write("=ERROR REPORT==== 26-Nov-2026::08:23:17 ===\n" + "x" * (2 * MAX_LINE) + "\n" + ERROR.format(1))
    first = watching.read()
    with open(log, "a") as f:
        f.write("=ERROR REPORT==== again\n" + "y" * (2 * MAX_LINE) + "\n" + ERROR.format(2))
    second = watching.read()
    assert [e.kind for e in first.events + second.events] == [CHANNEL_ERROR, CHANNEL_ERROR]
    assert second.counts.unknown == 4 and second.truncated == 2
    assert _said(caplog) == [
        f"broker log: {log} has lines in neither of RabbitMQ's formats (plain or JSON), passed over and counted; "
        "the first: '=ERROR REPORT==== 26-Nov-2026::08:23:17 ==='",
        f"broker log: {log} has lines longer than 64 KiB; each is read up to that and counted"]


def test_a_burst_beyond_what_one_read_keeps_is_counted_not_held(tmp_path, monkeypatch):
    monkeypatch.setattr(watch, "MAX_EVENTS", 100)
    log = tmp_path / "rabbit.log"
    log.write_text("")
    watching = BrokerLogWatch(str(log))
    log.write_text("".join(ERROR.format(i) for i in range(1000)))
    read = watching.read()
    assert len(read.events) == 100 and read.dropped == 900 and read.counts.events == 1000
    assert read.events[-1].pid == "<0.742.0>" and read.events[-1].at > read.events[0].at  # the newest kept
