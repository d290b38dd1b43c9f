"""The applications' own messages, as their OpenTelemetry spans tell them: one record per messaging span, and what
the pairing of publishes with deliveries makes of a window of them. Plain values: the trace source builds them, the
rules, the exporter's collectors and /api/traces read them.

Times are Unix seconds on the clock of the host that made the span: two hosts' clocks may disagree (clock skew),
which is why a queue time below zero is counted apart and never averaged in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import NamedTuple

from .probes import Histogram

_EMPTY: Mapping = MappingProxyType({})

# What a span did with the message (the semantic conventions' messaging.operation.type; the older
# instrumentations' span names and kinds map onto them).
PUBLISH = "publish"
RECEIVE = "receive"
PROCESS = "process"
SETTLE = "settle"

# The three span shapes ackscope understands.
OLDER = "older"  # opentelemetry-instrumentation-pika / -aio-pika: messaging.destination, "{destination} send"
SEMCONV = "semconv"  # the semantic conventions v1.44: messaging.operation.type, messaging.destination.name
CELERY = "celery"  # opentelemetry-instrumentation-celery: apply_async/{task}, run/{task}

# Where a message that no delivery followed is, by the broker's view of the queue it went to.
WAITING = "waiting"  # the queue holds at least that many: a backlog
GONE = "gone"  # more than the queue holds: dropped, expired, dead-lettered, or lost with a consumer's connection
UNPLACED = "unplaced"  # the spans name an exchange, not a queue, or the broker's view is missing: not split

# What the trace rules need: spans received (the exporter's /v1/traces or --traces-dir); "not evaluated" without.
TRACES = "the applications' spans (OpenTelemetry, /v1/traces or --traces-dir)"

# Queue time buckets (seconds): from a millisecond on one host to the minutes of a backlog.
QUEUE_TIME_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
                      120.0, 300.0, 600.0)


class MessageSpan(NamedTuple):
    """One messaging span, normalised from whichever shape its instrumentation wrote. A named tuple, not a frozen
    dataclass, because the exporter makes 20,000 a second at the benchmark's load, and a frozen dataclass of these
    fields takes several times as long to build.

    `key` and `parents` are span ids as integers (64 random bits: unique among the messages held at once, and a
    quarter of the memory of their hex): `parents` holds the span's parent first, then its links.
    `destination` is the span's own name for where the message went (a template: no message id is ever in it).
    `exchange`, `routing_key`, `queue` are None where the span does not say them."""

    key: int
    parents: tuple[int, ...]
    role: str  # PUBLISH | RECEIVE | PROCESS | SETTLE
    shape: str  # OLDER | SEMCONV | CELERY
    service: str  # the resource's service.name
    destination: str
    start: float  # Unix seconds
    end: float
    error: bool = False  # the span's status is an error, or it carries error.type
    exchange: str | None = None
    routing_key: str | None = None
    queue: str | None = None
    outcome: str | None = None  # a settle span's ack | nack | reject
    redelivered: bool | None = None  # None: the span does not say


@dataclass(frozen=True)
class Flow:
    """What one publishing service's messages to one destination became, over the window (counts of messages).

    `queue_time` holds the messages delivered in the window, from the publish span's start to the first delivery's
    start; `skewed` those whose delivery started before their publish did (the hosts' clocks disagree), left out
    of it. `unprocessed` counts messages published with no delivery within the deadline, by WAITING | GONE |
    UNPLACED once the broker's view is joined (before that, all UNPLACED); `oldest_unprocessed_s` the age of the
    oldest of them. `consumers`: the services that took them."""

    destination: str
    service: str
    exchange: str | None = None
    queue: str | None = None
    published: int = 0
    publish_errors: int = 0
    delivered: int = 0
    queue_time: Histogram = Histogram(())
    processing: Histogram = Histogram(())
    skewed: Mapping[str, int] = field(default_factory=lambda: _EMPTY)  # consuming service -> count
    duplicates: int = 0  # deliveries beyond the first to the same consuming service
    redelivered: int = 0  # of those, the ones the spans say the broker redelivered
    settled: Mapping[str, int] = field(default_factory=lambda: _EMPTY)  # ack | nack | reject -> count
    unprocessed: Mapping[str, int] = field(default_factory=lambda: _EMPTY)  # WAITING | GONE | UNPLACED -> count
    oldest_unprocessed_s: float = 0.0
    consumers: tuple[str, ...] = ()
    # Messages that reached their deadline with no delivery, since the start: a late delivery does not take one
    # back, and one stays counted once it is forgotten (`unprocessed` is what is outstanding now).
    went_unprocessed: int = 0


@dataclass(frozen=True)
class TraceWindow:
    """The pairing's state at one moment: each flow, and what the endpoint took in and could not use.

    `spans` counts every span received by shape (and "other": spans that are not messaging spans, such as HTTP);
    `orphans` the deliveries, by consuming service, whose publish never arrived though their trace context names
    one: its publisher's span was sampled apart from theirs, or is sent elsewhere; `unrooted` deliveries with no
    trace context at all (their publisher is not instrumented, or the context was not passed on);
    `not_understood` messaging spans of no known shape, with the first one said; `dropped` spans not kept because
    the exporter held as many messages as it may; `repeated` spans received again (a Collector's retry)."""

    taken_at: float  # Unix seconds: the moment it stands for, as a Snapshot's taken_at
    flows: tuple[Flow, ...] = ()
    spans: Mapping[str, int] = field(default_factory=lambda: _EMPTY)
    not_understood: int = 0
    first_not_understood: str = ""
    orphans: Mapping[str, int] = field(default_factory=lambda: _EMPTY)
    recent_orphans: int = 0  # orphans judged while the messages held now arrived
    waiting_long: int = 0  # deliveries waiting more than half the deadline for their publish: orphans, likely
    unrooted: int = 0
    dropped: int = 0
    repeated: int = 0
    rejected_requests: int = 0  # requests that could not be decoded or were too large
    deadline_s: float = 0.0

    @property
    def messaging_spans(self) -> int:
        """Spans received of the three messaging shapes (what the trace rules judge)."""
        return sum(n for shape, n in self.spans.items() if shape in (OLDER, SEMCONV, CELERY))

    @property
    def unprocessed_known(self) -> bool:
        """Under independent sampling a publish may be kept while its delivery is sampled out, and the other way
        round: deliveries without their publish show it, and then a publish without a delivery proves nothing.
        Under parent-based sampling pairs are whole, and a publish alone is unprocessed. Deliveries that have
        waited long for their publish are orphans still being judged: until they are, nothing is known either."""
        return not self.recent_orphans and not self.waiting_long


def quantile_bounds(buckets: tuple[tuple[float, float], ...] | list[tuple[float, float]],
                    q: float) -> tuple[float, float]:
    """The histogram bucket the q-quantile of cumulative `buckets` falls in: (lower bound, upper bound), the upper
    infinite past the last finite bound. A bucket, not a guess inside it: what a histogram knows."""
    total = buckets[-1][1] if buckets else 0.0
    lower = 0.0
    for le, n in buckets:
        if n >= q * total:
            return lower, le
        lower = le
    return lower, float("inf")


def said(bounds: tuple[float, float]) -> str:
    """Quantile bounds in words: "at most 0.5 s", "between 30 and 60 s", "over 600 s"."""
    lower, upper = bounds
    if upper == float("inf"):
        return f"over {lower:g} s"
    return f"at most {upper:g} s" if lower == 0 else f"between {lower:g} and {upper:g} s"
