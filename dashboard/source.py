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

DOCUMENTS = ("snapshot", "findings", "probes", "breaks")


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

    @property
    def stale(self) -> bool:
        return self.error is not None or self.exporter_error is not None


class ExporterSource:
    """Fetches /api/snapshot, /api/findings, /api/probes and /api/breaks; keeps the last good result."""

    def __init__(self, url: str, auth: tuple[str, str] | None = None, timeout: float = 5.0,
                 verify: bool | str = True, reuse_seconds: float = 1.0, documents: tuple[str, ...] = DOCUMENTS):
        self.url = url.rstrip("/")
        # What each fetch asks for: all for a broker's pages; only the findings for the landing page of several,
        # which shows no more (its other fields stay empty).
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

    def fetch(self) -> Live:
        """Fetch every document (one caller at a time; a fetch younger than reuse_seconds is reused)."""
        with self._lock:
            last = self._last
            if last.error is None and last.fetched_at and time.time() - last.fetched_at < self.reuse_seconds:
                return last
            try:
                docs = {name: self._get(name) for name in self.documents}
                docs.setdefault("snapshot", {"up": docs["findings"].get("up", True),
                                             "last_error": docs["findings"].get("last_error")})
            except FetchFailed as e:
                self._last = replace(self._last, error=str(e))
                return self._last
            snapshot = docs["snapshot"].get("snapshot")  # None when only the findings were asked for
            previous = self._last.snapshot
            if previous is not None and snapshot is not None and previous.get("taken_at") == snapshot.get("taken_at"):
                previous = self._last.previous  # the exporter has not polled since: keep the older one for rates
            poll_error = None if docs["snapshot"].get("up") else (docs["snapshot"].get("last_error")
                                                                   or "the exporter's last poll failed")
            self._last = Live(snapshot, previous, docs["findings"].get("findings", []),
                              docs.get("probes", {}).get("probes", []), time.time(), None, poll_error,
                              docs["snapshot"].get("source"), docs["findings"].get("not_evaluated", []),
                              docs.get("breaks", {}), docs["findings"].get("upgrades", []))
            return self._last

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


def fetch_side_by_side(sources: list[ExporterSource]) -> list[Live]:
    """Each source's fetch, all at once: a broker whose exporter hangs delays the others by nothing more than
    its own timeout."""
    with ThreadPoolExecutor(max(1, len(sources)), thread_name_prefix="ackscope-exporters") as pool:
        return list(pool.map(ExporterSource.fetch, sources))


class FetchFailed(Exception):
    """One line for the banner."""
