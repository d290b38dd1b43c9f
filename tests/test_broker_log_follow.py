"""Following the node's log as `tail -F` does: from its end, across rotation, truncation and deletion, a file
that is not there yet or cannot be read, lines too long to keep, and standard input."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from ackscope.sources.broker_log.follow import MAX_LINE, Batch, FileFollower, StreamFollower, follow


def _append(path, text: str) -> None:
    with open(path, "a") as f:
        f.write(text)


@pytest.fixture
def followed(tmp_path) -> tuple[Path, FileFollower]:
    """An empty log, followed from now."""
    log = tmp_path / "rabbit.log"
    log.write_text("")
    return log, FileFollower(str(log))


def _all(follower) -> list[str]:
    lines = []
    while batch := follower.read().lines:
        lines += batch
    return lines


def test_a_file_is_followed_from_its_end_and_a_partial_line_waits_for_its_newline(tmp_path):
    log = tmp_path / "rabbit.log"
    log.write_text("before we looked\n")
    follower = FileFollower(str(log))
    assert follower.read().lines == ()
    _append(log, "first\nsecond, half")
    assert _all(follower) == ["first"]
    _append(log, " and its end\n")
    assert _all(follower) == ["second, half and its end"]


def test_from_start_reads_what_the_file_already_holds(tmp_path):
    log = tmp_path / "rabbit.log"
    log.write_text("one\ntwo\n")
    assert _all(FileFollower(str(log), from_start=True)) == ["one", "two"]


def test_a_rotated_file_is_read_to_its_end_then_the_new_one_from_its_start(tmp_path, followed):
    log, follower = followed
    _append(log, "old 1\n")
    assert _all(follower) == ["old 1"]
    _append(log, "old 2, written before the rotation\n")
    log.rename(tmp_path / "rabbit.log.0")
    log.write_text("new 1\n")
    assert _all(follower) == ["old 2, written before the rotation", "new 1"]
    _append(log, "new 2\n")
    assert _all(follower) == ["new 2"]


@pytest.mark.parametrize("before, read_before", [
    ("a long line before copytruncate\n", ["a long line before copytruncate"]),
    # A partial line before the truncation belonged to the old content: it is not joined to the new.
    ("complete\nhalf of a line the truncation cut off", ["complete"]),
])
def test_a_file_truncated_in_place_is_read_again_from_its_start(followed, before, read_before):
    log, follower = followed
    _append(log, before)
    assert _all(follower) == read_before
    with open(log, "w") as f:
        f.write("after\n")
    assert _all(follower) == ["after"]


def test_a_deleted_file_is_waited_for_and_its_successor_read_whole(followed):
    log, follower = followed
    log.unlink()
    assert follower.read() == Batch()  # nothing, and nothing said: the old file may still grow
    log.write_text("recreated\n")
    assert _all(follower) == ["recreated"]


def test_a_missing_file_is_said_and_read_whole_once_it_appears(tmp_path):
    log = tmp_path / "rabbit.log"
    follower = FileFollower(str(log))
    batch = follower.read()
    assert batch.lines == () and batch.problem == \
        f"the broker log {log} does not exist (yet): it is looked for again at each poll"
    log.write_text("written after ackscope started\n")
    assert _all(follower) == ["written after ackscope started"]


def test_a_log_that_cannot_be_read_is_one_sentence(tmp_path):
    batch = FileFollower(str(tmp_path)).read()
    assert batch.problem == f"the broker log {tmp_path} cannot be read: Is a directory"
    assert "\n" not in batch.problem


def test_a_line_longer_than_the_limit_is_cut_and_counted_and_the_next_line_is_whole(followed):
    log, follower = followed
    _append(log, "x" * (3 * MAX_LINE))  # no newline yet: more of it may come
    first = follower.read()
    _append(log, "y" * 100 + "\nnext\n")
    rest = _all(follower)
    assert first.truncated == 1 and first.lines == ("x" * MAX_LINE,)
    assert rest == ["next"]


def test_bytes_that_are_not_utf8_do_not_stop_the_reading(followed):
    log, follower = followed
    with open(log, "ab") as f:
        f.write(b"queue \xff\xfe named oddly\r\nnext\n")
    assert _all(follower) == ["queue \ufffd\ufffd named oddly", "next"]


def test_standard_input_is_read_as_it_arrives_and_its_end_is_said():
    read_end, write_end = os.pipe()
    follower = StreamFollower(os.fdopen(read_end, "rb"))
    writer = os.fdopen(write_end, "wb")
    writer.write(b"".join(b"line %d\n" % i for i in range(2500)))
    writer.flush()
    got: list[str] = []
    arrived = threading.Event()
    while len(got) < 2500:
        got += follower.read().lines
        arrived.wait(0.01)
    assert got == [f"line {i}" for i in range(2500)]
    writer.close()
    while (batch := follower.read()).problem is None:
        arrived.wait(0.01)
    assert batch.problem == "the broker log on standard input has ended"


def test_a_dash_means_standard_input(tmp_path, monkeypatch):
    read_end, write_end = os.pipe()
    monkeypatch.setattr("sys.stdin", os.fdopen(read_end, "r"))
    os.write(write_end, b"from a pipe\n")
    os.close(write_end)
    follower = follow("-")
    assert isinstance(follower, StreamFollower)
    lines: list[str] = []
    while not lines:
        lines = list(follower.read().lines)
    assert lines == ["from a pipe"]
    assert isinstance(follow(str(tmp_path / "rabbit.log")), FileFollower)
