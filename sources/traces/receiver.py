"""The traces source: OTLP requests in (the exporter's /v1/traces, or the Collector's files), the window out.

Every span is accounted for: paired, counted as no messaging span ("other"), counted as not understood (the first
said), repeated (a retry), or dropped (the exporter held all it may) — never lost without a count. Only what the
figures need is kept from a span: ids, times, the service, the destination, the outcome. No body, no message id.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import NamedTuple

from ackscope.model.traces import TraceWindow

from .decode import JSON, BadRequest, decode, inflate, spans
from .pairing import Pairing
from .shapes import NotUnderstood, normalise

log = logging.getLogger("ackscope.traces")

# A request larger than this, packed or unpacked, is refused (413): the Collector's otlphttp exporter sends
# batches of a few MB at most, and one body must never take the exporter's memory.
MAX_REQUEST_BYTES = 16 << 20
OTHER = "other"  # spans that are no messaging span


class Answer(NamedTuple):
    """What the endpoint answers: an HTTP status, a body and its content type."""

    status: int
    body: bytes
    content_type: str


class TraceReceiver:
    """Decodes requests, normalises their spans and pairs them; `window()` is what the poll reads."""

    def __init__(self, pairing: Pairing | None = None, max_request_bytes: int = MAX_REQUEST_BYTES):
        self.pairing = pairing or Pairing()
        self.max_request_bytes = max_request_bytes
        self._lock = threading.Lock()
        self._spans: dict[str, int] = {}
        self._not_understood = 0
        self._first_not_understood = ""
        self._rejected = 0
        self._said: set[str] = set()

    def receive(self, body: bytes, content_type: str, encoding: str = "", now: float | None = None) -> Answer:
        """One POST to /v1/traces. Answers 200 with an ExportTraceServiceResponse in the request's encoding, 400
        for a body that is no OTLP trace request, 413 past the size limit, 415 for another content type."""
        try:
            request = decode(inflate(body, encoding, self.max_request_bytes), content_type)
        except OverflowError:
            return self.refuse(413, f"the request unpacks to more than {self.max_request_bytes} bytes")
        except BadRequest as e:
            return self.refuse(415 if str(e).startswith("Content-Type") else 400, str(e))
        self.take(request, now if now is not None else time.time())
        if content_type.split(";", 1)[0].strip().lower() == JSON:
            return Answer(200, b"{}", JSON)
        return Answer(200, b"", "application/x-protobuf")  # an empty ExportTraceServiceResponse

    def too_large(self) -> Answer:
        """The answer to a request whose Content-Length is over the limit, given before its body is read."""
        return self.refuse(413, f"the request is larger than {self.max_request_bytes} bytes")

    def take(self, request, now: float) -> None:
        """The spans of one decoded ExportTraceServiceRequest, paired."""
        messaging, counted = [], {}
        not_understood, first = 0, ""
        for service, span in spans(request):
            try:
                message_span = normalise(span, service)
            except NotUnderstood as e:
                not_understood += 1
                first = first or str(e)
                continue
            if message_span is None:
                counted[OTHER] = counted.get(OTHER, 0) + 1
            else:
                counted[message_span.shape] = counted.get(message_span.shape, 0) + 1
                messaging.append(message_span)
        self.pairing.take(messaging, now)
        with self._lock:
            for shape, n in counted.items():
                self._spans[shape] = self._spans.get(shape, 0) + n
            self._not_understood += not_understood
            if first and not self._first_not_understood:
                self._first_not_understood = first
                log.warning("a messaging span of no known shape, counted and not paired "
                            "(ackscope_trace_spans_not_understood_total): %s", first)

    def refuse(self, status: int, why: str) -> Answer:
        """Count a request (or a line of --traces-dir) that could not be taken, and say each reason once."""
        with self._lock:
            self._rejected += 1
            first = why not in self._said
            if first and len(self._said) < 100:  # each reason said once; a flood of new ones is still counted
                self._said.add(why)
        if first:
            log.warning("a traces request refused (%d): %s", status, why)
        return Answer(status, (why + "\n").encode(), "text/plain")

    def window(self, now: float) -> TraceWindow:
        flows, orphans, recent_orphans, waiting_long = self.pairing.window(now)
        with self._lock:
            return TraceWindow(taken_at=now, flows=flows, spans=dict(self._spans), not_understood=self._not_understood,
                               first_not_understood=self._first_not_understood, orphans=orphans,
                               recent_orphans=recent_orphans, waiting_long=waiting_long,
                               unrooted=self.pairing.unrooted, dropped=self.pairing.dropped,
                               repeated=self.pairing.repeated, rejected_requests=self._rejected,
                               deadline_s=self.pairing.deadline_s)
