"""The Parquet contracts between the writers (the probes' event log, the exporter's snapshot history) and
the readers (the Spark pipeline, the dashboard). Names, types and meaning do not change without a new
column; docs/events.md documents the event log."""

from __future__ import annotations

import pyarrow as pa

# -- the probes' event log: DIR/events/date=YYYY-MM-DD/ ------------------------------------------------
EVENTS = pa.schema([
    pa.field("run_id", pa.string(), nullable=False),
    pa.field("probe", pa.string(), nullable=False),
    pa.field("queue_type", pa.string(), nullable=False),
    pa.field("persistent", pa.bool_(), nullable=False),
    pa.field("seq", pa.int64(), nullable=False),
    pa.field("kind", pa.string(), nullable=False),
    pa.field("ts", pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field("latency_s", pa.float64()),
    pa.field("batch_size", pa.int64()),
    pa.field("redelivered", pa.bool_()),
    pa.field("consumer", pa.string()),
])
EVENT_KINDS = ("published", "confirmed", "nacked", "returned", "confirm_timeout", "republished", "delivered",
               "acked", "requeued")

# -- the exporter's snapshot history: DIR/snapshots/{channels,consumers,queues}/date=YYYY-MM-DD/ -----------
_TS = pa.field("taken_at", pa.timestamp("us", tz="UTC"), nullable=False)
# Counter columns of the history, and the MessageStats field each is read from.
CHANNEL_COUNTS = {"published": "publish", "confirmed": "confirm", "delivered": "deliver_get", "acked": "ack",
                  "redelivered": "redeliver", "unroutable_returned": "return_unroutable",
                  "unroutable_dropped": "drop_unroutable"}
QUEUE_COUNTS = {k: CHANNEL_COUNTS[k] for k in ("published", "delivered", "acked", "redelivered")}

# Who the client is (Channel.client, Channel.identity): the connection name alone leaves most clients unnamed.
_CLIENT = [pa.field("client", pa.string()), pa.field("identity", pa.string())]

SNAPSHOTS = {
    "channels": pa.schema([_TS] + [pa.field(n, pa.string()) for n in ("vhost", "channel", "connection_name",
                                                                      "user")]
                          + [pa.field(n, pa.int64()) for n in ("prefetch_count", "global_prefetch_count",
                                                               "prefetch_limit", "messages_unacked",
                                                               "messages_unconfirmed", "consumer_count")]
                          + [pa.field("confirm", pa.bool_()), pa.field("transactional", pa.bool_())]
                          + [pa.field(f"{n}_total", pa.int64()) for n in CHANNEL_COUNTS] + _CLIENT),
    "consumers": pa.schema([_TS] + [pa.field(n, pa.string()) for n in ("vhost", "queue", "consumer_tag",
                                                                       "channel", "connection_name")]
                           + [pa.field("prefetch_count", pa.int64()), pa.field("ack_required", pa.bool_())]
                           + _CLIENT),
    "queues": pa.schema([_TS] + [pa.field(n, pa.string()) for n in ("vhost", "queue", "type")]
                        + [pa.field("durable", pa.bool_())]
                        + [pa.field(n, pa.int64()) for n in ("messages_ready", "messages_unacked",
                                                             "messages_persistent", "consumers")]
                        + [pa.field("consumer_utilisation", pa.float64())]
                        + [pa.field(f"{n}_total", pa.int64()) for n in QUEUE_COUNTS]),
}
# Columns a dataset gained after files were written without them: the pipeline reads such a file with the column
# null, instead of skipping it as another dataset's. A new column is added here, never as a required one.
ADDED_COLUMNS = {"channels": frozenset(("client", "identity")), "consumers": frozenset(("client", "identity")),
                 "events": frozenset(("consumer",))}

# -- the applications' traced messages: DIR/traces/messages/date=YYYY-MM-DD/ --------------------------------
# One row a message, written when the exporter forgets it (its deadline and a minute after): from its publish span
# and its deliveries' spans (ackscope.sources.traces). Times on the clock of the host that made the span. No id, no
# message id, no body.
TRACE_MESSAGES = pa.schema([
    pa.field("published_at", pa.timestamp("us", tz="UTC"), nullable=False),  # the publish span's start
    pa.field("destination", pa.string(), nullable=False),  # as the spans name it
    pa.field("service", pa.string(), nullable=False),  # the publishing service
    pa.field("exchange", pa.string()),  # where the spans say
    pa.field("queue", pa.string()),  # where the spans say
    pa.field("consumer", pa.string()),  # the service of the first delivery
    pa.field("delivered_at", pa.timestamp("us", tz="UTC")),  # the first delivery's start; null: none came
    pa.field("processing_s", pa.float64()),  # the first delivery's processing
    pa.field("deliveries", pa.int64(), nullable=False),
    pa.field("duplicates", pa.int64(), nullable=False),  # deliveries beyond the first to a service that had one
    pa.field("redelivered", pa.int64(), nullable=False),  # of those, flagged redelivered by their spans
    pa.field("publish_error", pa.bool_(), nullable=False),
])

# -- the pipeline's reports under --out, in the order it writes them ------------------------------------------
REPORTS = ("delivery_audit", "lost_messages", "out_of_order_messages", "confirm_latency", "confirm_batches",
           "confirm_batch_interval", "delivery_latency", "redelivery", "prefetch_saturation", "redelivery_hotspots",
           "publisher_safety", "trace_audit", "trace_queue_time")
