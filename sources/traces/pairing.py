"""Each publish paired with what became of it, from the spans as they arrive, in any order.

A message is its publish span. A consumer's span points to it through its parent or a link; a span whose parent is
another consumer span of the same delivery (a v1.44 process span under its receive span, a settle span under its
process span) belongs to that delivery. pika's instrumentation nests two send spans per publish and the consumer's
parent is the inner one: a publish span whose parent is a publish span is the same message, counted once.

Counts are cumulative from the start, like Prometheus counters; `unprocessed` is what is outstanding now. Memory is
bounded: a message is kept until its deadline and a while after (to catch a redelivery or a Collector's retried
batch), and no more than `max_messages` at once; beyond that, spans are dropped and counted.
"""

from __future__ import annotations

import bisect
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from ackscope.model.probes import Histogram
from ackscope.model.traces import (OLDER, PROCESS, PUBLISH, QUEUE_TIME_BUCKETS, RECEIVE, SETTLE, UNPLACED, Flow,
                                   MessageSpan)

OTHER_DESTINATIONS = "(other)"  # where destinations beyond --max-destinations are counted
OTHER_SERVICES = "(other)"  # ... and services beyond --max-services
MAX_NAME = 200  # characters of a destination or service name kept: a span may carry megabytes in one
MAX_CONSUMERS = 10_000  # (service, queue, role) shared among the messages they took; past that, one per message
_MIXED = object()  # a flow's exchange or queue where its publishes named several: none is the flow's


class _Counts:
    """A histogram being filled: per-bucket counts (not cumulative) and the sum."""

    __slots__ = ("counts", "sum")

    def __init__(self):
        self.counts = [0] * (len(QUEUE_TIME_BUCKETS) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(QUEUE_TIME_BUCKETS, value)] += 1
        self.sum += value

    def frozen(self) -> Histogram:
        total, buckets = 0, []
        for bound, count in zip((*QUEUE_TIME_BUCKETS, float("inf")), self.counts):
            total += count
            buckets.append((bound, float(total)))
        return Histogram(tuple(buckets), self.sum)


class _Flow:
    """One publishing service's messages to one destination, being counted."""

    __slots__ = ("destination", "service", "exchange", "queue", "published", "publish_errors", "delivered",
                 "queue_time", "processing", "skewed", "duplicates", "redelivered", "settled", "unprocessed",
                 "consumers", "went_unprocessed")

    def __init__(self, destination: str, service: str):
        self.destination, self.service = destination, service
        self.exchange: str | None = None
        # As the publishes name it. A consumer span's queue is not taken: it says where the delivered messages came
        # from, not where the undelivered went (a headers exchange may route half to a queue nobody traces).
        self.queue: str | None = None
        self.published = self.publish_errors = self.delivered = self.duplicates = self.redelivered = 0
        self.went_unprocessed = 0
        self.queue_time, self.processing = _Counts(), _Counts()
        self.skewed: dict[str, int] = {}
        self.settled: dict[str, int] = {}
        self.unprocessed: dict[int, float] = {}  # message key -> publish start, for messages past their deadline
        self.consumers: set[str] = set()

    def named(self, exchange: str | None, queue: str | None) -> None:
        """What one publish named: a flow whose publishes name different queues (one destination, several
        routing keys) has no queue of its own, and is never placed beside one of them."""
        first = self.published == 0
        self.exchange = _agreed(self.exchange, exchange, first)
        self.queue = _agreed(self.queue, queue, first)

    def the_queue(self) -> str | None:
        """The one queue the publishes name, where they all name the same."""
        return None if self.queue is _MIXED else self.queue

    def frozen(self, now: float) -> Flow:
        oldest = min(self.unprocessed.values(), default=None)
        return Flow(destination=self.destination, service=self.service,
                    exchange=None if self.exchange is _MIXED else self.exchange, queue=self.the_queue(),
                    published=self.published, publish_errors=self.publish_errors, delivered=self.delivered,
                    queue_time=self.queue_time.frozen(), processing=self.processing.frozen(),
                    skewed=dict(self.skewed), duplicates=self.duplicates, redelivered=self.redelivered,
                    settled=dict(self.settled),
                    unprocessed={UNPLACED: len(self.unprocessed)} if self.unprocessed else {},
                    oldest_unprocessed_s=now - oldest if oldest is not None else 0.0,
                    consumers=tuple(sorted(self.consumers)), went_unprocessed=self.went_unprocessed)


