"""How many publishes each confirm channel had unconfirmed while it published, sample by sample over the window:
memory beside the pure rules, like Holding and Waiting.

A publisher that waits for each confirm before its next publish (pika's BlockingChannel after confirm_delivery(),
the Java client's waitForConfirmsOrDie after each basicPublish, the guides' first example) never has more than
one publish unconfirmed, and while it publishes without pause it has one most of the time. By Little's law the
average of the broker's unconfirmed count is the publish rate times the time the broker takes to confirm: for
such a publisher, the share of its time it waits for the broker (a lower bound of its waiting: the round trip
and its own turn-around are not in the broker's count). A publisher that streams its confirms shows more than one
whenever its rate and the broker's latency allow it.

A sample is taken where the broker sampled the channel anew while it published: its publish counter moved since
the last sample kept (RabbitMQ 4 refreshes a channel's figures every 5 s or so, whatever the statistics interval;
two polls of one refresh are one sample).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from ackscope.model.snapshot import Snapshot


@dataclass(frozen=True)
class InFlight:
    """A confirm channel's unconfirmed count, as sampled while it published over the window."""

    samples: int
    peak: int
    mean: float


class ConfirmWaits:
    def __init__(self, window_seconds: float) -> None:
        self.window_seconds = window_seconds
        self._samples: dict[str, deque[tuple[float, int]]] = {}  # per channel: (taken_at, unconfirmed)
        self._published: dict[str, int] = {}  # per channel: its publish counter at the last poll

    def update(self, s: Snapshot) -> Mapping[str, InFlight]:
        since = s.taken_at - self.window_seconds
        published, samples = {}, {}
        for ch in s.channels:
            count, unconfirmed = ch.message_stats.publish, ch.messages_unconfirmed
            if ch.confirm is not True or count is None or unconfirmed is None:
                continue
            kept = self._samples.get(ch.name, deque())
            was = self._published.get(ch.name)
            if was is not None and count > was:
                kept.append((s.taken_at, unconfirmed))
            published[ch.name] = count
            while kept and kept[0][0] < since:
                kept.popleft()
            samples[ch.name] = kept
        # Channels that closed are forgotten: their names do not come back.
        self._samples, self._published = samples, published
        return MappingProxyType({name: InFlight(len(kept), max(n for _, n in kept),
                                                sum(n for _, n in kept) / len(kept))
                                 for name, kept in samples.items() if kept})
