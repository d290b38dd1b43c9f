"""The node's settings as its CLI answers (answers recorded from 3.10.8 and 4.3.6 nodes), and a reader that never
holds a poll up: it reads in the background, keeps what it read when the CLI fails, and says a failure once."""

from __future__ import annotations

import logging
import time

import pytest

from ackscope.model.snapshot import NodeSettings
from ackscope.sources.node_settings import parse, reader

RECORDED = {
    # consumer_timeout = 20000 in rabbitmq.conf
    "{'ackscope-ct310-60745@localhost',{ok,20000}}\n": NodeSettings("ackscope-ct310-60745@localhost", 20000),
    # then application:set_env(rabbit, consumer_timeout, undefined), and application:unset_env
    "{'ackscope-ctnewest-47903@localhost',{ok,undefined}}\n": NodeSettings("ackscope-ctnewest-47903@localhost", None),
    "{'ackscope-ctnewest-47903@localhost',undefined}\n": NodeSettings("ackscope-ctnewest-47903@localhost", None),
    "{rabbit@db1,{ok,1800000}}\n": NodeSettings("rabbit@db1", 1800000),  # a node name Erlang need not quote
}


@pytest.mark.parametrize("answer", list(RECORDED))
def test_each_answer_of_the_cli_is_the_nodes_consumer_timeout(answer):
    assert parse(answer) == RECORDED[answer]


@pytest.mark.parametrize("answer", ["", "Error: unable to perform an operation on node", "{badrpc,nodedown}",
                                    "{'rabbit@h',{ok,20000}} trailing"])
def test_anything_else_is_refused_in_one_line(answer):
    with pytest.raises(ValueError, match="not the node's settings"):
        parse(answer)


def _cli(answers) -> list[str]:
    """A command line that answers as the CLI would, with what the file `answers` holds at the time (the arguments
    the reader adds are bash's $0 and on)."""
    return ["bash", "-c", f"cat {answers}; exit $(cat {answers}.rc 2>/dev/null || echo 0)", "rabbitmqctl"]


def test_the_first_read_is_waited_for_until_the_deadline_then_refreshed_in_the_background(tmp_path):
    answers = tmp_path / "answers"
    answers.write_text("{'rabbit@h',{ok,20000}}\n")
    settings = reader(_cli(answers), refresh_seconds=0.0)
    assert settings.latest(first_by=time.monotonic() + 10) == NodeSettings("rabbit@h", 20000)
    answers.write_text("{'rabbit@h',{ok,5000}}\n")
    assert settings.latest() == NodeSettings("rabbit@h", 20000), "a refresh is never waited for"
    deadline = time.monotonic() + 10
    while settings.latest() != NodeSettings("rabbit@h", 5000) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert settings.latest() == NodeSettings("rabbit@h", 5000)
    settings.close()


def test_a_failing_cli_keeps_what_was_read_and_is_said_once(caplog, tmp_path):
    caplog.set_level(logging.INFO, logger="ackscope")
    answers = tmp_path / "answers"
    answers.write_text("{'rabbit@h',{ok,20000}}\n")
    settings = reader(_cli(answers), refresh_seconds=0.0)
    read = settings.latest(first_by=time.monotonic() + 10)
    answers.write_text("Error: unable to perform an operation on node rabbit@h\n")
    (tmp_path / "answers.rc").write_text("69")
    for _ in range(3):  # each a failing read, run to its end
        settings.latest()
        settings._running.result(timeout=10)
    assert settings.latest() == read
    said = [r.getMessage() for r in caplog.records]
    assert said == ["the node's settings (bash) not read, those read before kept: Error: unable to perform an operation on node rabbit@h"], said
    settings.close()


def test_a_cli_that_hangs_is_no_settings_at_the_deadline():
    settings = reader(["bash", "-c", "sleep 30"], timeout=0.5)
    started = time.monotonic()
    assert settings.latest(first_by=started + 0.2) is None and time.monotonic() - started < 1.0
    settings.close()


def test_a_read_that_fails_after_the_exporter_stopped_says_nothing(caplog):
    caplog.set_level(logging.INFO, logger="ackscope")
    settings = reader(["bash", "-c", "sleep 0.5; exit 1"], timeout=5.0)
    settings.latest()
    running = settings._running
    settings.close()
    running.result(timeout=10)
    assert not caplog.records, [r.getMessage() for r in caplog.records]
