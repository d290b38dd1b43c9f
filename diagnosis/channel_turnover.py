"""Channels seen to close on connections that stay open: memory beside the pure rules, like Holding.

A channel the broker closes on an error (an unknown delivery tag from a double ack, a redeclare with other arguments)
leaves its connection open; a client that opens a channel per operation closes its own. Either way the connection's
channel list changes from poll to poll while the connection stays. Polls see only the channels open at a poll, so
what they count is a lower bound:
- seen: a channel listed at one poll and not at the next two, or listed again with its counters fallen (a channel's
  counters never fall, so that is a new channel under a reused number);
- inferred: channel numbers the connection passed over between polls. Clients number channels upwards (the Java
  client takes the next number after the last it gave, pika and amqplib the lowest free one), so a number above every
  number listed before, with numbers below it listed at neither poll, means those were opened and closed in between.
  A client may also pick a number itself, skipping the rest: so the numbers passed over count no more than the broker
  counted channels closed (all clients together) over the same polls.
A client reusing the lowest free number for the same work each time (pika opening and losing one channel at a time)
looks the same at every poll: polls cannot tell, the broker's log (or event exchange) can.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from ackscope.model.snapshot import CHANNELS, Channel, Snapshot

_COUNTERS = ("publish", "deliver_get", "ack", "redeliver")


@dataclass(frozen=True, slots=True)
class Closed:
    """Channels one connection closed while it stayed open, as polls tell: `seen` were listed and went; `inferred`
    were never listed, numbers passed over (no more than the broker counted closed meanwhile)."""

    seen: int = 0
    inferred: int = 0

    @property
    def total(self) -> int:
        return self.seen + self.inferred


def closed_between(before: Snapshot, now: Snapshot) -> dict[str, Closed]:
    """Connection name -> channels open at `before` seen closed by `now` while the connection stayed open: gone from
    the list, or under the same name with counters lower than before (a reused number). Connections seen at only one
    of the two are left out: their channels went with them. Nothing where either poll did not read the channels (its
    list is empty, not closed)."""
    return {c: Closed(seen=len(names)) for c, names in _gone(before, now).items()}


def _stayed(before: Snapshot, now: Snapshot) -> set[str]:
    """Connections with channels listed at `before` that are still open at `now`."""
    then = {c.connection for c in before.channels}
    return ({c.name for c in now.connections} if now.connections else {c.connection for c in now.channels}) & then


def _gone(before: Snapshot, now: Snapshot) -> dict[str, set[str]]:
    """Per connection that stayed open, the names of its channels at `before` not at `now` or reused since."""
    if CHANNELS in before.unreported or CHANNELS in now.unreported:
        return {}
    stayed = _stayed(before, now)
    current = {c.name: c for c in now.channels}
    gone: dict[str, set[str]] = {}
    for ch in before.channels:
        if ch.connection not in stayed:
            continue
        later = current.get(ch.name)
        if later is None or _fell(ch, later):
            gone.setdefault(ch.connection, set()).add(ch.name)
    return gone


def _fell(then: Channel, now: Channel) -> bool:
    return any((a := getattr(then.message_stats, k)) is not None and (b := getattr(now.message_stats, k)) is not None
               and b < a for k in _COUNTERS)


def _grew(then: int, now: int) -> int:
    """How much a counter grew; one lower than before was reset (its node restarted): all it counts is new."""
    return now - then if now >= then else now


def _closed_count(s: Snapshot) -> int | None:
    """The channels the broker counted closed since it started, all clients; None where the poll has no count."""
    return s.overview.churn.channels_closed if s.overview.churn is not None else None


@dataclass(frozen=True, slots=True)
class _Passed:
    """Numbers a connection passed over, waiting for the next poll to list none of them: `names` of the channels
    they would have, and the broker's count of channels closed when the highest number before was listed."""

    names: frozenset[str]
    counted_then: int | None


