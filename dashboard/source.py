"""Fetching the exporter's JSON for the dashboard: the only I/O the live pages do.

The dashboard's server fetches (the browser only receives what the pages render). When the exporter
cannot be reached, the last good data stays, marked stale, and the error is one line for a banner.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

import requests

DOCUMENTS = ("snapshot", "findings", "probes", "breaks", "traces")
# The landing page's: the exporter's /api/overview holds what it shows and no more (a few kB against megabytes).
LANDING = ("overview", "probes")


@dataclass(frozen=True)
class Live:
    """What the exporter said, as of `fetched_at`; `error` set (and `stale` true) when the last fetch failed
    and this is older data, or none at all."""
    snapshot: dict[str, Any] | None = None  # /api/snapshot's "snapshot"
    previous: dict[str, Any] | None = None  # the snapshot before it, for rates
    findings: list[dict[str, Any]] = field(default_factory=list)
    probes: list[dict[str, Any]] = field(default_factory=list)
    fetched_at: float | None = None
    error: str | None = None
    exporter_error: str | None = None  # the exporter is up but cannot poll the broker
    source: str | None = None  # where the exporter reads the broker: management, prometheus
    not_evaluated: list[dict[str, Any]] = field(default_factory=list)  # rules the source cannot feed
    breaks: dict[str, Any] = field(default_factory=dict)  # /api/breaks: the event sources and the window's events
    upgrades: list[dict[str, Any]] = field(default_factory=list)  # /api/findings' outlook for each later release
    traces: dict[str, Any] = field(default_factory=dict)  # /api/traces: the applications' messages, by their spans

    @property
    def stale(self) -> bool:
        return self.error is not None or self.exporter_error is not None


class ExporterSource:
    """Fetches /api/snapshot, /api/findings, /api/probes, /api/breaks and /api/traces (or /api/overview in place
    of the first two, for the landing pages); keeps the last good result."""

    def __init__(self, url: str, auth: tuple[str, str] | None = None, timeout: float = 5.0,
                 verify: bool | str = True, reuse_seconds: float = 1.0, documents: tuple[str, ...] = DOCUMENTS,
                 idle_seconds: float = 60.0):
        self.url = url.rstrip("/")
        # What each fetch asks for: all for a broker's pages; /api/overview (its cut snapshot in `snapshot`, the
        # same queues before in `previous`) and the probes for the landing page, /api/overview alone for the
        # landing page of several.
        self.documents = documents
        self._session = requests.Session()
        self._session.auth = auth
        self._session.verify = verify
        self.timeout = timeout
        # Each document as last received, with its entity tag: the exporter answers 304 until its next poll,
        # so a refresh does not download and decode the same megabytes (25 MB at 50,000 queues) again.
        self._tagged: dict[str, tuple[str, dict]] = {}
        self._lock = threading.Lock()
        self._last = Live()
        # Browser sessions that refresh within this long of each other share one fetch: the exporter's
        # snapshot of 5,000 queues is megabytes, and it changes only once per poll anyway.
        self.reuse_seconds = reuse_seconds
        # latest(): the fetches in the background, while pages read them.
        self.idle_seconds = idle_seconds
        self._attempted_at: float | None = None  # monotonic: the last fetch's start, whatever came of it
        self._read_at = 0.0
        self._every = 10.0
        self._refresher: threading.Thread | None = None
        self._refresher_lock = threading.Lock()  # not _lock: a fetch holds that for as long as the exporter takes

    def fetch(self) -> Live:
        """Fetch every document (one caller at a time; a fetch younger than reuse_seconds is reused)."""
        with self._lock:
            last = self._last
            if last.error is None and last.fetched_at and time.time() - last.fetched_at < self.reuse_seconds:
                return last
            self._attempted_at = time.monotonic()
            try:
                docs = {name: self._get(name) for name in self.documents}
            except FetchFailed as e:
                self._last = replace(self._last, error=str(e))
                return self._last
            # /api/overview carries what /api/snapshot's head and /api/findings do, and the snapshot before.
            head, found = docs.get("overview") or docs["snapshot"], docs.get("overview") or docs["findings"]
            snapshot = head.get("snapshot")
            if "overview" in docs:
                previous = head.get("previous")
            else:
                previous = self._last.snapshot
                if previous is not None and snapshot is not None and previous.get("taken_at") == snapshot.get(
                        "taken_at"):
                    previous = self._last.previous  # the exporter has not polled since: keep the older one for rates
            poll_error = None if head.get("up") else (head.get("last_error") or "the exporter's last poll failed")
            self._last = Live(snapshot, previous, found.get("findings", []),
                              docs.get("probes", {}).get("probes", []), time.time(), None, poll_error,
                              head.get("source"), found.get("not_evaluated", []),
                              docs.get("breaks", {}), found.get("upgrades", []), docs.get("traces", {}))
            return self._last

    def latest(self, every: float) -> Live:
        """What the last fetch got, at once, kept fresh by a fetch in the background every `every` seconds while
        pages read it (until none has for idle_seconds): a page load waits on no exporter, and one that hangs
        delays nothing; it is shown stale once its fetch has failed. Waits only where there is nothing that recent
        to show: the first read, or the first after the background stopped."""
        self._read_at, self._every = time.monotonic(), every
        with self._refresher_lock:
            if self._refresher is None or not self._refresher.is_alive():
                self._refresher = threading.Thread(target=self._keep_fresh, daemon=True,
                                                   name=f"ackscope-fetch {self.url}")
                self._refresher.start()
        attempted = self._attempted_at
        if attempted is None or time.monotonic() - attempted > 2 * every:
            return self.fetch()
        return self._last

    def _keep_fresh(self) -> None:
        while True:
            time.sleep(self._every)  # a timer: the next fetch is due
            if time.monotonic() - self._read_at > self.idle_seconds:
                return
            self.fetch()

    def _get(self, name: str) -> dict:
        url = f"{self.url}/api/{name}"
        held = self._tagged.get(name)
        try:
            response = self._session.get(url, timeout=self.timeout,
                                         headers={"If-None-Match": held[0]} if held else None)
        except requests.exceptions.ConnectionError:
            raise FetchFailed(f"the exporter at {self.url} cannot be reached (connection refused or no route)") \
                from None
        except requests.exceptions.Timeout:
            raise FetchFailed(f"the exporter at {self.url} did not answer within {self.timeout:g} s") from None
        except requests.exceptions.RequestException as e:
            raise FetchFailed(f"the exporter at {self.url}: {type(e).__name__}") from None
        if response.status_code == 401:
            raise FetchFailed(f"the exporter at {self.url} refused the dashboard's credentials (HTTP 401)")
        if response.status_code == 404:
            raise FetchFailed(f"{url} not found: is {self.url} an ackscope exporter?")
        if response.status_code == 304 and held:
            return held[1]
        if response.status_code != 200:
            raise FetchFailed(f"the exporter at {self.url} answered HTTP {response.status_code} for /api/{name}")
        try:
            doc = response.json()
        except ValueError:
            raise FetchFailed(f"the exporter at {self.url} sent malformed JSON for /api/{name}") from None
        if response.headers.get("ETag"):
            self._tagged[name] = (response.headers["ETag"], doc)
        return doc


def latest_side_by_side(sources: list[ExporterSource], every: float) -> list[Live]:
    """Each source's latest(), those that must fetch all at once: a broker whose exporter hangs delays the others
    by nothing more than its own timeout, and that only where there is nothing recent to show."""
    with ThreadPoolExecutor(max(1, len(sources)), thread_name_prefix="ackscope-exporters") as pool:
        return list(pool.map(lambda source: source.latest(every), sources))


class FetchFailed(Exception):
    """One line for the banner."""
