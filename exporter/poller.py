"""The background loop: poll the management API, build a snapshot, render it, publish it.

Scrapes never wait on the broker: they read `Poller.exposition`, replaced whole after each poll.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import replace
from types import MappingProxyType
from collections.abc import Callable
from typing import Any

from ackscope.diagnosis.findings import Finding

from . import normalise
from .cardinality import Limits
from .exposition import Exposition, render
from .management import FetchError, ManagementClient
from .normalise import MalformedResponse, Selection
from .snapshot import Snapshot
from .status import PollStatus

log = logging.getLogger("ackscope.exporter")

# /api/overview goes first, alone: it proves the API is reachable and the login good, so a broker that is
# down or a wrong password costs one request per interval, not a burst against every endpoint.
LISTS = ("nodes", "vhosts", "connections", "channels", "consumers", "queues")


class PollFailed(Exception):
    def __init__(self, errors: list[FetchError]):
        super().__init__("; ".join(str(e) for e in errors))
        self.errors = errors


class Poller:
    def __init__(self, client: ManagementClient, *, interval: float, deadline: float,
                 selection: Selection = Selection(), limits: Limits = Limits(),
                 diagnose: Callable[[Snapshot, Snapshot | None], list[Finding]] | None = None,
                 record: Callable[[Snapshot], None] | None = None):
        self.client = client
        self.interval = interval
        self.deadline = deadline
        self.selection = selection
        self.limits = limits
        self.status = PollStatus()
        self.snapshot: Snapshot | None = None
        self.diagnose = diagnose
        self.record = record  # keeps each good snapshot (the history under --data-dir)
        self.findings: tuple[Finding, ...] = ()
        self.exposition: Exposition = render(None, self.status, limits)
        self._pool = ThreadPoolExecutor(max_workers=len(LISTS), thread_name_prefix="ackscope-fetch")
        self._notes_logged: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- one poll --------------------------------------------------------------------------------------
    def fetch(self) -> dict[str, Any]:
        """Every endpoint's JSON, or PollFailed naming each endpoint that failed; bounded by the deadline."""
        deadline = time.monotonic() + self.deadline
        try:
            raw = {"overview": self.client.fetch("overview", deadline)}
        except FetchError as e:
            raise PollFailed([e]) from None
        futures = {self._pool.submit(self.client.fetch, name, deadline): name for name in LISTS}
        done, pending = wait(futures, timeout=max(0.0, deadline - time.monotonic()), return_when=FIRST_EXCEPTION)
        errors = []
        for future in done:
            if future.exception() is not None:
                error = future.exception()
                if not isinstance(error, FetchError):
                    error = FetchError(futures[future], "internal", f"{type(error).__name__}: {error}")
                errors.append(error)
            else:
                raw[futures[future]] = future.result()
        if errors:
            for future in pending:
                future.cancel()
        else:
            errors = [FetchError(futures[f], "deadline", f"no complete answer within the {self.deadline:g}s "
                                 "poll deadline") for f in pending]
        if errors:
            raise PollFailed(sorted(errors, key=lambda e: e.endpoint))
        return raw

    def poll_once(self) -> None:
        """Poll, then publish the new snapshot and exposition (or the failure, keeping the last snapshot)."""
        started_wall, started = time.time(), time.monotonic()
        try:
            snapshot = normalise.snapshot(self.fetch(), started_wall, self.selection)
        except PollFailed as failure:
            self._publish_failure(failure.errors, started, started_wall)
        except MalformedResponse as e:
            self._publish_failure([FetchError(e.endpoint, "malformed", str(e))], started, started_wall)
        else:
            was_up = self.status.up or self.status.last_attempt_at is None
            self.findings = self._diagnose(snapshot, self.snapshot)
            self.snapshot = snapshot
            if self.record is not None:
                self.record(snapshot)
            self.status = replace(self.status, up=True, last_duration=time.monotonic() - started,
                                  last_attempt_at=started_wall, last_success_at=started_wall, last_error=None,
                                  failing=frozenset())
            if not was_up:
                log.info("management API at %s answers again", self.client.base_url)
            for note in set(snapshot.notes) - self._notes_logged:
                log.info("%s", note)
                self._notes_logged.add(note)
        self.exposition = render(self.snapshot, self.status, self.limits, self.findings)

    def _diagnose(self, snapshot: Snapshot, previous: Snapshot | None) -> tuple[Finding, ...]:
        if self.diagnose is None:
            return ()
        try:
            return tuple(self.diagnose(snapshot, previous))
        except Exception as e:  # a broken rule must not cost the metrics
            log.error("diagnosis failed: %s: %s", type(e).__name__, e)
            log.debug("diagnosis failure", exc_info=True)
            return ()

    def _publish_failure(self, errors: list[FetchError], started: float, started_wall: float) -> None:
        counts = dict(self.status.errors)
        for e in errors:
            counts[(e.endpoint, e.reason)] = counts.get((e.endpoint, e.reason), 0) + 1
        message = "; ".join(str(e) for e in errors)
        failing = frozenset((e.endpoint, e.reason) for e in errors)
        # One line when the trouble starts or changes, not one per interval while it lasts.
        if failing != self.status.failing:
            log.error("poll failed: %s", message)
        self.status = replace(self.status, up=False, last_duration=time.monotonic() - started,
                              last_attempt_at=started_wall, last_error=message, failing=failing,
                              errors=MappingProxyType(counts))

    # -- the loop --------------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="ackscope-poller", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.deadline + 5)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.client.close()

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
