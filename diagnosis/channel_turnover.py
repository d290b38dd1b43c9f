"""Channels seen to close on connections that stay open: memory beside the pure rules, like Holding.

A channel the broker closes on an error (an unknown delivery tag from a double ack, a redeclare with other arguments)
leaves its connection open; a client that opens a channel per operation closes its own. Either way the connection's
channel list changes from poll to poll while the connection stays. Polls see only the channels open at a poll, so
what they count is a lower bound:
- seen: a channel listed at one poll and not listed again for a statistics interval (the management plugin lists
  a channel from its next collection; a paged list, or a node's plugin that missed a poll, leaves one out once); or,
  under the same number, listed with its counters fallen (a channel's counters never fall: a new channel under a
  reused number). One that comes back with its counters grown was never closed, and is taken back.
- inferred: channel numbers the connection passed over between polls. Clients number channels upwards (the Java
  client takes the next number after the last it gave, pika and amqplib the lowest free one), so numbers above every
  number listed before, below one listed now and not listed for a statistics interval, were opened and closed in
  between. A client may also pick a number itself, skipping the rest: numbers passed over count only from the
  connection's second climb, and no more than the broker counted channels closed meanwhile.
The broker's count of channels closed is for all clients together: where it is known, what is seen and inferred over
the window stays within it (a connection said to have closed more than the broker counted closed is not counted),
and where it fell (a node restarted) nothing is inferred. A connection is the same one while its name and the time
the broker accepted it are. A client reusing the lowest free number for the same work each time (pika opening and
losing one channel at a time) looks the same at every poll: polls cannot tell, the broker's log (or event exchange)
can.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from ackscope.model.snapshot import CHANNELS, STATISTICS_INTERVAL, Channel, Snapshot

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
    the list, or under the same number with counters lower than before. Connections seen at only one of the two are
    left out: their channels went with them. Nothing where either poll did not read the channels (its list is empty,
    not closed), or where the broker counted fewer channels closed between the two than this says."""
    if CHANNELS in before.unreported or CHANNELS in now.unreported or now.taken_at <= before.taken_at:
        return {}
    stayed = _stayed(before, now)
    current = {c.name: c for c in now.channels}
    gone: dict[str, int] = {}
    for ch in before.channels:
        if ch.connection in stayed and ((later := current.get(ch.name)) is None or _fell(ch, later)):
            gone[ch.connection] = gone.get(ch.connection, 0) + 1
    counted = _counted_between(before, now)
    return {c: Closed(seen=n) for c, n in gone.items() if counted is None or n <= counted}


def _stayed(before: Snapshot, now: Snapshot) -> set[str]:
    """Connections listed at both polls as the same connection (the same name, accepted at the same time where the
    source says when), or, where `now` lists no connections, those with channels at both."""
    if not now.connections:
        return {c.connection for c in now.channels} & {c.connection for c in before.channels}
    then = {c.name: c.connected_at for c in before.connections} if before.connections else \
        {c.connection: None for c in before.channels}
    return {c.name for c in now.connections if c.name in then
            and (then[c.name] is None or c.connected_at is None or then[c.name] == c.connected_at)}


def _fell(then: Channel, now: Channel) -> bool:
    """A new channel under a reused number: its counters below the last ones. Only for a channel the source numbers
    (the management API counts per channel); one named by its process (the Prometheus plugin, whose per-queue sums
    fall when a queue is deleted) is never reused."""
    return then.number is not None and any(
        (a := getattr(then.message_stats, k)) is not None and (b := getattr(now.message_stats, k)) is not None
        and b < a for k in _COUNTERS)


def _closed_count(s: Snapshot) -> int | None:
    """The channels the broker counted closed since it started, all clients; None where the poll has no count."""
    return s.overview.churn.channels_closed if s.overview.churn is not None else None


def _counted_between(before: Snapshot, now: Snapshot) -> int | None:
    """Channels the broker counted closed between two polls; None where either has no count or it fell (a node
    restarted: how many closed is not known)."""
    a, b = _closed_count(before), _closed_count(now)
    return None if a is None or b is None or b < a else b - a


