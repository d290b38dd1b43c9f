"""What happened between polls, beside the snapshots: the broker closing a channel or a connection, timing out a
consumer, a client connecting and leaving. Deliveries break at such events: the unacked messages of a closed
channel go back to their queue and are delivered again.

An event is what one source said, as the broker said it: `source` names it (the node's log, the event
exchange), and a field the source did not give is None.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import NamedTuple

# kind: what happened.
CHANNEL_ERROR = "channel_error"  # the broker closed a channel on an error (reason: the AMQP error, e.g. precondition_failed)
CONNECTION_ERROR = "connection_error"  # the broker closed a connection on an error (a frame error, ...)
CONSUMER_TIMEOUT = "consumer_timeout"  # a consumer held a delivery past the timeout in force
CONNECTION_OPENED = "connection_opened"  # a client connected and was granted its vhost
CONNECTION_CLOSED = "connection_closed"  # a connection ended: closed by its client, or lost (reason says which)
CHANNEL_OPENED = "channel_opened"  # the event exchange's channel.created
CHANNEL_CLOSED = "channel_closed"  # the event exchange's channel.closed: by its client or the broker, it does not say
# The broker dropped a message it had taken (reason: why, e.g. DEAD_LETTER_CYCLE; queue: the queue it was dropped
# from, where the log says; text: what the log says of it)
MESSAGE_DROPPED = "message_dropped"
DEPRECATED_FEATURE = "deprecated_feature"  # the node logged the use of a deprecated feature (reason: its name)
# A quorum queue dead-lettering at-least-once cannot forward its dead-lettered messages, and keeps them (queue,
# vhost; reason: DEAD_LETTER_EXCHANGE_MISSING, or "stuck" where the broker's words are another's)
DEAD_LETTERING_STUCK = "dead_lettering_stuck"
KINDS = (CHANNEL_ERROR, CONNECTION_ERROR, CONSUMER_TIMEOUT, CONNECTION_OPENED, CONNECTION_CLOSED, CHANNEL_OPENED,
         CHANNEL_CLOSED, MESSAGE_DROPPED, DEPRECATED_FEATURE, DEAD_LETTERING_STUCK)
# A message dead-lettered back into a queue it had died in before, with no 'rejected' on its way: the broker drops it.
DEAD_LETTER_CYCLE = "dead_letter_cycle"
DEAD_LETTER_EXCHANGE_MISSING = "dead_letter_exchange_missing"

# What a rule needs that only an event source gives (a NotEvaluated names it): without it, why a channel or a
# connection was closed is not known.
EVENTS = "the broker's log (--broker-log): why the broker closed channels and connections"

# source: who said it.
BROKER_LOG = "broker log"
EVENT_EXCHANGE = "event exchange"


class BrokerEvent(NamedTuple):
    """Immutable, as every record of the model; a named tuple, not a frozen dataclass, because a burst of errors
    makes thousands a second, and a frozen dataclass took 6 µs to build where a named tuple takes 1.7."""

    at: float  # seconds since the epoch, from the source's own timestamp
    kind: str
    source: str
    # The broker's name for the connection ("127.0.0.1:50412 -> 127.0.0.1:5672"), as /api/connections has it.
    connection: str | None = None
    # The connection's Erlang process ("<0.1234.0>"): the log names the connection by it where it gives no name.
    pid: str | None = None
    connection_name: str | None = None  # the name the client gave its connection, where said
    client: str | None = None  # its client library and version, where a poll saw the connection (attributed)
    vhost: str | None = None
    user: str | None = None
    channel: int | None = None
    operation: str | None = None  # the AMQP method the broker refused ("basic.ack")
    reason: str | None = None  # the AMQP error in the broker's spelling ("precondition_failed"), or how it ended
    text: str | None = None  # the broker's own words for it ("unknown delivery tag 1")
    queue: str | None = None
    # Every queue the line names, in the broker's order (a dead-letter cycle's), where it names more than one
    queues: tuple[str, ...] | None = None
    consumer_tag: str | None = None
    delivery_tag: int | None = None
    timeout_ms: int | None = None  # the consumer timeout the broker applied
    link: str | None = None  # an AMQP 1.0 link's name, where the event is about one


# Why a channel or connection was closed, as a label: the AMQP error, or for precondition_failed (which covers
# unrelated mistakes) the mistake the broker's text names. Each has its own remedy (diagnosis.breaks).
UNKNOWN_DELIVERY_TAG = "unknown_delivery_tag"  # a double ack, an ack on another channel, an ack after a reconnect
INEQUIVALENT_ARGUMENTS = "inequivalent_arguments"  # a redeclare with other arguments or properties
_PRECONDITIONS = (("unknown delivery tag", UNKNOWN_DELIVERY_TAG), ("inequivalent arg", INEQUIVALENT_ARGUMENTS))


def cause(e: BrokerEvent) -> str:
    """The event's reason as a bounded label: "unknown_delivery_tag", "not_found", "frame_error", "dropped"..."""
    if e.reason == "precondition_failed" and e.text:
        for words, name in _PRECONDITIONS:
            if words in e.text:
                return name
    return (e.reason or "unknown").replace(" ", "_")


# What a counter of breaks is kept by: (kind, vhost, user, connection_name, cause), "" where unknown. Not by client
# library: a poll learns it only after the log's first lines of a connection, and one counter would become two.
TallyKey = tuple[str, str, str, str, str]


@dataclass(frozen=True)
class Breaks:
    """The events sources told of, as one poll holds them beside its snapshot: those of the recent window
    (attributed to their clients where a poll saw the connection), every event counted since ackscope started,
    and how reading went."""

    at: float
    sources: tuple[str, ...] = ()  # the event sources configured (BROKER_LOG, EVENT_EXCHANGE); none: polls only
    events: tuple[BrokerEvent, ...] = ()  # the window's, oldest first
    totals: Mapping[TallyKey, int] = field(default_factory=lambda: MappingProxyType({}))
    problems: tuple[str, ...] = ()  # a source that could not be read this poll, one line each, naming it
    log_readable: bool = True  # False: the last poll could not read the log (a problem says why)
    lines: int = 0  # log lines read since the start
    unknown_lines: int = 0  # in neither of the log's formats
    first_unknown: str | None = None  # the first of those, for a human to see what it was
    # Warnings and errors the log reader read but made no event of: what ackscope does not understand yet
    not_understood: int = 0
    first_not_understood: str | None = None  # the first of those, as the log wrote it
    truncated_lines: int = 0  # cut at the reader's line limit
    exchange_consuming: bool = False  # the event exchange's queue had ackscope's consumer at the last poll
    exchange_messages: int = 0  # messages read from the event exchange since the start
    exchange_dropped: int = 0  # of those, events dropped unread because polls fell behind (a bounded buffer)

    def told_by(self, source: str) -> bool:
        return source in self.sources
