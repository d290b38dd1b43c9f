"""The event exchange's messages, recorded from 3.10.8, 4.0.5 and 4.3.6 (tests/data/record_event_exchange.py), as
events: each connection and channel named by the client that opened it, a channel's close too (its message names
only the channel's process), under a bound."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ackscope.model.events import (CHANNEL_CLOSED, CHANNEL_OPENED, CONNECTION_CLOSED, CONNECTION_OPENED,
                                   EVENT_EXCHANGE)
from ackscope.sources.event_exchange.messages import EventMessages

DATA = Path(__file__).parent / "data"
RELEASES = ["3.10.8", "4.0.5", "4.3.6"]


def _events(release: str, messages: EventMessages | None = None) -> list:
    messages = messages or EventMessages()
    recorded = json.loads((DATA / f"event-exchange-{release}.json").read_text())
    return [e for key, headers in recorded if (e := messages.event(key, headers, now=0.0)) is not None]


@pytest.mark.parametrize("release", RELEASES)
def test_each_connection_and_channel_is_named_by_the_client_that_opened_it(release):
    events = _events(release)
    assert [(e.kind, e.connection_name, e.channel) for e in events] == [
        (CONNECTION_OPENED, "orders-worker", None),
        (CHANNEL_OPENED, "orders-worker", 1), (CHANNEL_OPENED, "orders-worker", 2),
        (CHANNEL_CLOSED, "orders-worker", 2),  # closed by the client
        # The number again (pika reuses it), closed by the broker: a double ack.
        (CHANNEL_OPENED, "orders-worker", 2), (CHANNEL_CLOSED, "orders-worker", 2),
        (CHANNEL_CLOSED, "orders-worker", 1),
        (CONNECTION_CLOSED, "orders-worker", None),
        (CONNECTION_OPENED, None, None), (CONNECTION_CLOSED, None, None)]  # no name, dropped without a close
    opened = events[0]
    assert opened.client == "Pika Python Client Library 1.4.4" and (opened.vhost, opened.user) == ("/", "guest")
    assert opened.connection.startswith("127.0.0.1:") and " -> 127.0.0.1:" in opened.connection
    assert opened.pid.startswith("<ackscope-events")
    # What the close of a channel or a connection does not carry, its open told.
    assert {(e.connection, e.vhost, e.user, e.client) for e in events[:8]} == {
        (opened.connection, "/", "guest", "Pika Python Client Library 1.4.4")}
    assert all(e.source == EVENT_EXCHANGE and e.reason is None and e.at > 1.7e9 for e in events)


def test_a_channel_opened_before_ackscope_looked_closes_unnamed():
    recorded = json.loads((DATA / "event-exchange-4.3.6.json").read_text())
    closes = [(k, h) for k, h in recorded if k == "channel.closed"]
    messages = EventMessages()
    (e,) = [messages.event(k, h, now=5.0) for k, h in closes[:1]]
    assert e.kind == CHANNEL_CLOSED and e.connection is None and e.connection_name is None and e.vhost is None


def test_what_is_remembered_open_is_bounded():
    messages = EventMessages(max_remembered=2)
    for n in range(5):
        messages.event("connection.created", {"pid": f"<0.{n}.0>", "name": f"peer:{n} -> host",
                                              "user_provided_name": f"c{n}"}, now=0.0)
    assert messages.event("connection.closed", {"pid": "<0.0.0>"}, now=0.0).vhost is None, "forgotten"
    kept = messages.event("connection.created", {"pid": "<0.9.0>", "vhost": "v", "user": "u"}, now=0.0)
    assert messages.event("connection.closed", {"pid": kept.pid}, now=0.0).vhost == "v"


@pytest.mark.parametrize("key, headers", [("consumer.created", {}), ("queue.deleted", {"name": "q"}),
                                          ("connection.created", None), ("channel.closed", {"pid": 5})])
def test_an_event_it_does_not_read_or_a_header_of_another_type_is_no_crash(key, headers):
    e = EventMessages().event(key, headers, now=7.0)
    assert e is None or e.at == 7.0
