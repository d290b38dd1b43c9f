"""The exporter's JSON documents carry an entity tag, and the dashboard asks with it: a refresh between two
polls costs a 304, not the megabytes of the snapshot again (25 MB at 50,000 queues)."""

from __future__ import annotations

import gzip
import json
import threading
import time

import requests
from helpers import wait_for

from ackscope.core.http_server import Source, make_server, serve_in_background
from ackscope.dashboard.source import LANDING, ExporterSource


def serving(documents: dict[str, bytes]):
    server = make_server("127.0.0.1", 0, Source(metrics=lambda gz: b"", healthy=lambda: True,
                                                documents={p: (lambda p=p: documents[p]) for p in documents}))
    serve_in_background(server)
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def doc(taken_at: float) -> bytes:
    """A document as the exporter keeps it: gzipped."""
    return gzip.compress(json.dumps({"up": True, "snapshot": {"taken_at": taken_at, "queues": []}, "findings": [],
                                     "probes": []}).encode())


def test_a_document_unchanged_since_the_clients_copy_is_answered_304_without_a_body():
    documents = {"/api/snapshot": doc(1.0)}
    server, url = serving(documents)
    try:
        first = requests.get(url + "/api/snapshot", timeout=5)
        tag = first.headers["ETag"]
        again = requests.get(url + "/api/snapshot", headers={"If-None-Match": tag}, timeout=5)
        assert (again.status_code, again.content, again.headers["ETag"]) == (304, b"", tag)
        documents["/api/snapshot"] = doc(2.0)  # the next poll
        fresh = requests.get(url + "/api/snapshot", headers={"If-None-Match": tag}, timeout=5)
        assert fresh.status_code == 200 and fresh.json()["snapshot"]["taken_at"] == 2.0
        assert fresh.headers["ETag"] != tag
    finally:
        server.shutdown()


def test_the_dashboard_keeps_what_it_decoded_while_the_exporter_says_not_modified():
    documents = {f"/api/{name}": doc(1.0) for name in ("snapshot", "findings", "probes", "breaks", "traces")}
    server, url = serving(documents)
    try:
        source = ExporterSource(url, reuse_seconds=0)
        first = source.fetch()
        second = source.fetch()
        assert second.error is None and second.snapshot is first.snapshot  # not downloaded nor decoded again
        documents["/api/snapshot"] = doc(2.0)
        third = source.fetch()
        assert third.snapshot["taken_at"] == 2.0 and third.previous is first.snapshot
    finally:
        server.shutdown()


def test_a_document_is_sent_gzipped_to_a_client_that_takes_it_and_unpacked_to_one_that_does_not():
    server, url = serving({"/api/snapshot": doc(3.0)})
    try:
        packed = requests.get(url + "/api/snapshot", headers={"Accept-Encoding": "gzip"}, timeout=5, stream=True)
        assert packed.headers["Content-Encoding"] == "gzip"
        assert json.loads(gzip.decompress(packed.raw.read(decode_content=False)))["snapshot"]["taken_at"] == 3.0
        plain = requests.get(url + "/api/snapshot", headers={"Accept-Encoding": "identity"}, timeout=5)
        assert "Content-Encoding" not in plain.headers and json.loads(plain.content)["snapshot"]["taken_at"] == 3.0
    finally:
        server.shutdown()


def test_a_polls_document_is_rendered_when_first_asked_for_and_only_once():
    from ackscope.exporter.exposition import Document

    rendered = []
    document = Document(lambda: rendered.append(1) or b'{"snapshot":null}')
    assert rendered == []  # a poll nobody reads builds nothing
    first, again = document.gz(), document.gz()
    assert first is again and gzip.decompress(first) == b'{"snapshot":null}' and rendered == [1]


def test_the_landing_page_reads_the_last_fetch_at_once_kept_fresh_in_the_background_and_a_hang_delays_nothing():
    documents = {"/api/overview": doc(1.0), "/api/probes": doc(1.0)}
    hanging = threading.Event()

    def answer(path: str) -> bytes:
        if hanging.is_set():
            time.sleep(3)  # an exporter that does not answer (its poll holding it, or worse)
        return documents[path]
    server = make_server("127.0.0.1", 0, Source(metrics=lambda gz: b"", healthy=lambda: True,
                                                documents={p: (lambda p=p: answer(p)) for p in documents}))
    serve_in_background(server)
    url = f"http://127.0.0.1:{server.server_address[1]}"
    fetcher = f"ackscope-fetch {url}"
    try:
        source = ExporterSource(url, timeout=0.5, reuse_seconds=0, documents=LANDING, idle_seconds=1.0)
        assert source.latest(0.2).snapshot["taken_at"] == 1.0  # the first read waits: there is nothing to show
        documents["/api/overview"] = doc(2.0)  # the exporter's next poll, fetched in the background
        wait_for(lambda: source.latest(0.2).snapshot["taken_at"] == 2.0, 5, "the background to fetch the next poll")
        hanging.set()
        started = time.monotonic()
        assert source.latest(0.2).snapshot["taken_at"] == 2.0 and time.monotonic() - started < 0.1
        stale = wait_for(lambda: (live := source.latest(0.2)).stale and live, 5, "the hang to be said")
        assert stale.error == f"the exporter at {url} did not answer within 0.5 s" and stale.snapshot
        # Nobody reads: the background stops after idle_seconds.
        wait_for(lambda: fetcher not in {t.name for t in threading.enumerate()}, 10, "the background to stop")
    finally:
        server.shutdown()
