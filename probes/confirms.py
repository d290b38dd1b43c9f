"""Publisher-confirm bookkeeping for one channel: which publishes await their basic.ack or basic.nack.

Pure: the caller passes the clock, so the bookkeeping is tested without a broker.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass


@dataclass(frozen=True)
class Outstanding:
    """A publish awaiting its confirm: the probe's own sequence number and when its frame went out (when
    it was made, until the socket says)."""

    seq: int
    published_ns: int


@dataclass(frozen=True)
class Settled:
    seq: int
    published_ns: int
    latency_s: float


class ConfirmTracker:
    """Delivery tags of one confirm-mode channel, counted from 1 as the broker counts them."""

    def __init__(self) -> None:
        # Tags go in ascending order, so the oldest is first: a `multiple` ack settles a prefix.
        self._outstanding: OrderedDict[int, Outstanding] = OrderedDict()
        self._next_tag = 1

    def __len__(self) -> int:
        return len(self._outstanding)

    def published(self, seq: int, published_ns: int) -> int:
        """Record a publish on the channel and return the delivery tag the broker will confirm it by."""
        tag = self._next_tag
        self._next_tag += 1
        self._outstanding[tag] = Outstanding(seq, published_ns)
        return tag

    def sent(self, tag: int, at_ns: int) -> None:
        """The publish's frame left at `at_ns`: its latency runs from there."""
        entry = self._outstanding.get(tag)
        if entry is not None:
            self._outstanding[tag] = Outstanding(entry.seq, at_ns)  # the key stays where it was: order kept

    def settle(self, tag: int, multiple: bool, now_ns: int) -> list[Settled]:
        """The publishes one basic.ack or basic.nack frame answers (all tags up to `tag` when multiple)."""
        if not multiple:
            entry = self._outstanding.pop(tag, None)
            return [] if entry is None else [_settled(entry, now_ns)]
        settled = []
        while self._outstanding:
            first = next(iter(self._outstanding))
            if first > tag:
                break
            settled.append(_settled(self._outstanding.pop(first), now_ns))
        return settled

    def expire(self, now_ns: int, timeout_ns: int) -> list[Outstanding]:
        """Give up on publishes unanswered for longer than `timeout_ns`: they are confirm timeouts."""
        expired = []
        while self._outstanding:
            tag, entry = next(iter(self._outstanding.items()))
            if now_ns - entry.published_ns < timeout_ns:
                break
            expired.append(self._outstanding.pop(tag))
        return expired

    def drain(self) -> list[Outstanding]:
        """Everything still unconfirmed, oldest first, and forget it: the channel is gone, and with it
        the broker's numbering (a new channel counts from 1 again)."""
        entries = list(self._outstanding.values())
        self._outstanding.clear()
        self._next_tag = 1
        return entries


def _settled(entry: Outstanding, now_ns: int) -> Settled:
    return Settled(entry.seq, entry.published_ns, max(0, now_ns - entry.published_ns) / 1e9)
