"""The management API as a Source: /api/overview first, then every list in parallel, all within one
deadline, normalised into a Snapshot.

/api/overview goes first, alone: it proves the API is reachable and the login good, so a broker that is
down or a wrong password costs one request per read, not a burst against every endpoint. A list that fails
after it costs only its own part: the poll is partial (Snapshot.unread), and the rules that need what the list
gives say "not evaluated" (RabbitMQ 4.0 and 4.3 answer a paginated /api/vhosts with HTTP 500, for one).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any

from ackscope.core.secret import Secret
from ackscope.model import snapshot as facts
from ackscope.model.snapshot import Snapshot
from ackscope.model.source import FATAL, FetchError, SourceFailed, as_fetch_error, partial

from ..selection import Selection
from . import normalise
from .client import ManagementClient

LISTS = ("nodes", "vhosts", "connections", "channels", "consumers", "queues")
# What a poll misses when one list fails while the others answer: the rules that need it say "not evaluated".
MISSED_WITHOUT = {
    "nodes": frozenset({facts.NODE_ALARMS}),
    "vhosts": frozenset(),
    "connections": frozenset({facts.CONNECTIONS, facts.CONNECTION_HEARTBEATS, facts.CONNECTION_STATES}),
    "channels": frozenset({facts.CHANNELS, facts.CHANNEL_TRANSACTIONAL}),
    "consumers": frozenset({facts.CHANNELS}),
    "queues": frozenset({facts.QUEUE_COUNTS, facts.QUEUE_DURABILITY, facts.QUEUE_PERSISTENT_COUNTS}),
}
# Above this many objects a list is asked for in one answer, not in pages: the broker lists and sorts the whole
# collection for every page it serves, so pages cost it the square of the size. Measured at 5,000 queues:
# 2.1 s of the broker's CPU in 10 pages, 1.2 s in one answer (docs/benchmarks.md). Below it, pages fetched
# side by side are quicker on the wall clock.
PAGES_UP_TO = 2_000


class ManagementSource:
    name = "management"

    def __init__(self, base_url: str, username: str, password: Secret, *, timeout: float = 5.0,
                 deadline: float = 10.0, verify: bool | str = True, selection: Selection = Selection(),
                 pages_up_to: float = PAGES_UP_TO):
        """ValueError when `base_url` is not an http(s) URL without credentials. Lists of more than
        `pages_up_to` objects are asked for in one answer."""
        self.client = ManagementClient(base_url, username, password, timeout=timeout, verify=verify)
        self.base_url = self.client.base_url
        self.deadline = deadline  # seconds one read may take, all endpoints together
        self.selection = selection
        self.pages_up_to = pages_up_to
        self._pool = ThreadPoolExecutor(max_workers=len(LISTS), thread_name_prefix="ackscope-fetch")
        self._built = normalise.Built()  # the last poll's channels and consumers, for the next

    def read(self) -> Snapshot:
        taken_at = time.time()
        raw, errors = self.fetch()
        while True:
            try:
                snapshot = normalise.snapshot(raw, taken_at, self.selection, self._built)
                break
            except normalise.MalformedResponse as e:
                # A list that is not the shape its endpoint has costs its part, as one that did not answer does.
                errors.append(FetchError(e.endpoint, "malformed", str(e).split(": ", 1)[-1]))
                if e.endpoint == "overview" or len(errors) == len(LISTS):
                    raise SourceFailed(errors) from None
                raw[e.endpoint] = []
        return partial(snapshot, errors, frozenset().union(*(MISSED_WITHOUT[e.endpoint] for e in errors)))

    def fetch(self) -> tuple[dict[str, Any], list[FetchError]]:
        """Every endpoint's JSON ([] for a list that failed) and the lists that failed; SourceFailed when the
        overview fails, every list does, or one fails for a reason that is the configuration's (FATAL).
        Bounded by the deadline."""
        deadline = time.monotonic() + self.deadline
        try:
            raw = {"overview": self.client.fetch("overview", deadline)}
        except FetchError as e:
            raise SourceFailed([e]) from None
        totals = normalise.object_totals(raw["overview"])
        futures = {self._pool.submit(self.client.fetch, name, deadline,
                                     paginate=totals.get(name, 0) <= self.pages_up_to): name for name in LISTS}
        done, pending = wait(futures, timeout=max(0.0, deadline - time.monotonic()))
        errors = [FetchError(futures[f], "deadline", f"no complete answer within the {self.deadline:g}s "
                             "poll deadline") for f in pending]
        for future in done:
            if future.exception() is not None:
                errors.append(as_fetch_error(futures[future], future.exception()))
            else:
                raw[futures[future]] = future.result()
        if len(errors) == len(LISTS) or any(e.reason in FATAL for e in errors):
            raise SourceFailed(errors)
        for e in errors:
            raw[e.endpoint] = []
        return raw, sorted(errors, key=lambda e: e.endpoint)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.client.close()