class _Message:
    __slots__ = ("flow", "start", "deliveries", "first", "processing", "duplicates", "redelivered", "error")

    def __init__(self, flow: _Flow, start: float, error: bool):
        self.flow, self.start, self.error = flow, start, error
        # None: not delivered; the first delivery's span's (service, queue, role) after one; then a count of the
        # spans of each (service, queue, role).
        self.deliveries: tuple | dict[tuple, int] | None = None
        self.first: float | None = None  # the first delivery's start
        self.processing: float | None = None  # the first delivery's processing, seconds
        self.duplicates = self.redelivered = 0

    def taken(self) -> int:
        """How many deliveries the spans so far make: by consumer (service and queue), the more of its receive
        and its process spans (a v1.44 consumer may write both for one delivery)."""
        d = self.deliveries
        if d is None or isinstance(d, tuple):
            return 0 if d is None else 1
        by_consumer: dict[tuple, int] = {}
        for (service, queue, _), n in d.items():
            by_consumer[(service, queue)] = max(by_consumer.get((service, queue), 0), n)
        return sum(by_consumer.values())

    def row(self) -> dict:
        """The message as ackscope.model.schemas.TRACE_MESSAGES has it, once it is forgotten."""
        d = self.deliveries
        first = d[0] if isinstance(d, tuple) else next(iter(d))[0] if d else None
        f = self.flow
        return {"published_at": int(self.start * 1e6), "destination": f.destination, "service": f.service,
                "exchange": None if f.exchange is _MIXED else f.exchange,
                "queue": f.the_queue(), "consumer": first,
                "delivered_at": int(self.first * 1e6) if self.first is not None else None,
                "processing_s": self.processing,
                "deliveries": self.taken(),
                "duplicates": self.duplicates, "redelivered": self.redelivered, "publish_error": self.error}


class _Arrivals:
    """Keys by the second they arrived in, oldest first: a list per second, not a timestamp per key."""

    def __init__(self):
        self._seconds: deque[tuple[float, list]] = deque()

    def add(self, now: float, item) -> None:
        if not self._seconds or now >= self._seconds[-1][0] + 1.0:
            self._seconds.append((now, []))
        self._seconds[-1][1].append(item)

    def before(self, limit: float):
        """Each item that arrived before `limit`, left in place."""
        for second, items in self._seconds:
            if second + 1.0 > limit:
                return
            yield from items

    def older_than(self, limit: float):
        """Take out, and yield, each item that arrived before `limit`, with the second it arrived in."""
        while self._seconds and self._seconds[0][0] + 1.0 <= limit:
            second, items = self._seconds.popleft()
            for item in items:
                yield second, item


@dataclass(frozen=True)
class Taken:
    """What one request's spans did: kept, already kept (a retry), or dropped because the exporter was full."""

    kept: int = 0
    repeated: int = 0
    dropped: int = 0


