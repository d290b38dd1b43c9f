"""The events held beside the snapshots: attributed to the client whose connection they name, kept for the window,
counted since the start under a bound, whatever the log does."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from ackscope.model.events import (BROKER_LOG, CHANNEL_CLOSED, CHANNEL_ERROR, CHANNEL_OPENED, CONNECTION_CLOSED,
                                   CONNECTION_OPENED, CONSUMER_TIMEOUT, EVENT_EXCHANGE, Breaks)
from ackscope.model.snapshot import Connection, MessageStats, Overview, Snapshot
from ackscope.sources import break_ledger
from ackscope.sources.break_ledger import FOLDED, NAMING_SECONDS, BreakLedger
from ackscope.sources.broker_log.watch import BrokerLogWatch
from ackscope.sources.event_exchange.messages import EventMessages
from ackscope.sources.event_exchange.watch import ExchangeRead

DATA = Path(__file__).parent / "data"
# Just after every recorded line (the recordings were made 2026-11-26 08:23-08:26 UTC): a window's end.
RECORDED_AT = datetime(2026, 11, 26, 9, 0, tzinfo=timezone.utc).timestamp()
ERROR_AT = datetime(2026, 11, 26, 8, 23, 19, tzinfo=timezone.utc).timestamp()  # a second after ERROR's lines
ERROR = ("2026-11-26 08:23:18.{0:06d}+00:00 [error] <0.{0}.0> Channel error on connection <0.742.0> "
         "(127.0.0.1:{1} -> 127.0.0.1:5672, vhost: '/', user: 'guest'), channel 1:\n"
         "2026-11-26 08:23:18.{0:06d}+00:00 [error] <0.{0}.0> operation basic.ack caused a channel exception "
         "precondition_failed: unknown delivery tag 1\n")


def _snapshot(*connections: Connection) -> Snapshot:
    return Snapshot(taken_at=0.0, overview=Overview("4.0.5", None, None, None, False, MessageStats()),
                    connections=connections)


def _connection(name: str, connection_name: str, client: str) -> Connection:
    return Connection(name=name, vhost="/", user="guest", connection_name=connection_name, heartbeat_seconds=60,
                      state="running", node=None, peer_host="127.0.0.1", client=client)


def _settled(ledger: BreakLedger, now: float) -> Breaks:
    """The ledger read, then read again once what named no connection has waited its time for a name."""
    ledger.update(None, now=now)
    return ledger.update(None, now=now + NAMING_SECONDS)


@pytest.fixture
def log(tmp_path) -> Path:
    path = tmp_path / "rabbit.log"
    path.write_text("")
    return path


@pytest.mark.parametrize("release", ["3.10.8", "4.0.5", "4.3.6"])
def test_each_recorded_break_is_named_by_the_client_that_opened_its_connection(log, release):
    ledger = BreakLedger(window_seconds=1e9, log=BrokerLogWatch(str(log)))
    log.write_text((DATA / f"broker-log-{release}" / "plain.log").read_text())
    breaks = ledger.update(None, now=RECORDED_AT)
    assert breaks.sources == (BROKER_LOG,) and breaks.problems == () and breaks.lines > 200
    errors = [e for e in breaks.events if e.kind == CHANNEL_ERROR]
    assert errors and all(e.connection_name for e in errors), "every channel error's connection opened in the log"
    by_client = {(k[0], k[3], k[4]): n for k, n in breaks.totals.items()}
    assert by_client[(CHANNEL_ERROR, "orders-worker", "unknown_delivery_tag")] >= 2
    assert by_client[(CONNECTION_OPENED, "per-message-publisher-0", "unknown")] == 1
    assert by_client[(CONNECTION_CLOSED, "dropped-client", "dropped")] == 1
    timeouts = [e for e in breaks.events if e.kind == CONSUMER_TIMEOUT]
    assert len(timeouts) == (0 if release == "4.3.6" else 2), "4.3 logs no consumer timeout"
    assert all(e.connection_name == "stalled-worker" for e in timeouts)


def test_a_connection_a_poll_saw_lends_its_events_its_client_library(log):
    ledger = BreakLedger(window_seconds=60, log=BrokerLogWatch(str(log)))
    ledger.update(_snapshot(_connection("127.0.0.1:47800 -> 127.0.0.1:5672", "billing", "amqplib 0.10.5")), now=0)
    log.write_text(ERROR.format(1, 47800) + ERROR.format(2, 47999))
    assert [(e.connection_name, e.client) for e in ledger.update(None, now=ERROR_AT).events] == [
        ("billing", "amqplib 0.10.5")]
    breaks = _settled(ledger, ERROR_AT)  # no poll named 47999 in NAMING_SECONDS: it is counted as it is
    assert [(e.connection_name, e.client) for e in breaks.events] == [("billing", "amqplib 0.10.5"), (None, None)]
    assert breaks.totals[(CHANNEL_ERROR, "/", "guest", "billing", "unknown_delivery_tag")] == 1
    assert breaks.totals[(CHANNEL_ERROR, "/", "guest", "", "unknown_delivery_tag")] == 1


def test_the_window_keeps_recent_events_and_the_totals_keep_counting(log):
    ledger = BreakLedger(window_seconds=60, log=BrokerLogWatch(str(log)))
    log.write_text(ERROR.format(1, 1000))
    first = _settled(ledger, ERROR_AT)
    assert len(first.events) == 1
    log.write_text(log.read_text() + ERROR.format(2, 1001).replace("08:23:18", "08:24:18"))
    later = _settled(ledger, first.events[0].at + 61)
    assert [e.pid for e in later.events] == ["<0.742.0>"] and later.events[0].at > first.events[0].at
    assert sum(later.totals.values()) == 2
    assert ledger.update(None, now=RECORDED_AT + 3600).events == ()


def test_a_burst_keeps_the_newest_events_and_counts_every_one_under_a_bounded_number_of_counters(log, monkeypatch):
    monkeypatch.setattr(break_ledger, "MAX_TALLIES", 10)
    monkeypatch.setattr(break_ledger, "MAX_WINDOW_EVENTS", 100)
    ledger = BreakLedger(window_seconds=1e9, log=BrokerLogWatch(str(log)))
    opened = "".join(f"2026-11-26 08:23:18.{i:06d}+00:00 [info] <0.{i}.0> connection 127.0.0.1:{i} -> 127.0.0.1:5672"
                     f" - worker-{i}: user 'guest' authenticated and granted access to vhost '/'\n"
                     for i in range(1000))
    log.write_text(opened)
    breaks = ledger.update(None, now=RECORDED_AT)
    assert len(breaks.events) == 100 and breaks.events[-1].connection_name == "worker-999"
    assert len(breaks.totals) == 11 and sum(breaks.totals.values()) == 1000
    assert breaks.totals[(CONNECTION_OPENED, "/", "", FOLDED, "unknown")] == 990


def test_a_log_that_cannot_be_read_is_a_problem_of_its_own_and_the_rest_is_held(tmp_path):
    ledger = BreakLedger(window_seconds=60, log=BrokerLogWatch(str(tmp_path / "missing.log")))
    breaks = ledger.update(_snapshot(), now=1.0)
    assert breaks.problems == (f"the broker log {tmp_path / 'missing.log'} does not exist (yet): it is looked for "
                               "again at each poll",)
    assert breaks.sources == (BROKER_LOG,) and breaks.events == ()


def test_without_a_log_the_ledger_tells_of_no_source():
    breaks = BreakLedger(window_seconds=60).update(_snapshot(), now=1.0)
    assert breaks.sources == () and breaks.totals == {} and breaks.problems == ()


def test_events_of_vhosts_not_watched_are_left_out(log):
    ledger = BreakLedger(window_seconds=60, log=BrokerLogWatch(str(log)), vhosts=lambda v: v != "/")
    log.write_text(ERROR.format(1, 1000) + ERROR.format(2, 1001).replace("vhost: '/'", "vhost: 'billing'"))
    breaks = _settled(ledger, ERROR_AT)
    assert [e.vhost for e in breaks.events] == ["billing"] and sum(breaks.totals.values()) == 1


def test_an_event_of_a_connection_no_poll_has_seen_yet_waits_one_poll_for_its_name(log):
    ledger = BreakLedger(window_seconds=60, log=BrokerLogWatch(str(log)))
    log.write_text(ERROR.format(1, 47800))  # the log tells of the error before the API lists the connection
    assert ledger.update(None, now=ERROR_AT).events == ()
    named = ledger.update(_snapshot(_connection("127.0.0.1:47800 -> 127.0.0.1:5672", "billing", "pika 1.3.2")),
                          now=ERROR_AT)
    assert [(e.connection_name, e.client) for e in named.events] == [("billing", "pika 1.3.2")]
    assert dict(named.totals) == {(CHANNEL_ERROR, "/", "guest", "billing", "unknown_delivery_tag"): 1}


class _Recorded:
    """The event exchange as the ledger reads it, fed the events recorded from a real node."""

    def __init__(self, events, problem=None):
        self.events, self.problem = list(events), problem

    def read(self, take):
        events, self.events = self.events, []
        take(events)
        return ExchangeRead(self.problem is None, 12, 0, self.problem)

    def close(self):
        pass


def _exchanged(release: str = "4.3.6") -> list:
    messages = EventMessages()
    recorded = json.loads((DATA / f"event-exchange-{release}.json").read_text())
    return [e for key, headers in recorded if (e := messages.event(key, headers, now=0.0)) is not None]


def test_from_the_event_exchange_alone_connections_and_channels_are_counted_by_client():
    breaks = BreakLedger(window_seconds=1e9, exchange=_Recorded(_exchanged())).update(None, now=RECORDED_AT)
    assert breaks.sources == (EVENT_EXCHANGE,) and breaks.exchange_consuming and breaks.exchange_messages == 12
    by_kind = {(k[0], k[3]): n for k, n in breaks.totals.items() if k[3] == "orders-worker"}
    assert by_kind == {(CONNECTION_OPENED, "orders-worker"): 1, (CONNECTION_CLOSED, "orders-worker"): 1,
                       (CHANNEL_OPENED, "orders-worker"): 3, (CHANNEL_CLOSED, "orders-worker"): 3}


def test_with_the_log_too_connections_are_the_logs_and_channels_the_exchanges(log):
    ledger = BreakLedger(window_seconds=1e9, log=BrokerLogWatch(str(log)), exchange=_Recorded(_exchanged()))
    breaks = _settled(ledger, RECORDED_AT)
    assert breaks.sources == (BROKER_LOG, EVENT_EXCHANGE)
    kinds = {k[0] for k in breaks.totals}
    assert kinds == {CHANNEL_OPENED, CHANNEL_CLOSED}, "the log (empty here) counts the connections, with why"


def test_an_event_exchange_that_cannot_be_read_is_a_problem_of_its_own(log):
    exchange = _Recorded([], problem="the event exchange at amqp://probe@host:5672/%2F: 403 ACCESS_REFUSED - "
                                     "access to exchange 'amq.rabbitmq.event' in vhost '/' refused for user 'probe'")
    breaks = BreakLedger(window_seconds=60, log=BrokerLogWatch(str(log)), exchange=exchange).update(None, now=1.0)
    assert breaks.problems == (exchange.problem,) and breaks.log_readable and not breaks.exchange_consuming
