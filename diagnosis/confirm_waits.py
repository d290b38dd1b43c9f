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

It also remembers when each confirm channel last showed publishes the broker refused (publish minus confirm minus
unconfirmed above 0) in a sample taken anew whose sample before showed some too: the broker samples these counters
at slightly different moments, so one sample's gap may close at the next, while two samples' gap is nacks. Once
the publisher goes idle its counters stop moving and no sample is taken anew: this memory keeps its nacks a
finding for the window (publisher-nacked).
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
    # When the channel's refused publishes (inferred) were last seen in two samples taken anew, within the window;
    # and when that count last grew. None: not seen so.
    nacks_seen_at: float | None = None
    nacks_grew_at: float | None = None


class ConfirmWaits:
    def __init__(self, window_seconds: float) -> None:
        self.window_seconds = window_seconds
        self._samples: dict[str, deque[tuple[float, int]]] = {}  # per channel: (taken_at, unconfirmed)
        self._published: dict[str, int] = {}  # per channel: its publish counter at the last poll
        # per channel: (publish, confirm, unconfirmed) at the last poll, and (seen at, grew at) of its nacks
        self._counters: dict[str, tuple[int, int, int]] = {}
        self._nacks: dict[str, tuple[float, float]] = {}

    def update(self, s: Snapshot) -> Mapping[str, InFlight]:
        since = s.taken_at - self.window_seconds
        published, samples, counters, nacks = {}, {}, {}, {}
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
            self._sample_nacks(ch.name, (count, ch.message_stats.confirm, unconfirmed), in_flight_bound(
                max((n for _, n in kept), default=0), unconfirmed), s.taken_at, since, counters, nacks)
        # Channels that closed are forgotten: their names do not come back.
        self._samples, self._published, self._counters, self._nacks = samples, published, counters, nacks
        return MappingProxyType({name: InFlight(len(kept), max((n for _, n in kept), default=0),
                                                sum(n for _, n in kept) / len(kept) if kept else 0.0,
                                                *nacks.get(name, (None, None)))
                                 for name, kept in samples.items() if kept or name in nacks})

    def _sample_nacks(self, name: str, now: tuple[int, int | None, int], bound: int, taken_at: float, since: float,
                      counters: dict, nacks: dict) -> None:
        if now[1] is None:
            return
        counters[name] = now
        then, seen = self._counters.get(name), self._nacks.get(name)
        if then is not None and now != then:  # sampled anew
            gap, gap_then = now[0] - now[1] - now[2], then[0] - then[1] - then[2]
            if gap > bound and gap_then > bound:
                seen = (taken_at, taken_at if seen is None or gap > gap_then else seen[1])
            elif gap <= 0:
                # Nacks never come back: a sample without a gap proves the gaps before it were confirms in flight
                # between the counters' readings, not refusals.
                seen = None
        if seen is not None and seen[0] >= since:
            nacks[name] = seen


def in_flight_bound(peak_unconfirmed: int, *unconfirmed: int | None) -> int:
    """How many publishes a gap between publish and confirm plus unconfirmed can hold that are in flight, not
    refused: the broker reads the counters at different moments (the unconfirmed count at the channel's last
    statistics emission, the others later), so a confirm in flight at one reading and not the other shows as a gap
    of up to what the channel holds in flight: the most it was seen holding unconfirmed, and at least one (a
    publisher that waits for each confirm, caught between). Measured: a healthy pika publisher at 300 a second,
    one at a time, showed a gap of 1 in two samples in a row on 3.10."""
    return max(1, peak_unconfirmed, *(n for n in unconfirmed if n is not None))

