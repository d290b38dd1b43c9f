"""The exporter's trace side: the applications' spans decoded, normalised and paired in a worker process
(core/worker.py), so that their handling never holds the interpreter the scrapes are served from.

`TraceSide` is what runs in the worker: the receiver, the Collector's folder (--traces-dir) and the history of
each traced message (--data-dir). `TraceEndpoint` is the exporter's /v1/traces and what each poll reads from it.
"""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass

from ackscope.core.worker import Worker, WorkerError, WorkerGone
from ackscope.exporter.history import trace_log
from ackscope.model.traces import TraceWindow
from ackscope.sources.traces import Answer, Pairing, TraceDirectory, TraceReceiver
from ackscope.sources.traces.receiver import MAX_REQUEST_BYTES

log = logging.getLogger("ackscope.traces")


@dataclass(frozen=True)
class TraceSettings:
    deadline_s: float = 60.0  # --trace-deadline
    max_messages: int = 1_000_000  # --max-trace-messages
    max_destinations: int = 50  # --max-destinations
    max_services: int = 50  # --max-services
    data_dir: str | None = None  # --data-dir: each message written once forgotten
    traces_dir: str | None = None  # --traces-dir

    def pairing(self, on_forget=None) -> Pairing:
        return Pairing(deadline_s=self.deadline_s, max_messages=self.max_messages,
                       max_destinations=self.max_destinations, max_services=self.max_services,
                       on_forget=on_forget)


class TraceSide:
    """In the worker: every span taken in, and the window each poll reads."""

    def __init__(self, settings: TraceSettings):
        self.history = trace_log(settings.data_dir) if settings.data_dir else None
        self.receiver = TraceReceiver(settings.pairing(self.history.extend if self.history else None))
        self.directory = TraceDirectory(settings.traces_dir, self.receiver) if settings.traces_dir else None
        if self.history is not None:
            self.history.start()

    def receive(self, body: bytes, content_type: str, encoding: str) -> Answer:
        return self.receiver.receive(body, content_type, encoding)

    def too_large(self) -> Answer:
        return self.receiver.too_large()

    def window(self, now: float) -> TraceWindow:
        if self.directory is not None:
            self.directory.read(now)
        return self.receiver.window(now)

    def close(self) -> None:
        if self.history is None:
            return
        pending = self.receiver.pairing.forget_all(time.time())
        if pending:
            log.info("%d traced messages still within --trace-deadline at the stop are not written to the history: "
                     "neither delivered nor yet unprocessed", pending)
        self.history.stop()


class TraceEndpoint:
    """/v1/traces (core.http_server's Receiver) and the poll's window. The worker starts with the first request
    (or the first poll, with --traces-dir): until then the window is an empty one."""

    max_request_bytes = MAX_REQUEST_BYTES

    def __init__(self, settings: TraceSettings):
        self.settings = settings
        # Niceness 5: on a busy host the scrapes and polls go before the spans, whose senders retry.
        self.worker = Worker(functools.partial(TraceSide, settings), "the traces worker", nice=5)
        self._empty = TraceReceiver(settings.pairing())
        self._said = ""
        self._last: TraceWindow | None = None

    def receive(self, body: bytes, content_type: str, encoding: str = "") -> Answer:
        try:
            return self.worker.call("receive", body, content_type, encoding)
        except (WorkerGone, WorkerError) as e:
            return self._unavailable(e)

    def too_large(self) -> Answer:
        try:
            return self.worker.call("too_large")
        except (WorkerGone, WorkerError) as e:
            return self._unavailable(e)

    def window(self, now: float) -> TraceWindow:
        """What the spans told so far; while the worker cannot answer (it ended: said once, by the worker), the
        last window it gave. Raises WorkerError when the worker's window failed."""
        if self.settings.traces_dir is None and not self.worker.started:
            return self._empty.window(now)
        try:
            self._last = self.worker.call("window", now)
        except WorkerGone:
            if self._last is None:
                return self._empty.window(now)
        return self._last

    def stop(self) -> None:
        self.worker.stop()

    def _unavailable(self, error: Exception) -> Answer:
        # 503: the SDK's and the Collector's exporters send the batch again. Said once for each reason.
        if str(error) != self._said:
            self._said = str(error)
            log.warning("a traces request not taken: %s", error)
        return Answer(503, f"{error}; send it again\n".encode(), "text/plain")