class Pairing:
    """Spans in (`take`, from the HTTP handlers' threads), the flows out (`window`, at each poll).

    `deadline_s`: a message with no delivery this long after it arrived is unprocessed. `keep_s`: how long past
    the deadline a message is remembered, for a redelivery, a late delivery or a Collector's retried batch.
    `max_messages`: messages (and deliveries waiting for their publish) held at once; `max_destinations`:
    destinations with flows of their own; `on_forget`: called, under the lock, with each forgotten message's row.
    """

    def __init__(self, deadline_s: float = 60.0, keep_s: float = 60.0, max_messages: int = 1_000_000,
                 max_destinations: int = 50, max_services: int = 50,
                 on_forget: Callable[[list[dict]], None] | None = None):
        self.deadline_s, self.keep_s = deadline_s, keep_s
        # Given each message as it is forgotten (its row of ackscope.model.schemas.TRACE_MESSAGES): the history
        # under --data-dir.
        self.on_forget = on_forget
        self.max_messages, self.max_destinations, self.max_services = max_messages, max_destinations, max_services
        self._lock = threading.Lock()
        self._flows: dict[tuple[str, str], _Flow] = {}
        self._destinations: set[str] = set()
        self._services: set[str] = set()
        self._consumers: dict[tuple, tuple] = {}  # (service, queue, role) of deliveries, each held once
        self._messages: dict[int, _Message] = {}
        self._alias: dict[int, int] = {}  # an inner publish span (pika's second send) -> its message
        self._delivery_of: dict[int, int | None] = {}  # a consumer span -> its message (None: unrooted)
        self._inner_of: dict[int, int] = {}  # a publish span's parent -> that publish, to find pika's inner send
        # Consumer spans waiting for their publish: by span, and their keys under each of their parent and links.
        self._waiting: dict[int, MessageSpan] = {}
        self._early: dict[int, list[int]] = {}
        self._due, self._kept = _Arrivals(), _Arrivals()  # messages before, and after, their deadline
        self._early_arrived, self._deliveries, self._linked = _Arrivals(), _Arrivals(), _Arrivals()
        self._orphans: dict[str, int] = {}
        self._recent_orphans = _Arrivals()  # when each orphan was judged, for the window's unprocessed_known
        self._recent = 0
        self.dropped = self.repeated = self.unrooted = 0

    # -- in ------------------------------------------------------------------------------------------
    def take(self, spans: list[MessageSpan], now: float) -> Taken:
        """Pair `spans` (one request's, in any order: publishes go first, so that a consumer span in the same
        request finds its message). `now`: the arrival time, on this host's clock."""
        counts = {"kept": 0, "repeated": 0, "dropped": 0}
        with self._lock:
            # What fell due since the last request, a second's worth at a time: forgetting a poll interval's
            # messages at once (100,000 at 10,000 a second) held the lock, and the scrapes, for a tenth of a second.
            self._expire(now)
            for span in sorted(spans, key=lambda s: s.role != PUBLISH):
                service = self._service(span.service)
                if service is not span.service:
                    span = span._replace(service=service)
                counts[self._publish(span, now) if span.role == PUBLISH else self._consumer(span, now)] += 1
            self.repeated += counts["repeated"]
            self.dropped += counts["dropped"]
        return Taken(**counts)

    def _service(self, service: str) -> str:
        """The service's name as its series carry it: at most MAX_NAME characters, and (other) past
        --max-services, so that no span can make series without bound."""
        if service in self._services:
            return service
        service = _bounded(service)
        if service in self._services:
            return service
        if len(self._services) >= self.max_services:
            return OTHER_SERVICES
        self._services.add(service)
        return service

    def _flow(self, destination: str, service: str) -> _Flow:
        if destination not in self._destinations:
            destination = _bounded(destination)
            if destination not in self._destinations:
                if len(self._destinations) >= self.max_destinations:
                    destination = OTHER_DESTINATIONS
                else:
                    self._destinations.add(destination)
        flow = self._flows.get((destination, service))
        if flow is None:
            flow = self._flows[(destination, service)] = _Flow(destination, service)
        return flow

    def _publish(self, span: MessageSpan, now: float) -> str:
        key = span.key
        if key in self._messages or key in self._alias:
            return "repeated"
        parent = span.parents[0] if span.parents else None
        if parent is not None:
            outer = self._alias.get(parent, parent)
            if outer in self._messages:
                # pika's inner send, under the outer one: the same message, already counted.
                return self._link(key, outer, span, now)
        inner = self._inner_of.pop(key, None)
        if inner is not None and inner in self._messages:
            # The inner send arrived first: this outer one is the same message, which keeps the inner's record.
            return self._link(key, inner, span, now)
        if len(self._messages) >= self.max_messages:
            return "dropped"
        flow = self._flow(span.destination, span.service)
        flow.named(span.exchange, span.queue)
        flow.published += 1
        flow.publish_errors += span.error
        self._messages[key] = _Message(flow, span.start, span.error)
        self._due.add(now, key)
        if parent is not None:
            self._inner_of[parent] = key
            self._linked.add(now, parent)
        self._attach_early(key, now)
        return "kept"

    def _link(self, key: int, message_key: int, span: MessageSpan, now: float) -> str:
        """One more publish span of a message (pika's two nested sends): an error on either is the message's."""
        if len(self._alias) >= self.max_messages:
            return "dropped"
        self._alias[key] = message_key
        self._linked.add(now, key)
        message = self._messages[message_key]
        if span.error and not message.error:
            message.error = True
            message.flow.publish_errors += 1
        self._attach_early(key, now)
        return "kept"

    def _attach_early(self, key: int, now: float) -> None:
        for span_key in self._early.pop(key, ()):
            span = self._waiting.pop(span_key, None)
            if span is not None:  # not yet paired through another of its parents
                self._consumer(span, now, early=False)

    def _consumer(self, span: MessageSpan, now: float, early: bool = True) -> str:
        if span.key in self._delivery_of or span.key in self._waiting:
            return "repeated"
        for parent in span.parents:
            key = self._alias.get(parent, parent)
            message = self._messages.get(key)
            if message is not None:
                return self._deliver(message, key, span, now)
            under = self._delivery_of.get(parent)
            if under is not None and under in self._messages:
                return self._under(self._messages[under], under, span, now)
        if not span.parents:
            # Its publisher sent no trace context: nothing to pair it with. Remembered, so that a retried batch
            # counts it once.
            self.unrooted += 1
            self._delivery_of[span.key] = None
            self._deliveries.add(now, span.key)
            return "kept"
        if not early:
            return "kept"
        # Its publish has not come (yet): it waits under its parent and each link, whichever is the publish.
        if len(self._waiting) >= self.max_messages:
            return "dropped"
        self._waiting[span.key] = span
        for parent in span.parents:
            waiting = self._early.get(parent)
            if waiting is None:
                waiting = self._early[parent] = []
                self._early_arrived.add(now, parent)
            waiting.append(span.key)
        return "kept"

    def _taken(self, span: MessageSpan, key: int, now: float) -> None:
        self._delivery_of[span.key] = key
        self._deliveries.add(now, span.key)
        self._attach_early(span.key, now)  # a process or settle span that came before this one

    def _deliver(self, message: _Message, key: int, span: MessageSpan, now: float) -> str:
        self._taken(span, key, now)
        flow = message.flow
        if span.role == SETTLE:
            _count(flow.settled, span.outcome or "unsaid")
            return "kept"
        # A delivery is one consumer's (service and queue); a v1.44 consumer's receive and process spans of it
        # are one delivery, not two.
        this = (span.service, span.queue, span.role)
        if len(self._consumers) < MAX_CONSUMERS:  # one tuple for all a consumer's messages, not one each
            this = self._consumers.setdefault(this, this)
        if message.deliveries is None:
            message.deliveries, message.first = this, span.start
            waited = span.start - message.start
            if waited < 0:
                _count(flow.skewed, span.service)
            else:
                flow.queue_time.observe(waited)
            flow.delivered += 1
            flow.unprocessed.pop(key, None)  # delivered after its deadline: late, and no longer outstanding
        else:
            before = message.taken()
            if isinstance(message.deliveries, tuple):
                message.deliveries = {message.deliveries: 1}
            seen = message.deliveries.get(this, 0)
            message.deliveries[this] = seen + 1
            if seen and message.taken() > before:
                # A second delivery to a consumer that had one: the broker's flag says whether it was a redelivery.
                flow.duplicates += 1
                message.duplicates += 1
                again = span.redelivered is True
                flow.redelivered += again
                message.redelivered += again
        flow.consumers.add(span.service)
        if span.role == PROCESS or (span.role == RECEIVE and span.shape == OLDER):
            self._processed(message, span)
        return "kept"

    @staticmethod
    def _processed(message: _Message, span: MessageSpan) -> None:
        took = max(0.0, span.end - span.start)
        message.flow.processing.observe(took)
        if message.processing is None:
            message.processing = took

    def _under(self, message: _Message, key: int, span: MessageSpan, now: float) -> str:
        """A span under a delivery's span: its processing, or how it was settled."""
        self._taken(span, key, now)
        if span.role == SETTLE:
            _count(message.flow.settled, span.outcome or "unsaid")
        elif span.role == PROCESS:
            self._processed(message, span)
        return "kept"

    # -- out -----------------------------------------------------------------------------------------
    def window(self, now: float) -> tuple[tuple[Flow, ...], dict[str, int], int, int]:
        """Every flow as it stands at `now`, after the messages past their deadline are judged and those past
        keeping forgotten; the deliveries, by consuming service, whose publish never came; how many of those
        were judged while the messages now held arrived; and how many deliveries have waited for their publish
        for more than half the deadline (orphans still being judged: a message judged now may be the publish
        whose delivery was sampled out while theirs was kept)."""
        with self._lock:
            self._expire(now)
            for _ in self._recent_orphans.older_than(now - self.keep_s - self.deadline_s):
                self._recent -= 1
            waiting_long = {key for parent in self._early_arrived.before(now - self.deadline_s / 2)
                            for key in self._early.get(parent, ()) if key in self._waiting}
            return (tuple(flow.frozen(now) for flow in self._flows.values()), dict(self._orphans), self._recent,
                    len(waiting_long))

    def forget_all(self, now: float) -> int:
        """At a stop: every message past its deadline given to `on_forget` now; returns how many were within it
        (neither delivered nor yet unprocessed: not judged, not written)."""
        with self._lock:
            self._expire(now)
            rows = [self._messages[key].row() for _, key in self._kept.older_than(float("inf"))
                    if key in self._messages]
            if rows and self.on_forget is not None:
                self.on_forget(rows)
            pending = sum(1 for _, key in self._due.older_than(float("inf")) if key in self._messages)
            self._messages.clear()
            return pending

    def _expire(self, now: float) -> None:
        for second, key in self._due.older_than(now - self.deadline_s):
            message = self._messages.get(key)
            if message is not None:
                if message.deliveries is None and not message.error:
                    # A publish that failed (its span says so) is a publish error: the broker may never have
                    # taken it. The age runs from its publish, or from its arrival here where the publisher's
                    # clock is ahead of this host's.
                    message.flow.unprocessed[key] = min(message.start, second)
                    message.flow.went_unprocessed += 1
                self._kept.add(second + self.deadline_s, key)
        forgotten = []
        for _, key in self._kept.older_than(now - self.keep_s):
            message = self._messages.pop(key, None)
            if message is not None:
                message.flow.unprocessed.pop(key, None)
                if self.on_forget is not None:
                    forgotten.append(message.row())
        if forgotten:
            self.on_forget(forgotten)
        for _, span_key in self._deliveries.older_than(now - self.deadline_s - self.keep_s):
            self._delivery_of.pop(span_key, None)
        for _, key in self._linked.older_than(now - self.deadline_s - self.keep_s):
            self._alias.pop(key, None)
            self._inner_of.pop(key, None)
        for _, parent in self._early_arrived.older_than(now - self.deadline_s):
            for span_key in self._early.pop(parent, ()):
                span = self._waiting.pop(span_key, None)
                if span is not None:  # not paired through another of its parents, nor judged under one
                    # Its publish never came: sampled apart from it, or its publisher sends us no spans.
                    _count(self._orphans, span.service)
                    self._recent_orphans.add(now, None)
                    self._recent += 1


def _count(counts: dict[str, int], key: str) -> None:
    counts[key] = counts.get(key, 0) + 1


def _bounded(name: str) -> str:
    return name if len(name) <= MAX_NAME else name[:MAX_NAME - 1] + "…"


def _agreed(current, named, first: bool):
    """A flow's exchange or queue after one more publish named `named`."""
    if first:
        return named
    return current if current is _MIXED or current == named else _MIXED
