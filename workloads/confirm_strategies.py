"""The publisher strategies RabbitMQ's confirms guide compares, side by side on
the user's broker, for classic and quorum queues with persistent messages.

Each strategy publishes for a fixed time into a queue of its own (ackscope.probe.bench-<type>, bounded and
self-expiring) and reports messages per second and the latency from publish to the broker's answer
(basic.ack, or tx.commit-ok for transactions). Fire-and-forget gets no answer at all: it is the ceiling.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pika
import pika.exceptions
from pika.adapters.select_connection import IOLoop

from ackscope.core.config import ConfigError
from ackscope.core.quantile import sample_quantile
from ackscope.model.probes import NAMESPACE

log = logging.getLogger("ackscope.bench")

QUEUE_TYPES = ("classic", "quorum")
BATCH = 100
WINDOW = 500
BODY = b"x" * 256


@dataclass(frozen=True)
class Result:
    strategy: str
    queue_type: str
    messages: int
    seconds: float
    latencies: tuple[float, ...]  # seconds from publish to the broker's answer, per message

    @property
    def rate(self) -> float:
        return self.messages / self.seconds if self.seconds else 0.0

    def percentile(self, q: float) -> float | None:
        """The q-quantile of the latencies, exact over every message."""
        return sample_quantile(self.latencies, q)


def _queue(queue_type: str) -> str:
    return f"{NAMESPACE}bench-{queue_type}"


def _arguments(queue_type: str) -> dict:
    """Bounded and self-expiring, like every queue ackscope declares."""
    return {"x-queue-type": queue_type, "x-expires": 600_000, "x-max-length": 100_000}


def _declare(channel, queue_type: str) -> None:
    channel.queue_declare(_queue(queue_type), durable=True, arguments=_arguments(queue_type))
    channel.queue_purge(_queue(queue_type))


PERSISTENT = pika.BasicProperties(delivery_mode=2)


def tx_per_message(params: pika.URLParameters, queue_type: str, seconds: float) -> Result:
    return _transactions(params, queue_type, seconds, 1, "transaction per message")


def tx_per_batch(params: pika.URLParameters, queue_type: str, seconds: float) -> Result:
    return _transactions(params, queue_type, seconds, BATCH, f"transaction per batch of {BATCH}")


def _transactions(params, queue_type, seconds, batch, name) -> Result:
    conn = pika.BlockingConnection(params)
    try:
        ch = conn.channel()
        _declare(ch, queue_type)
        ch.tx_select()
        latencies: list[float] = []
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            sent = []
            for _ in range(batch):
                sent.append(time.perf_counter())
                ch.basic_publish("", _queue(queue_type), BODY, PERSISTENT)
            ch.tx_commit()
            done = time.perf_counter()
            latencies.extend(done - t for t in sent)
        return Result(name, queue_type, len(latencies), time.perf_counter() - started, tuple(latencies))
    finally:
        conn.close()


class _AsyncPublisher:
    """Publishes on a SelectConnection, in confirm mode or not, keeping at most `window` unconfirmed and,
    with `batch`, waiting until a whole batch is confirmed before the next."""

    def __init__(self, params, queue_type: str, seconds: float, window: int, batch: int | None, confirm: bool):
        self.params, self.queue_type, self.seconds = params, queue_type, seconds
        self.window, self.batch, self.confirm = window, batch, confirm
        self.sent: dict[int, float] = {}
        self.latencies: list[float] = []
        self.published = 0
        self.next_tag = 1
        self.error: str | None = None
        self.ioloop = IOLoop()

    def run(self) -> tuple[int, float, list[float]]:
        self.conn = pika.SelectConnection(self.params, on_open_callback=self._opened,
                                          on_open_error_callback=self._failed, on_close_callback=self._closed,
                                          custom_ioloop=self.ioloop)
        self.ioloop.start()
        if self.error:
            raise ConfigError(self.error)
        return self.published, self.elapsed, self.latencies

    def _failed(self, _conn, error) -> None:
        self.error = f"cannot connect: {error}"
        self.ioloop.stop()

    def _closed(self, _conn, _reason) -> None:
        self.ioloop.stop()

    def _opened(self, conn) -> None:
        conn.channel(on_open_callback=self._channel)

    def _channel(self, ch) -> None:
        self.ch = ch
        ch.queue_declare(_queue(self.queue_type), durable=True, arguments=_arguments(self.queue_type),
                         callback=lambda _f: ch.queue_purge(_queue(self.queue_type), callback=lambda _f: self._ready()))

    def _ready(self) -> None:
        if self.confirm:
            self.ch.confirm_delivery(ack_nack_callback=self._on_confirm, callback=lambda _f: self._start())
        else:
            self._start()

    def _start(self) -> None:
        self.started = time.perf_counter()
        self._pump()

    def _pump(self) -> None:
        now = time.perf_counter()
        self.elapsed = now - self.started
        if self.elapsed >= self.seconds:
            if not self.sent:
                self.conn.close()
            return
        if not self.confirm:
            for _ in range(BATCH):
                self.ch.basic_publish("", _queue(self.queue_type), BODY, PERSISTENT)
            self.published += BATCH
            self.ioloop.add_callback_threadsafe(self._pump)
            return
        if self.batch is not None:
            if self.sent:
                return  # wait: the whole batch must be confirmed first
            count = self.batch
        else:
            count = self.window - len(self.sent)
        for _ in range(count):
            self.sent[self.next_tag] = time.perf_counter()
            self.next_tag += 1
            self.ch.basic_publish("", _queue(self.queue_type), BODY, PERSISTENT)
            self.published += 1

    def _on_confirm(self, frame) -> None:
        now = time.perf_counter()
        tag, multiple = frame.method.delivery_tag, frame.method.multiple
        for t in ([k for k in self.sent if k <= tag] if multiple else [tag]):
            sent = self.sent.pop(t, None)
            if sent is not None:
                self.latencies.append(now - sent)
        if self.window == 1 or not self.sent or self.batch is None:
            self._pump()
        if now - self.started >= self.seconds and not self.sent:
            self.elapsed = now - self.started
            self.conn.close()


def _async(name: str, window: int, batch: int | None, confirm: bool):
    def strategy(params, queue_type: str, seconds: float) -> Result:
        published, elapsed, latencies = _AsyncPublisher(params, queue_type, seconds, window, batch, confirm).run()
        return Result(name, queue_type, published, elapsed, tuple(latencies))
    return strategy


STRATEGIES: tuple[tuple[str, Callable[..., Result]], ...] = (
    ("transaction per message", tx_per_message),
    (f"transaction per batch of {BATCH}", tx_per_batch),
    ("confirm and wait, per message", _async("confirm and wait, per message", 1, None, True)),
    (f"publish {BATCH}, then wait for their confirms", _async(f"publish {BATCH}, then wait for their confirms",
                                                              BATCH, BATCH, True)),
    (f"streaming confirms, window {WINDOW}", _async(f"streaming confirms, window {WINDOW}", WINDOW, None, True)),
    ("fire and forget (no confirms: the ceiling)", _async("fire and forget (no confirms: the ceiling)", 0, None,
                                                          False)),
)


def run_all(params: pika.URLParameters, seconds: float, progress: Callable[[str], None] = lambda _s: None
            ) -> list[Result]:
    results = []
    for queue_type in QUEUE_TYPES:
        for name, strategy in STRATEGIES:
            progress(f"{queue_type}: {name}")
            results.append(strategy(params, queue_type, seconds))
    return results


def table_rows(results: list[Result]) -> list[tuple[str, ...]]:
    """Rows for the README and the terminal: strategy, queue type, msg/s, p50 and p99 latency in ms, and
    the slowdown against streaming confirms on the same queue type."""
    streaming = {r.queue_type: r.rate for r in results if r.strategy.startswith("streaming")}
    rows = []
    for r in results:
        p50, p99 = r.percentile(0.5), r.percentile(0.99)
        vs = streaming.get(r.queue_type, 0) / r.rate if r.rate else float("inf")
        rows.append((r.strategy, r.queue_type, f"{r.rate:,.0f}", "-" if p50 is None else f"{p50 * 1000:.2f}",
                     "-" if p99 is None else f"{p99 * 1000:.2f}", f"{vs:.1f}x"))
    return rows


def write_chart(results: list[Result], path: Path) -> None:
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=("messages per second (log)", "latency to the broker's "
                                                         "answer, p50 and p99 (ms, log)"))
    for queue_type in QUEUE_TYPES:
        rs = [r for r in results if r.queue_type == queue_type]
        fig.add_bar(x=[r.strategy for r in rs], y=[r.rate for r in rs], name=f"{queue_type} msg/s", row=1, col=1)
        fig.add_bar(x=[r.strategy for r in rs], y=[(r.percentile(0.5) or 0) * 1000 for r in rs],
                    name=f"{queue_type} p50", row=1, col=2)
        fig.add_bar(x=[r.strategy for r in rs], y=[(r.percentile(0.99) or 0) * 1000 for r in rs],
                    name=f"{queue_type} p99", row=1, col=2)
    fig.update_yaxes(type="log")
    fig.update_layout(title="Publisher strategies with persistent messages (ackscope bench confirms)",
                      barmode="group", height=600)
    fig.write_html(path, include_plotlyjs=True)
