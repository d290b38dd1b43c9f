"""Which messaging span an OTLP span is, in the shape its instrumentation wrote, normalised to one record.

Three shapes are understood (ackscope.model.traces): the older attributes of opentelemetry-instrumentation-pika
and -aio-pika, the semantic conventions v1.44, and opentelemetry-instrumentation-celery's task spans. A span of
no messaging attribute at all is someone else's (an HTTP request) and is only counted; a RabbitMQ messaging span
of none of the three shapes is not understood: counted, the first one said, and never guessed at.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from ackscope.model.traces import CELERY, OLDER, PROCESS, PUBLISH, RECEIVE, SEMCONV, SETTLE, MessageSpan

# OTLP's SpanKind numbers.
_PRODUCER, _CONSUMER = 4, 5
_STATUS_ERROR = 2

# messaging.operation.type, v1.44 and the values earlier conventions used.
_OPERATIONS = {"send": PUBLISH, "publish": PUBLISH, "create": PUBLISH, "receive": RECEIVE, "process": PROCESS,
               "deliver": PROCESS, "settle": SETTLE}
_SETTLE_OUTCOMES = {"ack": "ack", "nack": "nack", "reject": "reject"}
_DEFAULT_EXCHANGE = "amq.default"
_REDELIVERED = re.compile(r"['\"]redelivered['\"]:\s*(True|False|true|false)")
_EXCHANGE_IN = re.compile(r"['\"]exchange['\"]:\s*['\"]([^'\"]*)['\"]")


class NotUnderstood(ValueError):
    """A RabbitMQ messaging span of no known shape; the message says what it lacked."""


_SCALARS = frozenset(("string_value", "int_value", "bool_value", "double_value"))
# The only attributes a shape reads: strings all, by the conventions and the instrumentations.
_READ = frozenset(("messaging.system", "messaging.destination", "messaging.destination.name", "messaging.operation",
                   "messaging.operation.type", "messaging.operation.name",
                   "messaging.rabbitmq.destination.routing_key", "celery.action", "celery.task_name",
                   "celery.delivery_info", "error.type", "service.name"))


def attributes(key_values) -> dict:
    """OTLP KeyValues whose keys a shape reads, as a plain dict of their scalar values; another messaging.*
    attribute as present (None). Other values are never read (net.peer.name, http.*, a message's own): at 20,000
    spans a second, reading each value cost more than decoding the request."""
    out = {}
    for kv in key_values:
        key = kv.key
        if key in _READ:
            value = kv.value
            text = value.string_value
            if not text:  # not a string after all, or an empty one
                which = value.WhichOneof("value")
                text = getattr(value, which) if which in _SCALARS else None
            out[key] = text
        elif key.startswith("messaging."):
            out[key] = None
    return out


def span_key(span_id: bytes) -> int:
    return int.from_bytes(span_id, "big")


def normalise(span, service: str) -> MessageSpan | None:
    """The messaging span `span` (an OTLP Span message) is, from the service `service`; None for a span that is
    no messaging span (left to whoever else reads the traces).

    Raises NotUnderstood for a RabbitMQ messaging span of none of the three shapes."""
    attrs = attributes(span.attributes)
    name = span.name
    if "celery.action" in attrs or "celery.task_name" in attrs:  # the name alone ("run/...") could be anyone's
        return _celery(span, attrs, service)
    system = attrs.get("messaging.system")
    if system is None and not any(k.startswith("messaging.") for k in attrs):
        return None
    if system is not None and system != "rabbitmq":
        return None  # another broker's spans: not ours to judge
    if "messaging.operation.type" in attrs or "messaging.destination.name" in attrs:
        return _semconv(span, attrs, service)
    if "messaging.destination" in attrs:
        return _older(span, attrs, service)
    raise NotUnderstood(f"span {name!r} from {service}: messaging attributes without a destination")


def _common(span, attrs: Mapping, service: str, role: str, shape: str, destination: str, **named) -> MessageSpan:
    key = span_key(span.span_id)
    if not key or not span.start_time_unix_nano:  # OTLP requires both: such a span cannot be paired or timed
        raise NotUnderstood(f"span {span.name!r} from {service}: no span id or no start time")
    parent = span.parent_span_id
    parents = (span_key(parent),) if parent else ()
    links = span.links
    if links:
        parents += tuple(span_key(link.span_id) for link in links)
    if 0 in parents:  # an all-zero id is OTLP's "none"
        parents = tuple(p for p in parents if p)
    return MessageSpan(key, parents, role, shape, service, destination,
                       span.start_time_unix_nano / 1e9, span.end_time_unix_nano / 1e9,
                       "error.type" in attrs or span.status.code == _STATUS_ERROR, **named)


def _older(span, attrs: Mapping, service: str) -> MessageSpan:
    """pika and aio-pika (0.66b): "{destination} send" (PRODUCER) and "{destination} receive" (CONSUMER, around
    the application's callback: its length is the processing). aio-pika names a publish "{exchange},{routing key}";
    pika names either "exchange or routing key", and a consumer span of both says the same, so neither names a
    queue unless the default exchange is plainly in use (aio-pika's ",key")."""
    destination = str(attrs["messaging.destination"])
    operation = attrs.get("messaging.operation")
    if operation == "receive" or (operation is None and span.kind == _CONSUMER):
        return _common(span, attrs, service, RECEIVE, OLDER, destination)
    if operation is not None or not (span.kind == _PRODUCER or span.name.endswith(" send")):
        raise NotUnderstood(f"span {span.name!r} from {service}: messaging.operation {operation!r} is not receive, "
                            "and it is no send")
    exchange = routing_key = queue = None
    if "," in destination:  # aio-pika: "{exchange},{routing key}"
        exchange, routing_key = destination.split(",", 1)
        queue = routing_key if exchange == "" else None
    return _common(span, attrs, service, PUBLISH, OLDER, destination, exchange=exchange, routing_key=routing_key,
                   queue=queue)


def _semconv(span, attrs: Mapping, service: str) -> MessageSpan:
    """v1.44: messaging.operation.type; messaging.destination.name "{exchange}:{routing key}" on a publish and
    "{exchange}:{routing key}:{queue}" on a consumer's span, each part left out where empty; earlier conventions
    named the exchange alone. The queue is taken only where the name spells it out: three parts on a consumer's
    span, or a publish to the default exchange (which routes by queue name)."""
    operation = attrs.get("messaging.operation.type", attrs.get("messaging.operation"))
    role = _OPERATIONS.get(str(operation)) if operation is not None else None
    if role is None:
        if span.kind == _PRODUCER:
            role = PUBLISH
        elif span.kind == _CONSUMER:
            role = PROCESS
        else:
            raise NotUnderstood(f"span {span.name!r} from {service}: messaging.operation.type {operation!r} is "
                                "none of send, receive, process, settle")
    destination = str(attrs.get("messaging.destination.name", ""))
    routing_key = attrs.get("messaging.rabbitmq.destination.routing_key")
    routing_key = str(routing_key) if routing_key is not None else None
    exchange = queue = None
    parts = destination.split(":")
    if role == PUBLISH:
        current = "messaging.operation.type" in attrs  # v1.26 on: the name leaves an empty exchange out
        if destination == _DEFAULT_EXCHANGE or (current and routing_key is not None and destination == routing_key):
            exchange = ""
        elif routing_key is not None and destination.endswith(":" + routing_key):
            exchange = destination[:-len(routing_key) - 1]
        elif ":" not in destination:
            exchange = destination  # the conventions before v1.26: the exchange alone
        if exchange == "" and routing_key:
            queue = routing_key
    elif len(parts) == 3:
        exchange, routing_key, queue = parts
    outcome = None
    if role == SETTLE:
        outcome = _SETTLE_OUTCOMES.get(str(attrs.get("messaging.operation.name", "")).lower())
    return _common(span, attrs, service, role, SEMCONV, destination or "(unnamed)", exchange=exchange,
                   routing_key=routing_key, queue=queue, outcome=outcome)


def _celery(span, attrs: Mapping, service: str) -> MessageSpan:
    """Celery: "apply_async/{task}" (PRODUCER, the task's id as messaging.message_id, the routing key as
    messaging.destination) and "run/{task}" (CONSUMER, the task's run: its length is the processing; its
    celery.delivery_info says whether the broker redelivered it)."""
    action = attrs.get("celery.action") or span.name.split("/", 1)[0]
    destination = str(attrs.get("messaging.destination") or attrs.get("celery.task_name")
                      or span.name.split("/", 1)[-1])
    info = str(attrs.get("celery.delivery_info", ""))
    found = _REDELIVERED.search(info)
    redelivered = found.group(1).lower() == "true" if found else None
    exchange = _EXCHANGE_IN.search(info)
    if action == "apply_async":
        return _common(span, attrs, service, PUBLISH, CELERY, destination)
    if action == "run":
        return _common(span, attrs, service, PROCESS, CELERY, destination, redelivered=redelivered,
                       exchange=exchange.group(1) if exchange else None)
    raise NotUnderstood(f"span {span.name!r} from {service}: celery.action {action!r} is neither apply_async "
                        "nor run")
