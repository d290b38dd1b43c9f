"""The events the sources tell of, held beside the snapshots (model.events.Breaks): read at each poll, each
attributed to the client whose connection it names, kept for the recent window, and counted since the start.

A connection is named in the log by the broker's name for it ("peer -> local"). Its client's own name comes from
the line that granted it its vhost (4.x and 3.10 both print it there), or from a poll that saw it; its library
and version from a poll only. A connection shorter than a poll is seen by the log and the event exchange alone.

Where both are read, each kind of event is counted from one of them: connections opened and closed from the log,
which says why each closed, and channels opened and closed from the event exchange, which alone tells of them;
the event exchange's connections then only name their clients.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import replace
from types import MappingProxyType

from ackscope.model.events import (BROKER_LOG, CONNECTION_CLOSED, CONNECTION_OPENED, EVENT_EXCHANGE, BrokerEvent,
                                   Breaks, TallyKey, cause)
from ackscope.model.snapshot import Snapshot

from .broker_log.watch import BrokerLogWatch
from .event_exchange.watch import EventExchangeWatch

# Events the window holds at most, the newest: a burst beyond it is counted in the totals, not kept.
MAX_WINDOW_EVENTS = 10_000
# Counters kept apart by client and cause at most; beyond, a new one is counted under FOLDED (cardinality).
MAX_TALLIES = 5_000
FOLDED = "(folded)"
# Seconds an event of a connection nobody has named yet waits for a poll that names it: the management API listed a
# new connection 4 s after the log told of its first error (statistics every 0.5 s; RabbitMQ's default is 5 s).
NAMING_SECONDS = 15.0
# Connections whose names are remembered, the most recently seen: a connection per message must not grow it.
MAX_CONNECTIONS = 50_000


class BreakLedger:
    def __init__(self, window_seconds: float, log: BrokerLogWatch | None = None,
                 vhosts: Callable[[str], bool] = lambda vhost: True, exchange: EventExchangeWatch | None = None):
        """`vhosts`: whether a vhost is watched (--include-vhosts, --exclude-vhosts); an event that names none (a
        connection refused before it chose one) is kept."""
        self.window_seconds = window_seconds
        self._log = log
        self._exchange = exchange
        self._vhosts = vhosts
        self._window: deque[BrokerEvent] = deque(maxlen=MAX_WINDOW_EVENTS)
        self._totals: dict[TallyKey, int] = {}
        # The broker's name for a connection -> (connection_name, client library), as last learned.
        self._names: OrderedDict[str, tuple[str | None, str | None]] = OrderedDict()
        # Events of connections nobody named yet, by connection, with when they were read, held NAMING_SECONDS at
        # most: the log can tell of a connection before the poll that sees it, and a counter once counted under no
        # name keeps it. By connection, so that a poll looks at each connection once, not at each event.
        self._unnamed: dict[str, deque[tuple[BrokerEvent, float]]] = {}
        self._held = 0
        self._now = 0.0  # the time of the update in progress

    @property
    def sources(self) -> tuple[str, ...]:
        return tuple(name for name, source in ((BROKER_LOG, self._log), (EVENT_EXCHANGE, self._exchange))
                     if source is not None)

    def update(self, snapshot: Snapshot | None, now: float) -> Breaks:
        """Read every source once: `snapshot` (None where the poll failed) names the connections it saw."""
        if snapshot is not None:
            for c in snapshot.connections:
                self._learn(c.name, c.connection_name or None, c.client)
        for connection in list(self._unnamed):
            waiting, named = self._unnamed[connection], connection in self._names
            while waiting and (named or now - waiting[0][1] >= NAMING_SECONDS):
                self._settle(self._attributed(waiting.popleft()[0]))
                self._held -= 1
            if not waiting:
                del self._unnamed[connection]
        self._now = now
        read = self._log.read(self._take) if self._log is not None else None
        exchanged = self._exchange.read(self._take_exchanged) if self._exchange is not None else None
        while self._window and self._window[0].at < now - self.window_seconds:
            self._window.popleft()
        breaks = Breaks(at=now, sources=self.sources, events=tuple(self._window),
                        totals=MappingProxyType(dict(self._totals)),
                        problems=tuple(r.problem for r in (read, exchanged) if r is not None and r.problem))
        if read is not None:
            breaks = replace(breaks, log_readable=not read.problem, lines=read.counts.lines,
                             unknown_lines=read.counts.unknown, first_unknown=read.counts.first_unknown,
                             not_understood=read.counts.not_understood,
                             first_not_understood=read.counts.first_not_understood, truncated_lines=read.truncated)
        if exchanged is not None:
            breaks = replace(breaks, exchange_consuming=exchanged.consuming, exchange_messages=exchanged.messages,
                             exchange_dropped=exchanged.dropped)
        return breaks

    def close(self) -> None:
        for source in (self._log, self._exchange):
            if source is not None:
                source.close()

    def _learn(self, connection: str, connection_name: str | None, client: str | None) -> None:
        known = self._names.pop(connection, (None, None))
        self._names[connection] = (connection_name or known[0], client or known[1])
        if len(self._names) > MAX_CONNECTIONS:
            self._names.popitem(last=False)

    def _take_exchanged(self, events: list[BrokerEvent]) -> None:
        if self._log is None:
            self._take(events)
            return
        for e in events:  # the log's connections are counted, with why each closed: these only name clients
            if e.kind == CONNECTION_OPENED and e.connection:
                self._learn(e.connection, e.connection_name, e.client)
        self._take([e for e in events if e.kind not in (CONNECTION_OPENED, CONNECTION_CLOSED)])

    def _take(self, events: list[BrokerEvent]) -> None:
        watched, names, settle = self._vhosts, self._names, self._settle
        for e in events:
            if e.vhost is not None and not watched(e.vhost):
                continue
            if e.connection:
                if e.kind == CONNECTION_OPENED:
                    self._learn(e.connection, e.connection_name, e.client)
                if e.connection not in names and not e.connection_name and self._held < MAX_WINDOW_EVENTS:
                    self._unnamed.setdefault(e.connection, deque()).append((e, self._now))
                    self._held += 1
                    continue
                e = self._attributed(e)
            settle(e)

    def _attributed(self, e: BrokerEvent) -> BrokerEvent:
        name, client = self._names.get(e.connection, (None, None))
        # A new record only where there is something to add: at a burst of errors from a connection the log never
        # saw open, a copy per event was a third of the reading's cost.
        if client or (name and not e.connection_name):
            return e._replace(connection_name=e.connection_name or name, client=client)
        return e

    def _settle(self, e: BrokerEvent) -> None:
        self._window.append(e)
        self._count(e)

    def _count(self, e: BrokerEvent) -> None:
        key = (e.kind, e.vhost or "", e.user or "", e.connection_name or "", cause(e))
        if key not in self._totals and len(self._totals) >= MAX_TALLIES:
            key = (e.kind, e.vhost or "", "", FOLDED, cause(e))
        self._totals[key] = self._totals.get(key, 0) + 1
