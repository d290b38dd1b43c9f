"""The exporter's JSON documents carry an entity tag, and the dashboard asks with it: a refresh between two
polls costs a 304, not the megabytes of the snapshot again (25 MB at 50,000 queues)."""

from __future__ import annotations

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
    return json.dumps({"up": True, "snapshot": {"taken_at": taken_at, "queues": []}, "findings": [],
                       "probes": []}).encode()


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
    documents = {f"/api/{name}": doc(1.0) for name in ("snapshot", "findings", "probes")}
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
