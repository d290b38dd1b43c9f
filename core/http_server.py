"""The HTTP server of the exporter and of `ackscope probe`. Handlers copy bytes rendered in the background (the
probes' few hundred series are the exception: rendered per scrape, in well under a millisecond).

/metrics      Prometheus exposition (gzip when asked)
/api/...      JSON documents, kept gzipped (the exporter's /api/snapshot: the last good snapshot, marked stale
              when the last poll failed)
/healthz      200 while the poll loop runs on schedule (the broker being down is ackscope_up, not this)
POST paths    what a receiver takes in (the exporter's /v1/traces: OTLP), behind the same auth and TLS
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import hmac
import logging
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Protocol

from .secret import Secret

log = logging.getLogger("ackscope.http")

METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"  # Prometheus' text format

INDEX = b"""<!doctype html><title>ackscope</title><h1>ackscope</h1><ul>{links}</ul>"""


@dataclass(frozen=True)
class WebSecurity:
    """Optional basic auth and TLS for the exporter's own endpoints (/healthz stays open for probes)."""

    username: str | None = None
    password: Secret | None = None
    tls_cert: str | None = None
    tls_key: str | None = None


class Receiver(Protocol):
    """What a POST path takes in (the exporter's /v1/traces). Each answer is (status, body, Content-Type)."""

    max_request_bytes: int

    def receive(self, body: bytes, content_type: str, encoding: str) -> tuple[int, bytes, str]: ...

    def too_large(self) -> tuple[int, bytes, str]:
        """The answer to a body over max_request_bytes, given (and counted) before it is read."""


@dataclass(frozen=True)
class Source:
    """What the handlers read: the /metrics body (gzipped or not), JSON documents under /api/ (gzipped: each
    is served as it is to a client that takes gzip, unpacked for one that does not), and whether the background
    loops keep their schedule."""

    metrics: Callable[[bool], bytes]
    healthy: Callable[[], bool]
    documents: Mapping[str, Callable[[], bytes]] = field(default_factory=dict)
    receivers: Mapping[str, Receiver] = field(default_factory=dict)  # POST paths


def make_server(host: str, port: int, source: Source, security: WebSecurity = WebSecurity()) -> ThreadingHTTPServer:
    """A bound, not yet serving, HTTP(S) server."""
    etag = _ETags()
    expected = None
    if security.username is not None and security.password is not None:
        token = f"{security.username}:{security.password.reveal()}".encode()
        expected = b"Basic " + base64.b64encode(token)

    class Handler(BaseHTTPRequestHandler):
        server_version = "ackscope"
        protocol_version = "HTTP/1.1"
        # Headers and body go out in two writes: without TCP_NODELAY a small answer waits ~40 ms for the
        # client's delayed ACK (measured: 44 ms p50 for a 10 KB /metrics, keep-alive).
        disable_nagle_algorithm = True
        timeout = 30  # an idle or stalled client gives its thread back

        def setup(self):
            super().setup()
            if isinstance(self.request, ssl.SSLSocket):
                self.request.do_handshake()  # here, in the handler thread, never in accept()

        def _authorised(self) -> bool:
            if expected is None or hmac.compare_digest(self.headers.get("Authorization", "").encode(), expected):
                return True
            self._send(401, b"authentication required\n", "text/plain", {"WWW-Authenticate": 'Basic realm="ackscope"'})
            return False

        def do_POST(self):
            path = self.path.split("?", 1)[0]
            receiver = source.receivers.get(path)
            # Whatever is answered before the body is read closes the connection: the unread body would be taken
            # for the next request.
            self.close_connection = True
            if receiver is None:
                return self._send(404, b"not found\n", "text/plain")
            if not self._authorised():
                return None
            try:
                length = int(self.headers.get("Content-Length", ""))
            except ValueError:
                return self._send(411, b"a Content-Length is required\n", "text/plain")
            if not 0 <= length <= receiver.max_request_bytes:
                return self._send(*receiver.too_large())
            body = self.rfile.read(length)
            self.close_connection = self.headers.get("Connection", "").lower() == "close"
            status, answer, ctype = receiver.receive(body, self.headers.get("Content-Type", ""),
                                                     self.headers.get("Content-Encoding", ""))
            return self._send(status, answer, ctype)

        def do_GET(self):
            path = self.path.split("?", 1)[0]
            if path in source.receivers:  # there, but for POSTs: not a 404, which says it is not there at all
                return self._send(405, b"POST only\n", "text/plain", {"Allow": "POST"})
            if path == "/healthz":
                ok = source.healthy()
                return self._send(200 if ok else 503, b"ok\n" if ok else b"poll loop stalled\n", "text/plain")
            if not self._authorised():
                return None
            gzipped = "gzip" in self.headers.get("Accept-Encoding", "")
            if path == "/metrics":
                return self._send(200, source.metrics(gzipped), METRICS_CONTENT_TYPE,
                                  {"Content-Encoding": "gzip"} if gzipped else {})
            if path in source.documents:
                # A document changes once per poll: a client that has this one (the dashboard, refreshing
                # every few seconds) is told so instead of fetching megabytes again.
                body = source.documents[path]()
                tag = etag(path, body)
                if tag in self.headers.get("If-None-Match", ""):
                    return self._send(304, b"", "application/json", {"ETag": tag})
                if gzipped:
                    return self._send(200, body, "application/json", {"ETag": tag, "Content-Encoding": "gzip"})
                return self._send(200, gzip.decompress(body), "application/json", {"ETag": tag})
            if path == "/":
                links = "".join(f'<li><a href="{p}">{p}</a>' for p in ("/metrics", *source.documents, "/healthz"))
                return self._send(200, INDEX.replace(b"{links}", links.encode()), "text/html; charset=utf-8")
            return self._send(404, b"not found\n", "text/plain")

        def _send(self, status: int, body: bytes, ctype: str, headers: dict | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            if self.close_connection:
                self.send_header("Connection", "close")
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format, *args):
            log.debug("%s %s", self.address_string(), format % args)

    server = _Server((host, port), Handler)
    if security.tls_cert:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(security.tls_cert, security.tls_key)
        server.socket = context.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
    return server


class _ETags:
    """The entity tag of each path's document, hashed once per body (the handlers are given the same bytes
    until the next poll renders new ones). Only the latest body of each path is held: an older one, kept, would
    be megabytes for nothing."""

    def __init__(self):
        self._lock = threading.Lock()
        self._tags: dict[str, tuple[bytes, str]] = {}

    def __call__(self, path: str, body: bytes) -> str:
        known = self._tags.get(path)
        if known is not None and known[0] is body:
            return known[1]
        tag = f'"{hashlib.blake2b(body, digest_size=12).hexdigest()}"'  # megabytes in milliseconds, GIL released
        with self._lock:
            self._tags[path] = (body, tag)
        return tag


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        # A client that hangs up or fails its TLS handshake is not the operator's problem: no traceback.
        log.debug("connection from %s failed", client_address[0], exc_info=True)


def serve_in_background(server: ThreadingHTTPServer) -> threading.Thread:
    thread = threading.Thread(target=server.serve_forever, name="ackscope-http", daemon=True)
    thread.start()
    return thread


def loop_healthy(last_attempt_at: Callable[[], float | None], started_at: float, interval: float,
                 deadline: float) -> Callable[[], bool]:
    """Healthy while a poll started within the last interval plus deadline (with slack for one overrun)."""
    def healthy() -> bool:
        last = last_attempt_at() or started_at
        return time.time() - last <= 2 * interval + deadline + 5
    return healthy
