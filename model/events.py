"""What happened between polls, beside the snapshots: the broker closing a channel or a connection, timing out a
consumer, a client connecting and leaving. Deliveries break at such events: the unacked messages of a closed
channel go back to their queue and are delivered again.

An event is what one source said, as the broker said it: `source` names it (the node's log, the event
exchange), and a field the source did not give is None.
"""

from __future__ import annotations

from dataclasses import dataclass

# kind: what happened.
CHANNEL_ERROR = "channel_error"  # the broker closed a channel on an error (reason: the AMQP error, e.g. precondition_failed)
CONNECTION_ERROR = "connection_error"  # the broker closed a connection on an error (a frame error, ...)
CONSUMER_TIMEOUT = "consumer_timeout"  # a consumer held a delivery past the timeout in force
CONNECTION_OPENED = "connection_opened"  # a client connected and was granted its vhost
CONNECTION_CLOSED = "connection_closed"  # a connection ended: closed by its client, or lost (reason says which)
KINDS = (CHANNEL_ERROR, CONNECTION_ERROR, CONSUMER_TIMEOUT, CONNECTION_OPENED, CONNECTION_CLOSED)

# source: who said it.
BROKER_LOG = "broker log"
EVENT_EXCHANGE = "event exchange"


@dataclass(frozen=True, slots=True)
class BrokerEvent:
    at: float  # seconds since the epoch, from the source's own timestamp
    kind: str
    source: str
    # The broker's name for the connection ("127.0.0.1:50412 -> 127.0.0.1:5672"), as /api/connections has it.
    connection: str | None = None
    # The connection's Erlang process ("<0.1234.0>"): the log names the connection by it where it gives no name.
    pid: str | None = None
    client: str | None = None  # the name the client gave its connection (connection_name), where said
    vhost: str | None = None
    user: str | None = None
    channel: int | None = None
    operation: str | None = None  # the AMQP method the broker refused ("basic.ack")
    reason: str | None = None  # the AMQP error in the broker's spelling ("precondition_failed"), or how it ended
    text: str | None = None  # the broker's own words for it ("unknown delivery tag 1")
    queue: str | None = None
    consumer_tag: str | None = None
    delivery_tag: int | None = None
    timeout_ms: int | None = None  # the consumer timeout the broker applied
