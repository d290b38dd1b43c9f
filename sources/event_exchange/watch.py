"""`--event-exchange`: a queue of ackscope's own bound to `amq.rabbitmq.event`, read in the background through the
probes' user (it needs read permission on the exchange) and handed over at each poll. The queue is
ackscope.probe.events.<host>.<id>: exclusive (gone with its connection), self-expiring (x-expires) and bounded
(x-max-length: a burst beyond drops the oldest). What keeps it from being read is one line, said once while it
lasts; it is tried again, on each of the probes' nodes in turn, and the other sources go on."""

from __future__ import annotations

import logging
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pika
import pika.exceptions

from ackscope.core.amqp import Endpoint, describe_close
from ackscope.model.events import BrokerEvent
from ackscope.model.probes import CONNECTION_PREFIX, NAMESPACE

from .messages import BINDINGS, EventMessages

log = logging.getLogger("ackscope.sources")

EXCHANGE = "amq.rabbitmq.event"
QUEUE_LENGTH = 10_000  # x-max-length of ackscope's queue
QUEUE_EXPIRES_MS = 60_000  # x-expires: the queue outlives a lost connection by a minute at most
PREFETCH = 500
# Events held between two polls at most: a poll that comes late finds the newest, and counts what it lost.
MAX_BUFFERED = 20_000
RETRY_SECONDS = 10.0


@dataclass(frozen=True)
class ExchangeRead:
    """How reading the event exchange goes: its counts since the start, and why it is not read, if it is not."""

    consuming: bool
    messages: int
    dropped: int
    problem: str | None


class EventExchangeWatch:
    def __init__(self, endpoints: Sequence[Endpoint], retry_seconds: float = RETRY_SECONDS):
        self.endpoints = tuple(endpoints)
        self.retry_seconds = retry_seconds
        self.queue = f"{NAMESPACE}events.{socket.gethostname()}.{uuid.uuid4().hex[:8]}"
        self._messages = EventMessages()
        self._buffer: deque[BrokerEvent] = deque()
        self._lock = threading.Lock()
        self._received = 0
        self._dropped = 0
        self._consuming = False
        self._problem: str | None = None
        self._said: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ackscope-event-exchange", daemon=True)
        self._thread.start()

    def read(self, take: Callable[[list[BrokerEvent]], None]) -> ExchangeRead:
        """The events received since the last read, handed to `take` oldest first."""
        with self._lock:
            events, self._buffer = list(self._buffer), deque()
            status = ExchangeRead(self._consuming, self._received, self._dropped, self._problem)
        take(events)
        return status

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            for endpoint in self.endpoints:
                try:
                    self._consume(endpoint)
                except (pika.exceptions.AMQPError, OSError) as e:
                    self._trouble(endpoint, describe_close(e))
                if self._stop.is_set():
                    return
            self._stop.wait(self.retry_seconds)

    def _consume(self, endpoint: Endpoint) -> None:
        params = pika.URLParameters(endpoint.url.reveal())
        params.ssl_options = endpoint.ssl_options
        params.client_properties = {"connection_name": f"{CONNECTION_PREFIX} events"}
        params.connection_attempts, params.socket_timeout, params.blocked_connection_timeout = 1, 10, 30
        connection = pika.BlockingConnection(params)
        try:
            try:
                connection.channel().exchange_declare(EXCHANGE, passive=True)
                channel = connection.channel()
                channel.queue_declare(self.queue, exclusive=True, arguments={
                    "x-queue-type": "classic", "x-max-length": QUEUE_LENGTH, "x-expires": QUEUE_EXPIRES_MS})
                for key in BINDINGS:
                    channel.queue_bind(self.queue, EXCHANGE, key)
            except pika.exceptions.ChannelClosedByBroker as e:
                raise _refusal(e) from None
            channel.basic_qos(prefetch_count=PREFETCH)
            last: list[int] = []
            channel.basic_consume(self.queue, lambda ch, method, props, body: self._take(method, props, last))
            self._working(endpoint)
            while not self._stop.is_set():
                connection.process_data_events(time_limit=0.5)
                if last:  # what was taken in, acked at once (multiple): a small, steady window of unacked
                    channel.basic_ack(last[-1], multiple=True)
                    last.clear()
        finally:
            with self._lock:
                self._consuming = False
            try:
                connection.close()
            except (pika.exceptions.AMQPError, OSError):
                pass  # already gone: what was wrong is said by the caller

    def _take(self, method, props, last: list[int]) -> None:
        e = self._messages.event(method.routing_key, props.headers, time.time())
        last.append(method.delivery_tag)
        with self._lock:
            self._received += 1
            if e is None:
                return
            if len(self._buffer) >= MAX_BUFFERED:
                self._buffer.popleft()
                self._dropped += 1
            self._buffer.append(e)

    def _working(self, endpoint: Endpoint) -> None:
        with self._lock:
            self._consuming, self._problem = True, None
        if self._said is not None:
            log.info("event exchange: read again at %s", endpoint.display)
            self._said = None

    def _trouble(self, endpoint: Endpoint, why: str) -> None:
        problem = f"the event exchange at {endpoint.display}: {why}"
        with self._lock:
            self._problem = problem
        if why != self._said:
            log.warning("%s; tried again every %gs", problem, self.retry_seconds)
            self._said = why


def _refusal(e: pika.exceptions.ChannelClosedByBroker) -> pika.exceptions.AMQPError:
    """What a refusal to read the exchange asks of the user. Without read permission on the exchange, 3.10 and
    4.0 refuse the binding ('access to exchange ... refused'); 4.3 refuses the passive declare first, naming the
    configure permission (it wants any one of read, write or configure: release notes 4.3.0 and 4.3.1), where
    read is what to give, and refuses so too in a vhost where the exchange does not exist (4.3.6)."""
    where = "the vhost the plugin publishes in (rabbitmq_event_exchange.vhost, / by default)"
    if e.reply_code == 404 and EXCHANGE in e.reply_text:
        return _Refused(f"no exchange {EXCHANGE} in this vhost: enable the rabbitmq_event_exchange plugin, or give "
                        f"the probes {where}")
    if e.reply_code == 403 and EXCHANGE in e.reply_text:
        return _Refused(f"{describe_close(e)}: give the probes' user read permission on {EXCHANGE} (read pattern "
                        f"'^ackscope\\.probe\\.|^amq\\.rabbitmq\\.event$'), in {where}")
    return e


class _Refused(pika.exceptions.AMQPError):
    """The broker answered, and what ackscope needs is not there: the sentence says what to do."""

    def __str__(self) -> str:
        return str(self.args[0])
