"""HTTP client for the RabbitMQ management API: read-only (GET), `columns=` so only the fields ackscope uses
travel, pagination for long lists; requests, timeouts and failures as sources.http reads them."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import quote

from ackscope.core.secret import Secret
from ackscope.model.source import FetchError

from ..http import HttpReader
from .normalise import COLUMNS

# Not /api/vhosts: vhosts are few, and RabbitMQ 4.0 and 4.3 answer it paginated with HTTP 500 (a
# function_clause in rabbit_queue_type:inject_dqt), in one answer with 200.
PAGINATED = frozenset({"queues", "channels", "connections"})
# Lists the broker builds whole before it sends their first byte when asked in one answer: such an answer may
# take until the poll's deadline, not only one request's timeout (at 50,000 queues on a busy node /api/consumers,
# which has no pages, once outlasted the 5 s timeout).
WHOLE_LISTS = PAGINATED | {"consumers"}
MAX_PAGE_SIZE = 500  # the API refuses larger pages
# Above this many objects a list is asked for in one answer, not in pages: the broker lists and sorts the whole
# collection for every page it serves, so pages cost it the square of the size. Measured at 5,000 queues:
# 2.1 s of the broker's CPU in 10 pages, 1.2 s in one answer (docs/benchmarks.md). Below it, pages fetched
# side by side are quicker on the wall clock.
PAGES_UP_TO = 2_000
# The broker lists and sorts the whole collection for every page it serves, so pages after the first
# are fetched a few at a time: measured at 5,000 queues, 10 pages take 1.9 s one by one, 1.0 s four at once.
PAGE_WORKERS = 4


class ManagementClient:
    def __init__(self, base_url: str, username: str, password: Secret, *, timeout: float = 5.0,
                 verify: bool | str = True, page_size: int = MAX_PAGE_SIZE):
        self.http = HttpReader(base_url, username, password, timeout=timeout, verify=verify,
                               what="management plugin")
        self.base_url = self.http.base_url
        self.page_size = min(page_size, MAX_PAGE_SIZE)
        self._pages = ThreadPoolExecutor(max_workers=PAGE_WORKERS, thread_name_prefix="ackscope-page")

    def fetch(self, endpoint: str, deadline: float, *, columns: tuple[str, ...] | None = None,
              paginate: bool = True, statistics: bool = True, vhost: str | None = None) -> Any:
        """The endpoint's JSON (all pages of a paginated list, as one list), by `deadline` (monotonic), with
        the `columns` the normaliser reads unless told fewer. paginate=False asks for a list in one answer:
        cheaper for the broker, which lists and sorts the whole collection for every page, where each item is
        small (the queues' names, types and durability). statistics=False tells a broker whose statistics are
        on not to gather them for the list (disable_stats): 840 ms of its CPU become 170 ms at 5,000 queues.
        `vhost`: that vhost's objects only (/api/<endpoint>/<vhost>)."""
        params = {"columns": ",".join(columns or COLUMNS[endpoint])}
        if not statistics:
            params["disable_stats"] = "true"
        if vhost is not None:
            return self.http.json(endpoint, f"/api/{endpoint}/{quote(vhost, safe='')}", params, deadline, False)
        if endpoint not in PAGINATED or not paginate:
            # A whole list in one answer comes when the broker has built it: patient, within the deadline.
            return self._get(endpoint, params, deadline, patient=endpoint in WHOLE_LISTS)
        first = self._page(endpoint, params, 1, deadline)
        if isinstance(first, list):  # an API that ignores pagination answers with the whole list
            return first
        page_count = first.get("page_count")
        rest = range(2, page_count + 1) if isinstance(page_count, int) else range(0)
        futures = [self._pages.submit(self._page, endpoint, params, n, deadline) for n in rest]
        items = list(first["items"])
        for future in futures:
            items.extend(future.result()["items"])
        return items

    def _page(self, endpoint: str, params: dict, page: int, deadline: float) -> Any:
        try:
            body = self._get(endpoint, dict(params, page=page, page_size=self.page_size), deadline)
        except FetchError as e:
            if page > 1 and e.status == 400:  # the list shrank under us: that page no longer exists
                return {"items": []}
            raise
        if isinstance(body, list) and page == 1:
            return body
        if not isinstance(body, dict) or not isinstance(body.get("items"), list):
            raise FetchError(endpoint, "malformed", "paginated answer has no 'items' list")
        return body

    def close(self) -> None:
        self._pages.shutdown(wait=False, cancel_futures=True)

    def _get(self, endpoint: str, params: dict, deadline: float, patient: bool = False) -> Any:
        return self.http.json(endpoint, f"/api/{endpoint}", params, deadline, patient)
