"""Which AMQP 1.0 connections are asked for their sessions at a poll, and the links of those that are not.

The broker has no list of all sessions: each AMQP 1.0 connection costs a request of its own (about a millisecond
of client and broker time each; 1,000 connections added 1.2 s to a poll). A connection is asked again only when
frames that can change its sessions crossed it since it was last asked: its sessions' state (links, credit,
delivery counts, what is unsettled) changes with frames and only with them. The broker's octet counts say whether
frames crossed: its reader and writer refresh them within one statistics interval of any traffic either way,
deliveries included (rabbit_amqp_reader and rabbit_amqp_writer re-arm the statistics timer on each frame), and
leave them as they are while a connection is idle.

Idle is not silent: a peer sends empty frames (8 bytes each, AMQP 1.0 section 2.3.2) to keep the connection
open, every 15 s for a client of a broker with the default heartbeat. A connection whose last answer held nothing
(no unsettled delivery, no unconfirmed transfer) whose counts moved by whole empty frames, no more than one a
second each way, is still idle; anything else has it asked again: any movement at all where it held something
(a settlement is a small frame), and for one that held nothing, the deliveries that start it holding (a transfer
frame with its message is far more than an empty frame). So a receiver that starts holding is asked at the first
poll whose list shows its octets moved: within two polls where the poll interval is at least the statistics
interval.

The trade: an idle connection's links are as its last answer gave them, `read_at` saying when. What a few small
frames on a connection that held nothing can change (a credit grant, a pre-settled sender's occasional message)
is seen at the refresh: each connection is asked anew at least every `refresh_seconds` whatever its octets say,
spread over the polls rather than all at once. A connection without octet counts (statistics off lists none)
is asked at every poll, as before; so is one over TLS, whose records are never whole empty frames."""

from __future__ import annotations

import zlib
from dataclasses import dataclass, replace

from ackscope.model.snapshot import Connection, Link

REFRESH_SECONDS = 300.0
EMPTY_FRAME = 8  # bytes: an AMQP 1.0 frame header with no body, the keep-alive


@dataclass(frozen=True)
class _Answer:
    octets: tuple[int, int] | None
    read_at: float
    links: tuple[Link, ...]


class SessionReads:
    """The last answer of each AMQP 1.0 connection, and from them which connections to ask at this poll."""

    def __init__(self, refresh_seconds: float = REFRESH_SECONDS):
        self.refresh_seconds = refresh_seconds
        self._answers: dict[str, _Answer] = {}

    def plan(self, connections: list[Connection], now: float) -> tuple[list[Connection], list[Link]]:
        """(the connections to ask now, the links of the others as last read). Connections no longer listed are
        forgotten."""
        listed = {c.name for c in connections}
        self._answers = {name: a for name, a in self._answers.items() if name in listed}
        asked: list[Connection] = []
        carried: list[Link] = []
        for c in connections:
            last = self._answers.get(c.name)
            if last is None or c.octets is None or last.octets is None or self._moved(c.octets, last, now) \
                    or self._due(c.name, last, now):
                asked.append(c)
            else:
                carried.extend(last.links)
        return asked, carried

    def answered(self, connection: Connection, links: list[Link], read_at: float) -> tuple[Link, ...]:
        """Keep a connection's answer (its octets as listed at this poll); its links stamped with `read_at`."""
        stamped = tuple(replace(k, read_at=read_at) for k in links)
        self._answers[connection.name] = _Answer(connection.octets, read_at, stamped)
        return stamped

    @staticmethod
    def _moved(octets: tuple[int, int], last: _Answer, now: float) -> bool:
        """Whether frames that can change the sessions crossed since `last`: see the module's doc."""
        if octets == last.octets:
            return False
        if any(k.session_unsettled or k.unconfirmed for k in last.links):
            return True
        keep_alive = EMPTY_FRAME * (max(0.0, now - last.read_at) + 2)
        return any(d < 0 or d % EMPTY_FRAME or d > keep_alive for d in (octets[0] - last.octets[0],
                                                                          octets[1] - last.octets[1]))

    def _due(self, name: str, last: _Answer, now: float) -> bool:
        # Each connection gets its own point within the refresh period (a stable hash of its name), so a broker
        # with thousands of idle connections pays for a share of them at each poll, not for all at one.
        offset = (zlib.crc32(name.encode()) % 1000) / 1000 * self.refresh_seconds
        return (now - offset) // self.refresh_seconds > (last.read_at - offset) // self.refresh_seconds
