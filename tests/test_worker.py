"""core/worker.py: an object in a process of its own (the exporter's trace side runs in one), proven with real
processes: calls answered, the worker's log lines logged here once, a worker that ends said once and started
again after its backoff, and a worker whose exporter died ends by itself, keeping what it held."""

from __future__ import annotations

import functools
import logging
import os
import signal
import subprocess
import sys

import psutil
import pytest

from ackscope.core.worker import Worker, WorkerError, WorkerGone
from ackscope_testkit.worker_objects import Tally

from helpers import wait_for

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_calls_are_answered_in_a_process_of_its_own_and_its_log_lines_come_back_once(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    worker = Worker(functools.partial(Tally, str(tmp_path / "closed")), "the tally worker")
    assert not worker.running and worker.pid is None  # nothing started before the first call
    assert [worker.call("add", n) for n in (2, 3)] == [2, 5]
    assert worker.call("pid") == worker.pid != os.getpid()
    worker.call("say", "one")
    worker.call("say_later", "two")
    wait_for(lambda: worker.call("add", 0) == 5 and any("later two" in r.message for r in caplog.records), 5,
             "the thread's line, back with a later answer")
    said = [(r.name, r.levelname, r.message) for r in caplog.records if r.name == "ackscope.testkit.tally"]
    assert said == [("ackscope.testkit.tally", "WARNING", "said one"), ("ackscope.testkit.tally", "WARNING",
                                                                           "later two")]
    assert worker.stop() == 5 and (tmp_path / "closed").read_text() == "5"
    assert not worker.running and worker.stop() is None


def test_what_raises_in_the_worker_is_a_worker_error_and_the_worker_goes_on(caplog):
    worker = Worker(Tally, "the tally worker")
    try:
        with pytest.raises(WorkerError, match="AttributeError"):
            worker.call("no_such_method")
        with pytest.raises(WorkerError, match="cannot be sent back"):
            worker.call("unsendable")
        assert worker.call("add", 1) == 1 and worker.started == 1
    finally:
        worker.stop()
    refusing = Worker(functools.partial(Tally, refuse=True), "the refusing worker")
    try:
        with pytest.raises(WorkerError, match="could not be made: ValueError: refused to be made"):
            refusing.call("add", 1)
    finally:
        refusing.stop()


def test_a_worker_that_ends_is_said_once_held_back_and_started_again(caplog):
    clock = Clock()
    worker = Worker(Tally, "the tally worker", clock=clock)
    try:
        assert worker.call("add", 4) == 4
        for _ in range(2):
            with pytest.raises(WorkerGone, match=r"^the tally worker ended \(exit code 3\)$"):
                worker.call("end", 3)
            with pytest.raises(WorkerGone, match=r"started again in \d+ s"):
                worker.call("add", 1)  # within its backoff: no process started
            clock.now += 60
        os.kill(worker.call("pid"), signal.SIGKILL)  # ended between calls
        wait_for(lambda: not worker.running, 5, "the killed worker gone")
        with pytest.raises(WorkerGone, match=r"ended \(exit code -9\); started again in 1 s"):
            worker.call("add", 1)
        clock.now += 1
        assert worker.call("add", 1) == 1  # a new process: what the last held is gone
        assert worker.started == 4
    finally:
        worker.stop()
    errors = [r.message for r in caplog.records if r.name == "ackscope.worker"]
    # The first end of each run said, and each recovery: not each refused call.
    assert errors == ["the tally worker ended (exit code 3); started again at the next call",
                      "the tally worker answers again, after 2 ended: what the ended ones held is not judged",
                      "the tally worker ended (exit code -9); started again at the next call",
                      "the tally worker answers again, after 1 ended: what the ended ones held is not judged"], errors


def test_a_worker_whose_exporter_died_closes_its_object_and_ends(tmp_path):
    script = ("import functools, sys\n"
              "from ackscope.core.worker import Worker\n"
              "from ackscope_testkit.worker_objects import Tally\n"
              f"w = Worker(functools.partial(Tally, {str(tmp_path / 'closed')!r}), 'w')\n"
              "w.call('add', 7)\n"
              "print(w.pid, flush=True)\n"
              "sys.stdin.read()\n")
    parent = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        child = int(parent.stdout.readline())
        assert psutil.Process(child).ppid() == parent.pid
        parent.kill()
        parent.wait()
        wait_for(lambda: not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE,
                 10, "the orphaned worker to end")
        assert (tmp_path / "closed").read_text() == "7"  # what it held, kept before it ended
    finally:
        parent.kill()
        parent.wait()
