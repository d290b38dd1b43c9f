"""A proxy in front of the real management API that breaks one endpoint, or all, on demand (the tests' and the
soak's faults).

The broker's answers stay real; only the fault is injected: an API that hangs, trickles, answers with
malformed or truncated JSON, an HTML error page, a 500, or (for the Prometheus plugin) an answer without
some series, as a version that does not know their family gives it.
"""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import requests

FAULTS = ("hang", "trickle", "malformed", "truncated", "html", "500")


class FaultProxy:
    def __init__(self, upstream: str, host: str = "127.0.0.1"):
        """`host`: the address it listens on (a test host's link, for one)."""
        self.upstream = upstream.rstrip("/")
        self.faults: dict[str, str] = {}  # endpoint ("queues"; "*/sessions"; "*" for every one) -> fault
        self.requests: list[str] = []
        self._closing = threading.Event()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):
                endpoint = self.path.split("?", 1)[0].removeprefix("/api/")
                proxy.requests.append(endpoint)
                # "*/sessions": that endpoint of every object (each AMQP 1.0 connection's sessions).
                fault = proxy.faults.get(endpoint, proxy.faults.get("*/" + endpoint.rsplit("/", 1)[-1],
                                                                    proxy.faults.get("*")))
                if fault == "hang":
                    proxy._closing.wait(120)
                    return
                if fault == "trickle":
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", "100000")
                    self.end_headers()
                    while not proxy._closing.wait(0.05):
                        try:
                            self.wfile.write(b" ")
                            self.wfile.flush()
                        except OSError:
                            return
                    return
                if fault is not None and fault.startswith("slow:"):  # "slow:SECONDS": a large or busy broker
                    proxy._closing.wait(float(fault.removeprefix("slow:")))
                    fault = None
                if fault == "500":
                    return self._reply(500, b'{"error":"internal_error"}', "application/json")
                if fault == "html":
                    return self._reply(200, b"<html><body><h1>502 Bad Gateway</h1></body></html>", "text/html")
                try:
                    upstream = requests.get(proxy.upstream + self.path, headers={"Authorization":
                                            self.headers.get("Authorization", "")}, timeout=30)
                except requests.RequestException:  # the broker is down: as a load balancer in front says it
                    return self._reply(502, b"<html><body><h1>502 Bad Gateway</h1></body></html>", "text/html")
                body = upstream.content
                # "without:TEXT": a plugin that does not know a family gives none of its lines.
                if fault is not None and fault.startswith("without:"):
                    cut = fault.removeprefix("without:").encode()
                    body = b"\n".join(line for line in body.split(b"\n") if cut not in line)
                elif fault == "malformed":
                    body = b"{'this': is not json,"
                elif fault == "truncated":
                    body = body[: len(body) // 2]
                self._reply(upstream.status_code, body, upstream.headers.get("Content-Type", "application/json"))

            def _reply(self, status: int, body: bytes, ctype: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://{host}:{self.port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._closing.set()
        time.sleep(0.1)
        self.server.shutdown()
        self.server.server_close()
