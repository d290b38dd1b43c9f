"""Channels seen to close on connections that stay open: memory beside the pure rules, like Holding.

A channel the broker closes on an error (an unknown delivery tag from a double ack, a redeclare with other arguments)
leaves its connection open; a client that opens a channel per operation closes its own. Either way the connection's
channel list changes from poll to poll while the connection stays. Polls see only the channels open at a poll, so
what they count is a lower bound: a channel opened and closed between two polls is invisible, and a client that
reuses the lowest free channel number (pika, amqplib) may show the same name again for a new channel. A channel's
counters never fall, so a name whose counters fell is a new channel under a reused number.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from types import MappingProxyType

from ackscope.model.snapshot import CHANNELS, Channel, Snapshot

_COUNTERS = ("publish", "deliver_get", "ack", "redeliver")


def closed_between(before: Snapshot, now: Snapshot) -> dict[str, int]:
    """Connection name -> how many of its channels open at `before` were closed by `now` while the connection
    stayed open: gone from the list, or under the same name with counters lower than before (a reused number).
    Connections seen at only one of the two are left out: their channels went with them. Nothing where either poll
    did not read the channels (its list is empty, not closed)."""
    return {c: len(names) for c, names in _gone(before, now).items()}


def _gone(before: Snapshot, now: Snapshot) -> dict[str, set[str]]:
    """Per connection that stayed open, the names of its channels at `before` not at `now` or reused since."""
    if CHANNELS in before.unreported or CHANNELS in now.unreported:
        return {}
    open_now = {c.name for c in now.connections}
    then = {c.connection for c in before.channels}
    stayed = open_now & then if now.connections else {c.connection for c in now.channels} & then
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


class ChannelTurnover:
    """Per connection, the channels polls saw close over the last `window_seconds` while it stayed open. A channel
    gone from one poll is counted once the next poll has not listed it again with its counters grown (a paged list,
    or a node's plugin that missed a poll, leaves a channel out once); a poll that did not read the channels is
    passed over."""

    def __init__(self, window_seconds: float) -> None:
        self.window_seconds = window_seconds
        self._previous: Snapshot | None = None
        self._pending: dict[str, tuple[str, Channel]] = {}  # channel name: (its connection, its last record)
        self._seen: dict[str, deque[tuple[float, int]]] = {}  # per connection: (taken_at, channels seen closed)

    def update(self, s: Snapshot) -> Mapping[str, int]:
        """Connection name -> channels seen closed in the window, for connections that are open at `s`."""
        if CHANNELS in s.unreported:
            return self._counts()
        if self._previous is not None and s.taken_at > self._previous.taken_at:
            current = {c.name: c for c in s.channels}
            confirmed: dict[str, int] = {}
            for name, (connection, was) in self._pending.items():
                back = current.get(name)
                if back is None or _fell(was, back):
                    confirmed[connection] = confirmed.get(connection, 0) + 1
            for connection, n in confirmed.items():
                self._seen.setdefault(connection, deque()).append((s.taken_at, n))
            before = {c.name: c for c in self._previous.channels}
            self._pending = {name: (connection, before[name])
                             for connection, names in _gone(self._previous, s).items() for name in names}
        self._previous = s
        since = s.taken_at - self.window_seconds
        alive = {c.connection for c in s.channels} | {c.name for c in s.connections}
        for connection in list(self._seen):
            kept = self._seen[connection]
            while kept and kept[0][0] < since:
                kept.popleft()
            if not kept or connection not in alive:  # a closed connection's name does not come back
                del self._seen[connection]
        return self._counts()

    def _counts(self) -> Mapping[str, int]:
        return MappingProxyType({c: sum(n for _, n in kept) for c, kept in self._seen.items()})
