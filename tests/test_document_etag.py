"""The exporter's JSON documents carry an entity tag, and the dashboard asks with it: a refresh between two
polls costs a 304, not the megabytes of the snapshot again (25 MB at 50,000 queues)."""

from __future__ import annotations

import gzip
import json

import requests

from ackscope.core.http_server import Source, make_server, serve_in_background
from ackscope.dashboard.source import ExporterSource


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
    documents = {f"/api/{name}": doc(1.0) for name in ("snapshot", "findings", "probes", "breaks")}
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
