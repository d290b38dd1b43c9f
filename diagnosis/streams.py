"""Rules about streams: a stream keeps its log, so what counts is how far each consumer is behind its end (its
offset lag), never the messages it retains. Two figures, said apart: what the broker has not yet dispatched to a
consumer (its offset lag), and where a client's stored offset stands against the stream's end (offset tracking:
its own progress, which a client that buffers what it was sent shows and the broker's lag does not)."""

from __future__ import annotations

from collections.abc import Iterator

from ackscope.model.findings import Finding
from ackscope.model.snapshot import QUEUE_COUNTS, STREAM_CLIENTS, stream_ends

from .context import Context, Named, Rule, rounded

STREAMS_GUIDE = "RabbitMQ guide 'Streams and Super Streams'"
DISPATCHED = "dispatched: the broker's offset lag, what it has not yet sent the consumer"
STORED = "stored: the stream's end less the offset the client stored (offset tracking), its own progress"


def _lagging(ctx: Context, rule: Rule) -> Iterator[Finding]:
    start, t = ctx.window_start, ctx.thresholds
    if start is None:
        return
    grow = t.stream_lag_growth
    seconds = ctx.window_seconds
    if STREAM_CLIENTS not in ctx.snapshot.unreported:
        before = {(c.connection, c.stream, c.subscription_id): c for c in start.stream_consumers}
        for c in ctx.snapshot.stream_consumers:
            then = before.get((c.connection, c.stream, c.subscription_id))
            if c.offset_lag is None or then is None or then.offset_lag is None or c.offset_lag - then.offset_lag < grow:
                continue
            yield _finding(ctx, rule, c.vhost, c.stream, Named("", c.client or "", c.identity),
                           f"subscription {c.subscription_id} of connection {c.connection}", then.offset_lag,
                           c.offset_lag, DISPATCHED, seconds, consumed=c.consumed)
        ends, ends_then = stream_ends(ctx.snapshot.stream_consumers), stream_ends(start.stream_consumers)
        stored_then = {(o.vhost, o.stream, o.reference): o.offset for o in start.stored_offsets}
        for o in ctx.snapshot.stored_offsets:
            key = (o.vhost, o.stream)
            then = stored_then.get((o.vhost, o.stream, o.reference))
            if key not in ends or key not in ends_then or then is None:
                continue
            lag, lag_then = ends[key] - o.offset, ends_then[key] - then
            if lag - lag_then >= grow:
                yield _finding(ctx, rule, o.vhost, o.stream, Named(), f"reference '{o.reference}'", lag_then, lag,
                               STORED, seconds, stored_offset=o.offset)
        return
    # Without the stream plugin's management: the Prometheus plugin's largest lag per stream, no consumer named.
    for q in ctx.snapshot.queues:
        then = ctx.at_window_start(q)
        if not q.stream or q.stream_max_offset_lag is None or then is None or then.stream_max_offset_lag is None:
            continue
        if q.stream_max_offset_lag - then.stream_max_offset_lag >= grow:
            yield _finding(ctx, rule, q.vhost, q.name, Named(), "its most lagging consumer",
                           then.stream_max_offset_lag, q.stream_max_offset_lag,
                           DISPATCHED + " (the Prometheus plugin's largest per stream)", seconds)


def _finding(ctx: Context, rule: Rule, vhost: str, stream: str, who: Named, consumer: str, then: int, now: int,
             figure: str, seconds: float | None, **more) -> Finding:
    return rule.finding("warning", vhost, f"stream {stream}", who,
                        {"stream": stream, "consumer": consumer, "offset_lag": now, "offset_lag_at_window_start": then,
                         "lag_growth": now - then, "window_seconds": rounded(seconds), "figure": figure, **more},
                        f"the consumer ({consumer}) of stream {stream} falls behind: its offset lag grew from {then} "
                        f"to {now} in the last {seconds:.0f}s ({figure}). It is stuck or slower than the stream's "
                        "publishers; the stream's retention will remove what it has not read yet.")


RULES: tuple[Rule, ...] = (
    Rule("stream-consumer-lagging", "A stream consumer whose offset lag grew over the window (stuck, or slower than "
         "the publishers); the evidence says whether the figure is the broker's (undispatched) or the client's "
         "stored offset.", "Find why the consumer is slow or stopped (its process, its downstream); add "
         "consumers with single active consumer or a super stream to share the load, and make sure retention keeps "
         f"what it has not read; see {STREAMS_GUIDE}.", _lagging, needs=(QUEUE_COUNTS,)),
)
