"""The background loop: read a source, diagnose, render, publish.

Scrapes never wait on the broker: they read `Poller.exposition`, replaced whole after each poll.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from types import MappingProxyType

from ackscope.core import native_memory
from ackscope.core.episode import Episode
from ackscope.model.events import Breaks
from ackscope.model.findings import Diagnosis
from ackscope.model.snapshot import Snapshot, carried, sharing
from ackscope.model.source import FetchError, Source, SourceFailed
from ackscope.model.traces import TraceWindow

from .cardinality import Limits
from .exposition import Exposition, render
from .text_format import LabelSets
from .status import PollStatus

log = logging.getLogger("ackscope.exporter")

SETTLE_INTERVALS = 5  # an outage or overrun is over, and said to be, once polls have been good this many intervals
STOP_WAIT_S = 2.0  # how long a stop waits for the poll in flight


class Poller:
    def __init__(self, source: Source, *, interval: float, limits: Limits = Limits(),
                 diagnose: Callable[[Snapshot, Snapshot | None, Breaks | None], Diagnosis] | None = None,
                 record: Callable[[Snapshot], None] | None = None,
                 breaks: Callable[[Snapshot | None], Breaks] | None = None,
                 traces: Callable[[Snapshot | None], TraceWindow] | None = None):
        self.source = source
        self.interval = interval
        self.limits = limits
        self.status = PollStatus()
        self.snapshot: Snapshot | None = None
        self.previous: Snapshot | None = None  # the good snapshot before self.snapshot
        self.diagnose = diagnose
        self.record = record  # keeps each good snapshot (the history under --data-dir)
        # Reads the event sources (the broker's log) at each poll, given this poll's snapshot or None where it
        # failed: a broker whose API does not answer may still be logging why.
        self.read_breaks = breaks
        self.breaks: Breaks | None = None
        # What the applications' spans told, placed by this poll's snapshot (or by none where it failed).
        self.read_traces = traces
        self.traces: TraceWindow | None = None
        self.diagnosis = Diagnosis()
        self.exposition: Exposition = render(None, self.status, limits)
        self._label_sets = LabelSets()  # each series' labels as the last render wrote them
        self._notes_logged: set[str] = set()
        # Said when each starts, and when it has been over for five intervals: a flapping link is one episode.
        self._outage = Episode(settle=SETTLE_INTERVALS * interval)
        self._overrun = Episode(settle=SETTLE_INTERVALS * interval)
        self._partial = Episode(settle=SETTLE_INTERVALS * interval)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- one poll --------------------------------------------------------------------------------------
    def poll_once(self) -> None:
        """Poll, then publish the new snapshot and exposition (or the failure, keeping the last snapshot)."""
        # No automatic collection while the poll decodes and builds: each full one walked every object the
        # poll had made so far and held the GIL 45-170 ms, several times a poll at 20,000 queues, and a scrape
        # waiting on it was that late. The young generations are collected once, at the end (below).
        gc.disable()
        try:
            self._poll()
        finally:
            # What this poll keeps (the snapshot, its window, the rendered bytes) is moved out of the garbage
            # collector's sight: a full collection walking a large broker's records holds the GIL for most of a
            # second (measured at 10,000 queues). The records hold no cycles, so reference counting still frees
            # them when the next poll replaces them; the young generations are collected first, so the cycles
            # this poll left (an exception's traceback) are not kept.
            gc.collect(1)
            gc.freeze()
            gc.enable()
        native_memory.give_back()  # what this poll decoded and rendered, free now, back to the system

    def _poll(self) -> None:
        started_wall, started = time.time(), time.monotonic()
        try:
            snapshot = sharing(carried(self.source.read(), self.snapshot), self.snapshot)
        except SourceFailed as failure:
            self._read_sources(None)
            self._publish_failure(failure.errors, started, started_wall)
        else:
            self._say_overrun(time.monotonic() - started)  # a failed poll is down, not slow: said as such
            self._read_sources(snapshot)
            self.diagnosis = self._diagnose(snapshot, self.snapshot)
            self.previous, self.snapshot = self.snapshot, snapshot
            if self.record is not None:
                self.record(snapshot)
            if self._outage.update(False) == "end":
                log.info("the broker answers again at %s", self.source.base_url)
            self._publish_success(snapshot, started, started_wall)
            for note in set(snapshot.notes) - self._notes_logged:
                log.info("%s", note)
                self._notes_logged.add(note)
        self.exposition = render(self.snapshot, self.status, self.limits, self.diagnosis, self._label_sets,
                                 self.breaks, self.previous, self.traces)

    def _read_sources(self, snapshot: Snapshot | None) -> None:
        """What is read beside the broker's API at each poll (given this poll's snapshot, or None where it failed):
        the broker's events, the applications' traces. A broken one costs neither the metrics nor the other."""
        if self.read_breaks is not None:
            self.breaks = _guarded(self.read_breaks, snapshot, "the broker's events", self.breaks)
        if self.read_traces is not None:
            self.traces = _guarded(self.read_traces, snapshot, "the applications' traces", self.traces)

    def _say_overrun(self, took: float) -> None:
        """A poll longer than the interval is slow, not down: the next starts when it ends, the metrics are
        that much older (ackscope_snapshot_age_seconds), and ackscope_up stays 1. Said once, with what to do."""
        said = self._overrun.update(took > self.interval)
        if said == "start":
            log.warning("polls take longer than the interval (this one %.1fs, --interval %gs): each starts when "
                        "the last ends and the metrics are that old; raise --interval, read the broker's "
                        "Prometheus plugin (--source prometheus), or watch fewer vhosts or queues "
                        "(--include-vhosts, --include-queues)", took, self.interval)
        elif said == "end":
            log.info("polls fit the %gs interval again (this one %.1fs)", self.interval, took)

    def _diagnose(self, snapshot: Snapshot, previous: Snapshot | None) -> Diagnosis:
        if self.diagnose is None:
            return Diagnosis()
        try:
            return self.diagnose(snapshot, previous, self.breaks)
        except Exception as e:  # a broken rule must not cost the metrics
            log.error("diagnosis failed: %s: %s", type(e).__name__, e)
            log.debug("diagnosis failure", exc_info=True)
            return Diagnosis()

    def _publish_success(self, snapshot: Snapshot, started: float, started_wall: float) -> None:
        """A good poll, perhaps partial: an endpoint failed and the rest of the snapshot stands."""
        unread = snapshot.unread
        failing = frozenset((u.endpoint, u.reason) for u in unread)
        message = "; ".join(u.message for u in unread) or None
        # One line when the trouble starts and one when it is over, not one per interval or change while it lasts:
        # the endpoints failing at the moment are in /api/snapshot and ackscope_poll_errors_total.
        said = self._partial.update(bool(unread))
        if said == "start":
            log.warning("poll partial, the rest is exported: %s", message)
        elif said == "end":
            log.info("every endpoint answers again")
        elif unread and failing != self.status.failing:
            log.debug("poll still partial, now: %s", message)
        self.status = replace(self.status, up=True, last_duration=time.monotonic() - started,
                              last_attempt_at=started_wall, last_success_at=started_wall, last_error=message,
                              failing=failing, errors=self._counted(unread), source=self.source.name)

    def _publish_failure(self, errors: list[FetchError], started: float, started_wall: float) -> None:
        message = "; ".join(str(e) for e in errors)
        failing = frozenset((e.endpoint, e.reason) for e in errors)
        # One line when the outage starts (and one when it ends), not one per interval or per change of reason
        # while it lasts: the reason of the moment is in /api/snapshot and ackscope_poll_errors_total.
        if self._outage.update(True) == "start":
            log.error("poll failed: %s", message)
        elif failing != self.status.failing:
            log.debug("poll still failing, now: %s", message)
        self.status = replace(self.status, up=False, last_duration=time.monotonic() - started,
                              last_attempt_at=started_wall, last_error=message, failing=failing,
                              errors=self._counted(errors))

    def _counted(self, errors) -> MappingProxyType:
        """ackscope_poll_errors_total, with this poll's errors (FetchError or Unread: endpoint, reason) added."""
        counts = dict(self.status.errors)
        for e in errors:
            counts[(e.endpoint, e.reason)] = counts.get((e.endpoint, e.reason), 0) + 1
        return MappingProxyType(counts)

    # -- the loop --------------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="ackscope-poller", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop polling. A poll in flight may wait for its deadline (30 s by default) on a hanging broker, while a
        stop must end within seconds (a container runtime kills after 10): it is given STOP_WAIT_S, then
        abandoned, as its answer would be published to nobody."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=STOP_WAIT_S)
        self.source.close()

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            try:
                self.poll_once()
            except Exception as e:  # a bug must not kill the loop; /healthz would show it stuck otherwise
                log.error("poll crashed: %s: %s", type(e).__name__, e)
                log.debug("poll crash", exc_info=True)
            next_at = max(next_at + self.interval, time.monotonic())
            self._stop.wait(next_at - time.monotonic())


def _guarded(read, snapshot, what: str, last):
    """read(snapshot), or `last` (what it gave before) where it raised, said in a line."""
    try:
        return read(snapshot)
    except Exception as e:
        log.error("reading %s failed: %s: %s", what, type(e).__name__, e)
        log.debug("%s: failure", what, exc_info=True)
        return last
