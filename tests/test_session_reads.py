"""Which AMQP 1.0 connections are asked for their sessions at a poll (sources/management/session_reads.py), from
small inputs. Live on 4.3, a receiver that starts holding deliveries among idle connections is named within two
polls: tests/test_protocols_4x.py."""

from __future__ import annotations

from dataclasses import replace

from ackscope.model.snapshot import AMQP10, Connection, Link
from ackscope.sources.management.session_reads import SessionReads


def _connection(name: str, octets: tuple[int, int] | None = (100, 200)) -> Connection:
    return Connection(name, "/", "app", "", 60, "running", "rabbit@a", "127.0.0.1", None, protocol=AMQP10,
                      octets=octets)


def _link(connection: str) -> Link:
    return Link("/", "app", connection, 0, 1, "r", "receiver", "/queues/q", "q", False, 10, 0,
                session_unsettled=0, session_receivers=1)


def _answer(reads: SessionReads, connections: list[Connection], now: float) -> list[str]:
    """Plan a poll at `now`, answer every connection asked; the names asked."""
    asked, _ = reads.plan(connections, now)
    for c in asked:
        reads.answered(c, [_link(c.name)], now)
    return [c.name for c in asked]


def test_a_connection_is_asked_when_new_and_its_links_carried_while_its_octets_stand_still():
    reads, idle = SessionReads(), _connection("idle")
    assert _answer(reads, [idle], 1000.0) == ["idle"]
    asked, carried = reads.plan([idle], 1010.0)
    assert asked == [] and [k.connection for k in carried] == ["idle"]
    assert carried[0].read_at == 1000.0  # said to be as of the poll that read it


def test_octets_that_moved_either_way_have_the_connection_asked_again():
    reads = SessionReads()
    _answer(reads, [_connection("a"), _connection("b")], 1000.0)
    moved = [_connection("a", (100, 5000)), _connection("b", (101, 200))]  # a delivered to; b sent a settlement
    assert _answer(reads, moved, 1010.0) == ["a", "b"]
    assert _answer(reads, moved, 1020.0) == []


def test_a_connection_without_octet_counts_is_asked_at_every_poll():
    reads, unknown = SessionReads(), _connection("stats off", None)
    assert [_answer(reads, [unknown], t) for t in (1000.0, 1010.0, 1020.0)] == [["stats off"]] * 3


def test_an_unanswered_connection_is_asked_again_and_a_closed_one_forgotten():
    reads, c = SessionReads(), _connection("c")
    assert [x.name for x in reads.plan([c], 1000.0)[0]] == ["c"]  # asked, never answered (the deadline passed)
    assert [x.name for x in reads.plan([c], 1010.0)[0]] == ["c"]
    _answer(reads, [c], 1010.0)
    assert reads.plan([], 1020.0) == ([], [])
    assert [x.name for x in reads.plan([c], 1030.0)[0]] == ["c"]  # listed again: a new connection to it


def test_idle_connections_are_each_asked_once_a_refresh_period_spread_over_the_polls():
    reads = SessionReads(refresh_seconds=100.0)
    idle = [_connection(f"idle {i}") for i in range(1000)]
    assert len(_answer(reads, idle, 0.0)) == 1000
    per_poll = [len(_answer(reads, idle, t)) for t in range(10, 210, 10)]
    assert sum(per_poll[:10]) == 1000 and sum(per_poll[10:]) == 1000  # each once in each 100 s
    assert max(per_poll) < 200, per_poll  # a share at each poll, never all at once


def test_a_carried_link_is_the_one_last_read_not_a_copy_of_another_connections():
    reads = SessionReads()
    a, b = _connection("a"), _connection("b")
    reads.answered(a, [replace(_link("a"), credit=3)], 1000.0)
    reads.answered(b, [_link("b")], 1000.0)
    _, carried = reads.plan([a, b], 1010.0)
    assert {(k.connection, k.credit) for k in carried} == {("a", 3), ("b", 10)}


def test_empty_frames_keep_an_idle_connection_idle_unless_it_held_something():
    reads = SessionReads()
    quiet, holding = _connection("quiet"), _connection("holding")
    reads.answered(quiet, [_link("quiet")], 1000.0)
    reads.answered(holding, [replace(_link("holding"), session_unsettled=3)], 1000.0)
    kept_alive = [_connection("quiet", (116, 208)), _connection("holding", (116, 208))]  # two empty frames, one
    assert [c.name for c in reads.plan(kept_alive, 1015.0)[0]] == ["holding"]


def test_more_than_empty_frames_can_carry_has_the_connection_asked():
    reads = SessionReads()
    reads.answered(_connection("a"), [_link("a")], 1000.0)
    reads.answered(_connection("b"), [_link("b")], 1000.0)
    many = _connection("a", (100, 200 + 8 * 20))  # twenty 8-byte frames in 10 s: more than one a second
    odd = _connection("b", (100, 236))  # 36 bytes: no whole number of empty frames (a flow frame, say)
    assert [c.name for c in reads.plan([many, odd], 1010.0)[0]] == ["a", "b"]
