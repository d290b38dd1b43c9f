"""HTTP client for the RabbitMQ management API: the only place the exporter talks to the broker.

Read-only (GET), `columns=` so only the fields ackscope uses travel, pagination for long lists, a timeout
per request and a deadline no response can outlive. Every failure becomes a FetchError with a one-word
reason (for the error counter) and a one-line message a human understands; the password never appears
in either.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlsplit

import requests
import urllib3

from ackscope.core.secret import Secret
from ackscope.model.source import FetchError

from .normalise import COLUMNS

log = logging.getLogger("ackscope.sources")

PAGINATED = frozenset({"queues", "channels", "connections", "vhosts"})
MAX_PAGE_SIZE = 500  # the API refuses larger pages
# The broker lists and sorts the whole collection for every page it serves, so pages after the first
# are fetched a few at a time: measured at 5,000 queues, 10 pages take 1.9 s one by one, 1.0 s four at once.
PAGE_WORKERS = 4
_CHUNK = 64 * 1024


class ManagementClient:
    def __init__(self, base_url: str, username: str, password: Secret, *, timeout: float = 5.0,
                 verify: bool | str = True, page_size: int = MAX_PAGE_SIZE):
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"management URL must look like http(s)://host:port, not {base_url!r}")
        if parts.username or parts.password:
            raise ValueError("management URL must not carry credentials: use ACKSCOPE_USERNAME and "
                             "ACKSCOPE_PASSWORD or ACKSCOPE_PASSWORD_FILE")
        self.base_url = base_url.rstrip("/")
        self.username = username
        self._password = password
        self.timeout = timeout
        self.verify = verify
        if verify is False:
            # Said once here, instead of urllib3 warning on every request of every poll.
            urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
            log.warning("TLS certificate verification of %s is off (--insecure-skip-verify)", self.base_url)
        self.page_size = min(page_size, MAX_PAGE_SIZE)
        self._local = threading.local()  # one Session per worker thread: Sessions are not thread-safe
        self._pages = ThreadPoolExecutor(max_workers=PAGE_WORKERS, thread_name_prefix="ackscope-page")

    def fetch(self, endpoint: str, deadline: float) -> Any:
        """The endpoint's JSON (all pages of a paginated list, as one list), by `deadline` (monotonic)."""
        params = {"columns": ",".join(COLUMNS[endpoint])}
        if endpoint not in PAGINATED:
            return self._get(endpoint, params, deadline)
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

    def _session(self) -> requests.Session:
        session = getattr(self._local, "session", None)
        if session is None:
            session = requests.Session()
            session.auth = (self.username, self._password.reveal())
            session.headers["Accept"] = "application/json"
            self._local.session = session
        return session

    def _get(self, endpoint: str, params: dict, deadline: float) -> Any:
        url = f"{self.base_url}/api/{endpoint}"
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise FetchError(endpoint, "deadline", "poll deadline passed before the request was sent")
        wait = min(self.timeout, remaining)
        try:
            # verify is passed per request: a Session's own verify loses to REQUESTS_CA_BUNDLE in the environment.
            with self._session().get(url, params=params, timeout=(wait, wait), stream=True,
                                     verify=self.verify) as response:
                self._check_status(endpoint, response)
                body = self._read_body(endpoint, response, deadline)
        except FetchError:
            raise
        # Each cause becomes a FetchError whose sentence is the whole story: no chained traceback.
        except requests.exceptions.SSLError as e:
            raise FetchError(endpoint, "tls", f"TLS handshake with {self.base_url} failed "
                             f"({_root_cause(e)}); set --ca-file, or --insecure-skip-verify for tests") from None
        except requests.exceptions.Timeout:
            raise FetchError(endpoint, "timeout", f"no answer from {self.base_url} within {wait:.1f}s") from None
        except requests.exceptions.ConnectionError as e:
            if "timed out" in str(e).lower():
                raise FetchError(endpoint, "timeout", f"no answer from {self.base_url} within {wait:.1f}s") from None
            raise FetchError(endpoint, "connection", f"cannot connect to {self.base_url} ({_root_cause(e)})") from None
        except requests.RequestException as e:
            raise FetchError(endpoint, "connection", f"request to {self.base_url} failed ({_root_cause(e)})") from None
        try:
            return json.loads(body)
        except (ValueError, UnicodeDecodeError):
            raise FetchError(endpoint, "malformed", f"answer is not valid JSON ({len(body)} bytes, "
                             f"starts {body[:40]!r})") from None

    def _check_status(self, endpoint: str, response: requests.Response) -> None:
        status = response.status_code
        if status == 200:
            ctype = response.headers.get("Content-Type", "")
            if "json" not in ctype:
                raise FetchError(endpoint, "malformed", f"answer is {ctype or 'untyped'}, not JSON "
                                 "(a proxy's error page?)")
            return
        if status == 401:
            raise FetchError(endpoint, "unauthorized", f"login failed for user {self.username!r}: check "
                             "ACKSCOPE_USERNAME and ACKSCOPE_PASSWORD / ACKSCOPE_PASSWORD_FILE")
        if status == 403:
            raise FetchError(endpoint, "forbidden", f"user {self.username!r} may not read /api/{endpoint}: "
                             "give it the 'monitoring' tag")
        if status == 404:
            raise FetchError(endpoint, "not_found", f"/api/{endpoint} not found: is this the management "
                             "plugin's URL?")
        reason = "server_error" if status >= 500 else "http_error"
        raise FetchError(endpoint, reason, f"HTTP {status} from /api/{endpoint}", status)

    @staticmethod
    def _read_body(endpoint: str, response: requests.Response, deadline: float) -> bytes:
        chunks = []
        for chunk in response.iter_content(_CHUNK):
            chunks.append(chunk)
            if time.monotonic() > deadline:
                raise FetchError(endpoint, "deadline", "poll deadline passed while the answer was arriving")
        return b"".join(chunks)


def _root_cause(error: BaseException) -> str:
    """The innermost cause, briefly: 'Connection refused', not three nested reprs."""
    while error.__cause__ is not None or error.__context__ is not None:
        error = error.__cause__ or error.__context__
    text = str(error)
    for marker in ("Connection refused", "Name or service not known", "certificate verify failed",
                   "No route to host", "Connection reset"):
        if marker in text:
            return marker
    return text.split(": ")[-1][:120] or type(error).__name__
