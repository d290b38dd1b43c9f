"""Channels that keep closing on a connection that stays open, named from polls alone (issue 56): what polls saw of
each connection, the broker's own churn counters beside it, and why, where the broker's log is read. Real clients on
every release: tests/test_breaks.py."""

from __future__ import annotations

from dataclasses import replace

from snapshot_builders import OVERVIEW, channel, connection, snapshot, stats

from ackscope.diagnosis.channel_turnover import ChannelTurnover, Closed, closed_between
from ackscope.diagnosis.rules import Context, evaluate
from ackscope.model.events import BROKER_LOG, CHANNEL_ERROR, BrokerEvent, Breaks
from ackscope.model.snapshot import Churn

CHURNER, HEALTHY = "127.0.0.1:5001 -> 127.0.0.1:5672", "127.0.0.1:5002 -> 127.0.0.1:5672"


def _poll(t: float, churner: tuple[int, ...], *, deliveries: int = 1, closed: int | None = None,
          connections_closed: int = 0, healthy: bool = True):
    """A poll at `t`: the churner's connection with channels numbered `churner` (each with `deliveries` taken), a
    healthy client's connection with its one long-lived channel, and the broker's churn counters."""
    channels = [channel(f"{CHURNER} ({n})", number=n, connection=CHURNER, connection_name="pika-double-ack",
                        message_stats=stats(deliver_get=deliveries, ack=deliveries)) for n in churner]
    if healthy:
        channels.append(channel(f"{HEALTHY} (1)", connection=HEALTHY, connection_name="billing-healthy",
                                message_stats=stats(deliver_get=int(t), ack=int(t))))
    churn = None if closed is None else Churn(10, 10 + connections_closed, 100 + closed, 100 + closed)
    return snapshot(t, overview=replace(OVERVIEW, churn=churn), channels=channels,
                    connections=[connection(CHURNER, connection_name="pika-double-ack"),
                                 connection(HEALTHY, connection_name="billing-healthy")])


def _churn(polls, breaks=None, memory=True):
    turnover = ChannelTurnover(300.0)
    seen = None
    for p in polls:
        seen = turnover.update(p)
    ctx = Context(polls[-1], polls[-2], window=polls[0], turnover=seen if memory else None, breaks=breaks)
    return [f for f in evaluate(ctx) if f.rule == "channel-churn"]


def test_a_name_gone_or_a_counter_fallen_is_a_channel_closed_on_a_connection_that_stayed():
    before = _poll(0, (1, 2, 3), deliveries=5)
    assert closed_between(before, _poll(10, (1,), deliveries=5)) == {CHURNER: Closed(seen=2)}
    # pika reuses the lowest free number: the same name with lower counters is a new channel.
    assert closed_between(before, _poll(10, (1, 2, 3), deliveries=1)) == {CHURNER: Closed(seen=3)}
    assert closed_between(before, _poll(10, (1, 2, 3), deliveries=9)) == {}
    # A connection that closed took its channels: no churn of a connection that stays.
    gone = replace(_poll(10, ()), connections=(connection(HEALTHY, connection_name="billing-healthy"),))
    assert closed_between(before, gone) == {}


def test_a_connection_seen_closing_channels_poll_after_poll_is_named_and_why_is_not_known_without_the_log():
    # A channel a poll, each gone at the next and not back: counted once a second poll has not listed it again.
    polls = [_poll(t, (1, 2 + i)) for i, t in enumerate(range(0, 45, 5))]
    [f] = _churn(polls)
    assert (f.severity, f.object, f.connection_name) == ("warning", f"connection {CHURNER}", "pika-double-ack")
    assert f.evidence["channels_seen_closed_at_least"] == 7 and f.evidence["channels_open_now"] == 2
    assert f.evidence["reason"].startswith("not known: give --broker-log")
    assert "inferred" not in f.evidence
    # The log read: the broker's own reason, or none (the client closes its own).
    error = BrokerEvent(50.0, CHANNEL_ERROR, BROKER_LOG, connection=CHURNER, channel=2,
                        reason="precondition_failed", text="unknown delivery tag 1")
    [f] = _churn(polls, Breaks(60.0, (BROKER_LOG,), (error,)))
    assert f.evidence["reason"].startswith("the broker closed 1 of them on an error") and "unknown delivery tag" in \
        f.evidence["reason"]
    [f] = _churn(polls, Breaks(60.0, (BROKER_LOG,)))
    assert "the client closes them itself" in f.evidence["reason"]


def test_a_healthy_connection_and_one_closed_channel_are_never_churn():
    steady = [_poll(t, (1,)) for t in range(0, 70, 10)]
    assert _churn(steady) == []
    once = steady[:3] + [_poll(t, (2,)) for t in range(30, 70, 10)]
    assert _churn(once) == []
    # Even where the broker counts channels closing: one close seen is no client churning, and the broker's count
    # (all clients together) names nobody.
    counted = [replace(p, overview=replace(OVERVIEW, churn=Churn(10, 10, 100 + i * 10, 100 + i * 10)))
               for i, p in enumerate(once)]
    assert _churn(counted) == []


