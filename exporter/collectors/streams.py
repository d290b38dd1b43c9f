"""Per-stream series: each stream-protocol consumer's offset and lag, the offsets clients stored, the publishers'
confirms, and the Prometheus plugin's largest lag per stream. A stream's messages_ready is its retention, not a
backlog: these say how far behind its readers are."""

from __future__ import annotations

from ackscope.model.snapshot import Snapshot, StoredOffset, StreamConsumer, StreamPublisher, stream_ends

from .families import counter, gauge

CONSUMER_LABELS = ("vhost", "stream", "connection", "subscription_id", "client", "identity")
PUBLISHER_LABELS = ("vhost", "stream", "connection", "publisher_id", "reference", "client", "identity")
STORED_LABELS = ("vhost", "stream", "reference")


def _consumer(c: StreamConsumer) -> tuple[str, ...]:
    return (c.vhost, c.stream, c.connection, str(c.subscription_id), c.client or "", c.identity)


def _publisher(p: StreamPublisher) -> tuple[str, ...]:
    return (p.vhost, p.stream, p.connection, str(p.publisher_id), p.reference or "", p.client or "", p.identity)


def _stored(o: StoredOffset) -> tuple[str, ...]:
    return (o.vhost, o.stream, o.reference)


class StreamCollector:
    def __init__(self, snapshot: Snapshot):
        self._snapshot = snapshot

    def collect(self):
        s = self._snapshot
        consumers, publishers = s.stream_consumers, s.stream_publishers
        yield gauge("ackscope_stream_consumer_offset_lag", "Offsets the broker has not yet dispatched to a stream "
                    "consumer (its committed offset less the consumer's): a client buffering what it was sent "
                    "looks caught up by it.", CONSUMER_LABELS, consumers, _consumer, lambda c: c.offset_lag)
        yield gauge("ackscope_stream_consumer_offset", "The next offset the broker dispatches to a stream consumer.",
                    CONSUMER_LABELS, consumers, _consumer, lambda c: c.offset)
        yield gauge("ackscope_stream_consumer_credits", "Credits a stream consumer holds (chunks the broker may "
                    "still send it).", CONSUMER_LABELS, consumers, _consumer, lambda c: c.credits)
        ends = stream_ends(consumers)
        yield gauge("ackscope_stream_stored_offset", "The offset a client stored under its reference (offset "
                    "tracking): its own progress.", STORED_LABELS, s.stored_offsets, _stored, lambda o: o.offset)
        yield gauge("ackscope_stream_stored_offset_lag", "The stream's end (committed offset, as its consumers' "
                    "figures give it) less a reference's stored offset.", STORED_LABELS, s.stored_offsets, _stored,
                    lambda o: ends[(o.vhost, o.stream)] - o.offset if (o.vhost, o.stream) in ends else None)
        for name, doc, value in (
                ("published", "Messages a stream-protocol publisher sent.", lambda p: p.published),
                ("confirmed", "Messages the broker confirmed to a stream-protocol publisher.", lambda p: p.confirmed),
                ("errored", "Messages the broker refused a stream-protocol publisher.", lambda p: p.errored)):
            yield counter(f"ackscope_stream_publisher_{name}_total", doc, PUBLISHER_LABELS, publishers, _publisher,
                          value)
        streams = [q for q in s.queues if q.stream]
        yield gauge("ackscope_stream_max_offset_lag", "The largest offset lag of a stream's consumers, as the "
                    "broker's Prometheus plugin reports it (stream-protocol consumers).", ("vhost", "stream"),
                    streams, lambda q: (q.vhost, q.name), lambda q: q.stream_max_offset_lag)
