"""The management API as a Source: /api/overview first, then every list in parallel, all within one
deadline, normalised into a Snapshot.

/api/overview goes first, alone: it proves the API is reachable and the login good, so a broker that is
down or a wrong password costs one request per read, not a burst against every endpoint.
"""

from __future__ import annotations

import time
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from typing import Any

from ackscope.core.secret import Secret
from ackscope.model.snapshot import Snapshot
from ackscope.model.source import FetchError, SourceFailed

from ..selection import Selection
from . import normalise
from .client import ManagementClient

LISTS = ("nodes", "vhosts", "connections", "channels", "consumers", "queues")
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
        raw = self.fetch()
        try:
            return normalise.snapshot(raw, taken_at, self.selection, self._built)
        except normalise.MalformedResponse as e:
            raise SourceFailed([FetchError(e.endpoint, "malformed", str(e).split(": ", 1)[-1])]) from None

    def fetch(self) -> dict[str, Any]:
        """Every endpoint's JSON, or SourceFailed naming each endpoint that failed; bounded by the deadline."""
        deadline = time.monotonic() + self.deadline
        try:
            raw = {"overview": self.client.fetch("overview", deadline)}
        except FetchError as e:
            raise SourceFailed([e]) from None
        totals = normalise.object_totals(raw["overview"])
        futures = {self._pool.submit(self.client.fetch, name, deadline,
                                     paginate=totals.get(name, 0) <= self.pages_up_to): name for name in LISTS}
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
            raise SourceFailed(errors)
        return raw

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.client.close()
