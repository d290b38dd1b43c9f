"""The event exchange's messages as events. Each is a routing key (`connection.created`) and headers, with an
empty body; measured on 3.10.8 and 4.3.6 (tests/test_event_exchange_messages.py has them):
- connection.created: `name` (the broker's "peer -> local"), `pid`, `user_provided_name`, `vhost`, `user`,
  `client_properties` as Erlang terms (`{<<"product">>,longstr,<<"Pika Python Client Library">>}`);
- connection.closed: `name`, `pid`, `user_provided_name`, `client_properties`, but no vhost nor user;
- channel.created: `pid`, `connection` (its connection's pid), `number`, `name`, `vhost`, `user`;
- channel.closed: its `pid` alone (4.0 and 4.3 add `consumer_count`).
So a channel's close is known by its connection only where its open was seen: what was seen open is remembered,
bounded, until it closes."""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, NamedTuple

from ackscope.model.events import (CHANNEL_CLOSED, CHANNEL_OPENED, CONNECTION_CLOSED, CONNECTION_OPENED,
                                   EVENT_EXCHANGE, BrokerEvent)

from .. import client_properties

# The routing keys ackscope binds: the consumer.* events add nothing the polls lack (4.3's silent cancel of a
# timed-out quorum consumer sends no consumer.deleted: measured on 4.3.6).
BINDINGS = ("connection.created", "connection.closed", "channel.created", "channel.closed")
# Connections and channels remembered open at most: a client opening a connection per message, none closed in
# sight, must not grow it.
MAX_REMEMBERED = 50_000
_PROPERTY = re.compile(r'\{<<"(?P<key>[^"]*)">>,longstr,<<"(?P<value>.*)">>\}', re.S)


class _Connection(NamedTuple):
    pid: str | None
    name: str | None
    connection_name: str | None
    client: str | None
    vhost: str | None
    user: str | None


class _Channel(NamedTuple):
    connection: _Connection
    number: int | None


_UNKNOWN = _Channel(_Connection(None, None, None, None, None, None), None)  # a channel opened before ackscope looked


def _text(v: Any) -> str | None:
    if isinstance(v, bytes):
        v = v.decode("utf-8", "replace")
    return v if isinstance(v, str) and v else None


def _number(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def client(raw: Any) -> str | None:
    """The client library and version from the event's client_properties (Erlang terms, one per property)."""
    props = {}
    for term in raw if isinstance(raw, list) else ():
        found = _PROPERTY.fullmatch(_text(term) or "")
        if found:
            props[found["key"]] = found["value"]
    return client_properties.client(props)


class EventMessages:
    """What the event exchange's messages say, in order: a channel's close is named by the open it remembers."""

    def __init__(self, max_remembered: int = MAX_REMEMBERED):
        self.max_remembered = max_remembered
        self._connections: OrderedDict[str, _Connection] = OrderedDict()  # by pid
        self._channels: OrderedDict[str, _Channel] = OrderedDict()  # by pid

    def event(self, routing_key: str, headers: Mapping[str, Any] | None, now: float) -> BrokerEvent | None:
        """The event of one message, or None for one it does not know (`now` where it has no timestamp)."""
        h = headers or {}
        stamp = _number(h.get("timestamp_in_ms"))
        at = stamp / 1000 if stamp is not None else now
        pid = _text(h.get("pid"))
        if routing_key == "connection.created":
            c = _Connection(pid, _text(h.get("name")), _text(h.get("user_provided_name")),
                            client(h.get("client_properties")), _text(h.get("vhost")), _text(h.get("user")))
            self._remember(self._connections, pid, c)
            return BrokerEvent(at, CONNECTION_OPENED, EVENT_EXCHANGE, c.name, pid, c.connection_name, c.client,
                               c.vhost, c.user)
        if routing_key == "connection.closed":
            known = self._connections.pop(pid, None) if pid else None
            return BrokerEvent(at, CONNECTION_CLOSED, EVENT_EXCHANGE, _text(h.get("name")), pid,
                               _text(h.get("user_provided_name")), client(h.get("client_properties")),
                               known.vhost if known else None, known.user if known else None)
        if routing_key == "channel.created":
            owner = _text(h.get("connection"))
            # Its own name is its connection's and its number: "peer -> local (1)".
            name = (_text(h.get("name")) or "").rsplit(" (", 1)[0] or None
            c = self._connections.get(owner or "") or _Connection(owner, name, None, None, _text(h.get("vhost")),
                                                                  _text(h.get("user")))
            ch = _Channel(c, _number(h.get("number")))
            self._remember(self._channels, pid, ch)
            return self._channel_event(at, CHANNEL_OPENED, ch)
        if routing_key == "channel.closed":
            ch = self._channels.pop(pid, None) if pid else None
            return self._channel_event(at, CHANNEL_CLOSED, ch or _UNKNOWN)
        return None

    @staticmethod
    def _channel_event(at: float, kind: str, ch: _Channel) -> BrokerEvent:
        c = ch.connection
        return BrokerEvent(at, kind, EVENT_EXCHANGE, c.name, c.pid, c.connection_name, c.client, c.vhost, c.user,
                           ch.number)

    def _remember(self, held: OrderedDict, pid: str | None, value) -> None:
        if pid is None:
            return
        held[pid] = value
        if len(held) > self.max_remembered:
            held.popitem(last=False)
