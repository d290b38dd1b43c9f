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

from ackscope.model.snapshot import Channel, Snapshot

_COUNTERS = ("publish", "deliver_get", "ack", "redeliver")


def closed_between(before: Snapshot, now: Snapshot) -> dict[str, int]:
    """Connection name -> how many of its channels open at `before` were closed by `now` while the connection
    stayed open: gone from the list, or under the same name with counters lower than before (a reused number).
    Connections seen at only one of the two are left out: their channels went with them."""
    open_now = {c.name for c in now.connections}
    then = {c.connection for c in before.channels}
    stayed = open_now & then if now.connections else {c.connection for c in now.channels} & then
    current = {c.name: c for c in now.channels}
    closed: dict[str, int] = {}
    for ch in before.channels:
        if ch.connection not in stayed:
            continue
        later = current.get(ch.name)
        if later is None or _fell(ch, later):
            closed[ch.connection] = closed.get(ch.connection, 0) + 1
    return closed


def _fell(then: Channel, now: Channel) -> bool:
    return any((a := getattr(then.message_stats, k)) is not None and (b := getattr(now.message_stats, k)) is not None
               and b < a for k in _COUNTERS)


class ChannelTurnover:
    """Per connection, the channels polls saw close over the last `window_seconds` while it stayed open."""

    def __init__(self, window_seconds: float) -> None:
        self.window_seconds = window_seconds
        self._previous: Snapshot | None = None
        self._seen: dict[str, deque[tuple[float, int]]] = {}  # per connection: (taken_at, channels seen closed)

    def update(self, s: Snapshot) -> Mapping[str, int]:
        """Connection name -> channels seen closed in the window, for connections that are open at `s`."""
        if self._previous is not None and s.taken_at > self._previous.taken_at:
            for connection, n in closed_between(self._previous, s).items():
                self._seen.setdefault(connection, deque()).append((s.taken_at, n))
        self._previous = s
        since = s.taken_at - self.window_seconds
        alive = {c.connection for c in s.channels} | {c.name for c in s.connections}
        for connection in list(self._seen):
            kept = self._seen[connection]
            while kept and kept[0][0] < since:
                kept.popleft()
            if not kept or connection not in alive:  # a closed connection's name does not come back
                del self._seen[connection]
        return MappingProxyType({c: sum(n for _, n in kept) for c, kept in self._seen.items()})