def test_where_polls_saw_connections_close_few_channels_the_broker_count_names_none():
    """A connection closing with its channels closes them all: the broker's channel closes less its connection
    closes count no churn on connections that stay, and name nobody (the field cases' restarting workers)."""
    def two(t, i):
        p = _poll(t, (1, 2) if i % 3 == 0 else (1,), closed=i * 10)
        other = channel(f"{HEALTHY} ({2 + i})", connection=HEALTHY, connection_name="billing-healthy")
        return replace(p, channels=p.channels + (other,))
    assert _churn([two(t, i) for i, t in enumerate(range(0, 40, 10))]) == []


def test_channels_of_connections_that_closed_are_no_churn_of_those_that_stay():
    # A connection per message: each closed channel went with its connection.
    polls = [_poll(t, (1,), closed=i * 10, connections_closed=i * 10) for i, t in enumerate(range(0, 70, 10))]
    assert _churn(polls) == []


def test_without_memory_the_window_start_and_end_say_what_they_can():
    polls = [_poll(0, tuple(range(1, 9))), _poll(30, (1, 9)), _poll(60, (1,))]
    [f] = _churn(polls, memory=False)
    assert f.evidence["channels_seen_closed_at_least"] == 7


def test_where_the_windows_first_poll_has_no_counts_the_poll_before_gives_them():
    """A node's first seconds list no churn counts (measured on 4.3.6): the window's start then says nothing, and
    the poll before does."""
    polls = [_poll(0, (1,))] + [_poll(t, (1, t), closed=t) for t in range(5, 45, 5)]
    [f] = _churn(polls)
    assert f.evidence["broker_channels_closed"] == 5 and f.evidence["broker_counted_over_seconds"] == 5
    assert f.evidence["channels_seen_closed_at_least"] == 6 and f.connection_name == "pika-double-ack"
    assert "broker_channels_closed" not in _churn([replace(p, overview=OVERVIEW) for p in polls])[0].evidence