class ChannelTurnover:
    """Per connection, the channels polls saw close (and those inferred from numbers passed over) over the last
    `window_seconds` while it stayed open. A channel gone from one poll is counted once the next poll has not
    listed it again with its counters grown (a paged list, or a node's plugin that missed a poll, leaves a channel
    out once); a poll that did not read the channels is passed over."""

    def __init__(self, window_seconds: float) -> None:
        self.window_seconds = window_seconds
        self._previous: Snapshot | None = None
        self._pending: dict[str, tuple[str, Channel]] = {}  # channel name: (its connection, its last record)
        self._passed: dict[str, _Passed] = {}  # per connection
        self._highest: dict[str, tuple[int, int | None]] = {}  # per connection: (number, broker's closed count then)
        self._counted: deque[tuple[float, int]] = deque()  # the broker's closed count at each poll in the window
        self._seen: dict[str, deque[tuple[float, Closed]]] = {}  # per connection: (taken_at, closed then)

    def update(self, s: Snapshot) -> Mapping[str, Closed]:
        """Connection name -> channels closed in the window, for connections that are open at `s`."""
        if CHANNELS in s.unreported:
            return self._counts()
        if self._previous is not None and s.taken_at > self._previous.taken_at:
            self._confirm(s)
            before = {c.name: c for c in self._previous.channels}
            self._pending = {name: (connection, before[name])
                             for connection, names in _gone(self._previous, s).items() for name in names}
            self._passed = self._numbers_passed(self._previous, s)
        self._raise_highest(s)
        self._previous = s
        self._forget(s)
        return self._counts()

    def _confirm(self, s: Snapshot) -> None:
        """Counts what the poll before left pending that `s` does not list again."""
        current = {c.name: c for c in s.channels}
        seen: dict[str, int] = {}
        for name, (connection, was) in self._pending.items():
            back = current.get(name)
            if back is None or _fell(was, back):
                seen[connection] = seen.get(connection, 0) + 1
        inferred: dict[str, int] = {}
        now = _closed_count(s)
        for connection, passed in self._passed.items():
            n = sum(1 for name in passed.names if name not in current)
            if not n or now is None or passed.counted_then is None:
                continue
            # No more than the broker counted closed since the highest number before was listed.
            counted = _grew(passed.counted_then, now)
            inferred[connection] = min(n, counted)
        for connection in seen.keys() | inferred.keys():
            closed = Closed(seen.get(connection, 0), inferred.get(connection, 0))
            if closed.total:
                self._seen.setdefault(connection, deque()).append((s.taken_at, closed))

    def _numbers_passed(self, before: Snapshot, now: Snapshot) -> dict[str, _Passed]:
        """Per connection that stayed open, the numbers between its highest listed before and its highest at `now`
        that `now` does not list, with the broker's closed count when that highest before was listed."""
        stayed = _stayed(before, now) | (self._highest.keys() & {c.name for c in now.connections})
        listed: dict[str, dict[int, str]] = {}
        for ch in now.channels:
            if ch.number is not None and ch.connection in stayed:
                listed.setdefault(ch.connection, {})[ch.number] = ch.name
        passed: dict[str, _Passed] = {}
        for connection, numbers in listed.items():
            if connection not in self._highest:
                continue
            highest, counted_then = self._highest[connection]
            top = max(numbers)
            name = numbers[top]
            prefix = name[:name.rfind("(")]  # "peer:port -> host:port (7)": the connection's part of the name
            names = frozenset(f"{prefix}({n})" for n in range(highest + 1, top) if n not in numbers)
            if names:
                passed[connection] = _Passed(names, counted_then)
        return passed

    def _raise_highest(self, s: Snapshot) -> None:
        counted = _closed_count(s)
        for ch in s.channels:
            if ch.number is not None and ch.number > self._highest.get(ch.connection, (0, None))[0]:
                self._highest[ch.connection] = (ch.number, counted)

    def _forget(self, s: Snapshot) -> None:
        since = s.taken_at - self.window_seconds
        alive = {c.connection for c in s.channels} | {c.name for c in s.connections}
        for connection in list(self._seen):
            kept = self._seen[connection]
            while kept and kept[0][0] < since:
                kept.popleft()
            if not kept or connection not in alive:  # a closed connection's name does not come back
                del self._seen[connection]
        for connection in list(self._highest):
            if connection not in alive:
                del self._highest[connection]
        counted = _closed_count(s)
        if counted is None:
            self._counted.clear()  # a poll without the count: what the window counted is not known
        else:
            self._counted.append((s.taken_at, counted))
            while self._counted[0][0] < since:
                self._counted.popleft()

    def _counts(self) -> Mapping[str, Closed]:
        # Over the window, what polls saw close and what is inferred on one connection stays within what the
        # broker counted closed for all clients: numbers inferred at one poll and seen go at another are not two.
        window = _grew(self._counted[0][1], self._counted[-1][1]) if self._counted else 0
        counts = {}
        for c, kept in self._seen.items():
            seen, inferred = sum(x.seen for _, x in kept), sum(x.inferred for _, x in kept)
            counts[c] = Closed(seen, min(inferred, max(0, window - seen)))
        return MappingProxyType(counts)