@dataclass(frozen=True, slots=True)
class _Missing:
    """A channel listed before and not at a later poll: counted closed once unlisted for a statistics interval."""

    connection: str
    record: Channel
    since: float  # taken_at of the first poll that did not list it


@dataclass(frozen=True, slots=True)
class _Passed:
    """Numbers a connection passed over, counted closed once none is listed for a statistics interval."""

    connection: str
    names: frozenset[str]
    since: float  # taken_at of the poll that listed the higher number
    counted_then: int | None  # the broker's closed count when the highest number before was listed


class ChannelTurnover:
    """Per connection, the channels polls saw close (and those inferred from numbers passed over) over the last
    `window_seconds` while it stayed open. A poll that did not read the channels, or that is not newer than the last
    one, is passed over."""

    def __init__(self, window_seconds: float) -> None:
        self.window_seconds = window_seconds
        self._previous: Snapshot | None = None
        self._missing: dict[str, _Missing] = {}  # by channel name
        self._passed: list[_Passed] = []
        self._highest: dict[str, tuple[int, int | None]] = {}  # per connection: (number, broker's closed count then)
        self._climbs: dict[str, int] = {}  # per connection: how many times its highest number rose
        self._closed: dict[str, tuple[str, Channel, float]] = {}  # channels counted closed: connection, record, when
        self._seen: dict[str, deque[tuple[float, Closed]]] = {}  # per connection: (taken_at, closed then)
        self._counted: deque[tuple[float, int | None]] = deque()  # the broker's closed count at each poll

    def update(self, s: Snapshot) -> Mapping[str, Closed]:
        """Connection name -> channels closed in the window, for connections that are open at `s`."""
        if CHANNELS in s.unreported or (self._previous is not None and s.taken_at <= self._previous.taken_at):
            return self._counts()
        current = {c.name: c for c in s.channels}
        if self._previous is not None:
            stayed = _stayed(self._previous, s)
            self._forget_gone_connections(stayed, s)
            self._take_back(current)
            self._note_missing(self._previous, s, stayed, current)
            self._note_passed(s, stayed)
            self._confirm(s, current)
        self._raise_highest(s)
        self._previous = s
        self._forget(s)
        return self._counts()

    def _forget_gone_connections(self, stayed: set[str], s: Snapshot) -> None:
        """A connection that closed (or was replaced under its name) took its channels: nothing of it is pending."""
        self._missing = {n: m for n, m in self._missing.items() if m.connection in stayed}
        self._passed = [p for p in self._passed if p.connection in stayed]
        for memory in (self._highest, self._climbs, self._seen):
            for connection in [c for c in memory if c not in stayed]:
                del memory[connection]

    def _take_back(self, current: Mapping[str, Channel]) -> None:
        """A channel counted closed that is listed again with its counters grown never closed: uncounted."""
        for name, (connection, record, at) in list(self._closed.items()):
            back = current.get(name)
            if back is not None and not _fell(record, back):
                del self._closed[name]
                kept = self._seen.get(connection)
                for i, (t, c) in enumerate(kept or ()):
                    if t == at and c.seen:
                        kept[i] = (t, Closed(c.seen - 1, c.inferred))
                        break

    def _note_missing(self, before: Snapshot, s: Snapshot, stayed: set[str], current: Mapping[str, Channel]) -> None:
        for name in [n for n, m in self._missing.items() if n in current and not _fell(m.record, current[n])]:
            del self._missing[name]  # back: a paged list or a missed node left it out
        for ch in before.channels:
            if ch.connection in stayed and ch.name not in self._missing:
                later = current.get(ch.name)
                if later is None:
                    self._missing[ch.name] = _Missing(ch.connection, ch, s.taken_at)
                elif _fell(ch, later):  # a new channel under the number: the old one closed, no wait needed
                    self._count(ch.connection, s.taken_at, seen=1, name=ch.name, record=ch)

    def _note_passed(self, s: Snapshot, stayed: set[str]) -> None:
        listed: dict[str, dict[int, str]] = {}
        for ch in s.channels:
            if ch.number is not None and ch.connection in stayed:
                listed.setdefault(ch.connection, {})[ch.number] = ch.name
        for connection, numbers in listed.items():
            if connection not in self._highest:
                continue
            highest, counted_then = self._highest[connection]
            top = max(numbers)
            if top <= highest:
                continue
            self._climbs[connection] = self._climbs.get(connection, 0) + 1
            prefix = numbers[top][:numbers[top].rfind("(")]  # "peer:port -> host:port (7)": the connection's part
            names = frozenset(f"{prefix}({n})" for n in range(highest + 1, top) if n not in numbers)
            # The first climb may be a number the client picked itself: only a second one shows it numbering upwards.
            if names and self._climbs[connection] >= 2:
                self._passed.append(_Passed(connection, names, s.taken_at, counted_then))

    def _confirm(self, s: Snapshot, current: Mapping[str, Channel]) -> None:
        due = s.taken_at - STATISTICS_INTERVAL
        for name, m in list(self._missing.items()):
            if m.since <= due:
                del self._missing[name]
                self._count(m.connection, s.taken_at, seen=1, name=name, record=m.record)
        now = _closed_count(s)
        waiting = []
        for p in self._passed:
            if any(n in current for n in p.names):
                continue  # one of them is open after all: the client does not number upwards
            if p.since > due:
                waiting.append(p)
            elif now is not None and p.counted_then is not None and now >= p.counted_then:
                self._count(p.connection, s.taken_at, inferred=min(len(p.names), now - p.counted_then))
        self._passed = waiting

    def _count(self, connection: str, at: float, seen: int = 0, inferred: int = 0, name: str = "",
               record: Channel | None = None) -> None:
        if seen or inferred:
            self._seen.setdefault(connection, deque()).append((at, Closed(seen, inferred)))
        if name and record is not None:
            self._closed[name] = (connection, record, at)

    def _raise_highest(self, s: Snapshot) -> None:
        counted = _closed_count(s)
        for ch in s.channels:
            if ch.number is not None and ch.number > self._highest.get(ch.connection, (0, None))[0]:
                self._highest[ch.connection] = (ch.number, counted)

    def _forget(self, s: Snapshot) -> None:
        since = s.taken_at - self.window_seconds
        for connection in list(self._seen):
            kept = self._seen[connection]
            while kept and kept[0][0] < since:
                kept.popleft()
            if not kept:
                del self._seen[connection]
        self._closed = {n: c for n, c in self._closed.items() if c[2] >= since}
        # The broker's count from a statistics interval and a poll before the window: what was counted closed in
        # the window's first seconds closed after the poll that last listed it.
        self._counted.append((s.taken_at, _closed_count(s)))
        while len(self._counted) > 2 and self._counted[1][0] < since - 2 * STATISTICS_INTERVAL:
            self._counted.popleft()

    def _counts(self) -> Mapping[str, Closed]:
        """Over the window, what polls saw close and what is inferred, within what the broker counted closed for all
        clients where it is known: a connection said to have closed more than that is not counted (its channels went
        missing otherwise), and what is inferred shares what the broker counted beyond what was seen."""
        counts = {c: Closed(sum(x.seen for _, x in kept), sum(x.inferred for _, x in kept))
                  for c, kept in self._seen.items()}
        counts = {c: n for c, n in counts.items() if n.total}
        budget = self._broker_counted()
        if budget is None:  # not known, or fell: what was seen stands alone, nothing is inferred
            return MappingProxyType({c: Closed(n.seen) for c, n in counts.items() if n.seen})
        seen = {c: n.seen for c, n in counts.items() if n.seen <= budget}
        left = budget - sum(seen.values())
        result = {}
        for c in sorted(seen):
            inferred = max(0, min(counts[c].inferred, left))
            left -= inferred
            if seen[c] or inferred:
                result[c] = Closed(seen[c], inferred)
        return MappingProxyType(result)

    def _broker_counted(self) -> int | None:
        """What the broker counted closed over the window, from the polls that have the count (a node's first
        seconds list none); None where fewer than two have it, or it fell."""
        counts = [n for _, n in self._counted if n is not None]
        if len(counts) < 2 or any(b < a for a, b in zip(counts, counts[1:])):
            return None
        return counts[-1] - counts[0]