def test_channel_numbers_passed_over_between_polls_count_as_closed_no_more_than_the_broker_counted():
    """The Java client numbers channels upwards: a client opening a channel every 2 s, polled every 5 s, shows one
    channel at a poll (or none, where the management plugin has not listed it yet), its number a few above the last.
    The numbers passed over were opened and closed in between: inferred, up to the broker's own count of channels
    closed over the same polls."""
    def climbing(t: int, listed: bool, closed_per_poll: int = 3):
        n = 2 + t // 2  # channel 1 stays: the one that declared the queue
        return _poll(t, (1, n) if listed else (1,), closed=(t // 5) * closed_per_poll)
    polls = [climbing(t, listed=(t // 5) % 3 != 1) for t in range(0, 65, 5)]
    [f] = _churn(polls)
    ev = f.evidence
    assert ev["channels_seen_closed_at_least"] >= 3 and ev["channels_inferred_closed"] >= 10, ev
    assert ev["inferred"].startswith("channel numbers the client passed over") and "inferred from" in f.explanation
    # The broker counted fewer closes than numbers passed over: no more than its count is inferred.
    few = [climbing(t, listed=(t // 5) % 3 != 1, closed_per_poll=1) for t in range(0, 65, 5)]
    [f] = _churn(few)
    ev = f.evidence
    assert 0 < ev["channels_inferred_closed"] and ev["channels_inferred_closed"] + ev["channels_seen_closed_at_least"] \
        <= 12, ev  # what the broker counted over the minute
    # Without the broker's count, nothing is inferred: what polls saw stands alone.
    uncounted = [replace(p, overview=OVERVIEW) for p in polls]
    [f] = _churn(uncounted)
    assert "channels_inferred_closed" not in f.evidence


def test_a_channel_number_a_client_picks_itself_closes_nothing():
    """A client may open channel 100 itself beside channel 1: the numbers between were never opened. The broker
    counted no channel closed meanwhile, and no poll saw the client close a channel: nothing inferred, nobody named,
    even where other clients close channels elsewhere (the broker's count is for all of them)."""
    quiet = [_poll(t, (1,) if t < 20 else (1, 100), closed=0) for t in range(0, 70, 10)]
    assert _churn(quiet) == []
    turnover = ChannelTurnover(300.0)
    for p in quiet:
        seen = turnover.update(p)
    assert CHURNER not in seen
    elsewhere = [_poll(t, (1,) if t < 20 else (1, 100), closed=t * 10) for t in range(0, 70, 10)]
    assert _churn(elsewhere) == []
    # Numbers that wrap back to 1 after channel_max pass over nothing.
    wrapped = [_poll(t, (2047,) if t < 20 else (1, 3), closed=t) for t in range(0, 70, 10)]
    turnover = ChannelTurnover(300.0)
    for p in wrapped:
        seen = turnover.update(p)
    assert seen[CHURNER].inferred == 0


A, B = "10.0.0.1:40001 -> 10.0.0.9:5672", "10.0.0.2:40002 -> 10.0.0.9:5672"


def _ch(conn: str, n: int | None, done: int = 1, name: str | None = None):
    return channel(name or f"{conn} ({n})", number=n, connection=conn, connection_name=conn[:9],
                   message_stats=stats(deliver_get=done, ack=done, publish=done))


def _at(t: float, channels, connections=(A,), closed: int | None = None, **kw):
    churn = None if closed is None else Churn(10, 10, closed, closed)
    return snapshot(t, overview=replace(OVERVIEW, churn=churn), channels=channels,
                    connections=[connection(c, connection_name=c[:9], **kw) for c in connections])


def _turnover(polls, window: float = 300.0):
    turnover, seen = ChannelTurnover(window), {}
    for p in polls:
        seen = turnover.update(p)
    return dict(seen)


def test_what_others_close_pays_for_no_number_a_client_picked_itself():
    """A review's inputs: a client closing one channel and opening channel 100 itself while others close channels;
    two such clients claiming the same count of the broker's; a node restart lowering the summed count."""
    others = [_at(0, [_ch(A, 1), _ch(A, 2)], closed=1000), _at(10, [_ch(A, 1), _ch(A, 100)], closed=1020),
              _at(20, [_ch(A, 1), _ch(A, 100)], closed=1040)]
    assert _turnover(others) == {A: Closed(seen=1)}
    two = [_at(0, [_ch(A, 1), _ch(A, 2), _ch(B, 1), _ch(B, 2)], (A, B), closed=0),
           _at(10, [_ch(A, 1), _ch(A, 50), _ch(B, 1), _ch(B, 50)], (A, B), closed=20),
           _at(20, [_ch(A, 1), _ch(A, 50), _ch(B, 1), _ch(B, 50)], (A, B), closed=40)]
    assert _turnover(two) == {A: Closed(seen=1), B: Closed(seen=1)}
    restarted = [_at(0, [_ch(A, 1), _ch(A, 2)], closed=3000), _at(10, [_ch(A, 1), _ch(A, 100)], closed=3000),
                 _at(20, [_ch(A, 1), _ch(A, 100)], closed=2000), _at(30, [_ch(A, 1), _ch(A, 100)], closed=2000)]
    assert _turnover(restarted) == {A: Closed(seen=1)}


def test_a_channel_missing_from_polls_and_back_with_its_counters_grown_never_closed():
    """A paged list, or a node's plugin left unread, leaves channels out of a poll or two: back with their counters
    grown, they never closed, and the broker counted none closed."""
    pool = [_at(t, [_ch(A, n, done=t + 1) for n in range(1, 41)] if t not in (50, 60) else [], closed=100)
            for t in range(0, 310, 10)]
    assert _turnover(pool) == {}
    # Listed again only after they were counted (no broker count to check against): taken back.
    late = [_at(t, [_ch(A, n, done=t + 1) for n in (1, 2, 3)] if t not in (10, 20) else [_ch(A, 1, done=t + 1)])
            for t in range(0, 40, 10)]
    assert _turnover(late) == {}


def test_counters_that_fall_close_no_channel_named_by_its_process():
    """The Prometheus plugin names a channel by its process and sums its counters over the queues it touched: a
    deleted queue lowers the sum, and a process is never reused."""
    pid = "<rabbit@n1.1700000000.1234.0>"
    polls = [_at(2 * i, [_ch(A, None, done=d, name=pid)]) for i, d in enumerate([10, 2, 3, 12, 4, 5, 14, 6, 7])]
    assert _turnover(polls) == {}


def test_a_new_connection_under_an_old_ones_name_inherits_none_of_its_channels():
    old = [_ch(A, n, done=50) for n in (1, 2, 3)]
    polls = [_at(0, old, connected_at=1000.0), _at(5, [_ch(A, 1)], connected_at=1004.0),
             _at(10, [_ch(A, 1, done=2)], connected_at=1004.0)]
    assert _turnover(polls) == {}


def test_a_poll_older_than_the_last_one_is_passed_over():
    def a(ns, t):
        return [_ch(A, n, done=t + 1) for n in ns]
    polls = [_at(10, a((1, 2, 3, 4), 10)), _at(20, a((1,), 20)), _at(30, a((1,), 30)), _at(5, a((1, 2, 3, 4), 5)),
             _at(40, a((1,), 40)), _at(50, a((1,), 50))]
    assert _turnover(polls) == {A: Closed(seen=3)}


def test_polls_without_the_brokers_count_leave_the_rest_of_the_window_its_count():
    """A node's first seconds list no churn counts: the polls that have them still bound (and allow) what is
    inferred."""
    polls = [_at(t, [_ch(A, 1)] + ([_ch(A, 2 + t // 2)] if t % 10 == 0 else []),
                 closed=None if t < 6 else 100 + t) for t in range(0, 62, 2)]
    seen = _turnover(polls)
    assert seen[A].seen >= 3 and seen[A].inferred >= 4, seen
