"""The applications' own messages, as their spans tell (ackscope.sources.traces), joined with the broker's view:
how long they wait, which never arrived, which came twice, and what makes the figures unsure.

What the spans say is known: a publish, a delivery, when each started on its own host's clock. What the broker says
is known: what a queue holds, what it delivered, who consumes. Where the two are joined, the join is said: the spans
name no vhost (a queue name in one vhost alone is taken for theirs), and a queue's consumers are the broker's, not
services the spans name. Queue times are read from histogram buckets: a percentile is said as the bucket's bounds.
"""

from __future__ import annotations

from collections.abc import Iterator

from ackscope.model.events import CONNECTION_CLOSED, CONNECTION_ERROR, CONSUMER_TIMEOUT, MESSAGE_DROPPED
from ackscope.model.findings import Finding
from ackscope.model.snapshot import Queue
from ackscope.model.traces import GONE, TRACES, UNPLACED, WAITING, Flow, TraceWindow, quantile_bounds, said

from .context import Context, Named, Rule, consumers_named, few, num, rounded

MIN_DELIVERIES = 5  # a queue-time percentile from fewer is no percentile


def _start(ctx: Context) -> dict[tuple[str, str], Flow]:
    start = ctx.traces_start
    return {} if start is None else {(f.destination, f.service): f for f in start.flows}


def _grown(now: int, then: int) -> int:
    """A count of the spans' over the window; where it went back (the trace worker started again), since then."""
    return now - then if now >= then else now


def _traced_over_window(ctx: Context, start: dict[tuple[str, str], Flow], queue: str) -> int | None:
    """Deliveries the spans show from `queue` over the window, every traced flow to it together; None on the
    first poll, or where a flow's count went back (the exporter's trace worker started again): not known."""
    if ctx.traces_start is None:
        return None
    traced = 0
    for flow in ctx.traces.flows:
        if flow.queue == queue:
            then = start.get((flow.destination, flow.service))
            if then is not None and flow.delivered < then.delivered:
                return None
            traced += flow.delivered - (then.delivered if then is not None else 0)
    return traced


def _queue(ctx: Context, flow: Flow) -> Queue | None:
    """The queue the spans name, where one vhost alone has a queue of that name (the spans name no vhost)."""
    if not flow.queue:
        return None
    found = [q for q in ctx.snapshot.queues if q.name == flow.queue]
    return found[0] if len(found) == 1 else None


def _buckets(now: Flow, then: Flow | None) -> list[tuple[float, float]]:
    before = dict(then.queue_time.buckets) if then is not None else {}
    return [(le, n - before.get(le, 0.0)) for le, n in now.queue_time.buckets]


def _consumers_evidence(ctx: Context, q: Queue) -> list[str]:
    """What the broker knows of the queue's consumers: each one's channel, its prefetch and what it holds."""
    out = []
    for c in ctx.known_consumers_of(q)[:5]:
        ch = ctx.channel(c.channel)
        prefetch = ch.prefetch_limit if ch is not None else None
        unacked = ch.messages_unacked if ch is not None else None
        state = ("at its prefetch" if prefetch and unacked is not None and unacked >= prefetch else
                 "auto-ack" if not c.ack_required else "no prefetch limit" if prefetch == 0 else "")
        out.append(f"{c.identity or c.connection_name or 'channel ' + c.channel}: prefetch "
                   f"{'unlimited' if prefetch == 0 else prefetch}, {num(unacked)} unacked" + (f", {state}" if state
                                                                                             else ""))
    return out


def _where(flow: Flow, q: Queue | None) -> tuple[str, str]:
    """The finding's vhost and object: the queue (or the destination, where the spans name no queue) and the
    publishing service, so that two services' messages to one queue are two findings."""
    if q is not None:
        return q.vhost, f"queue {q.name}, published by {flow.service}"
    return "", f"destination {flow.destination}, published by {flow.service}"


def _queue_time(ctx: Context, rule: Rule) -> Iterator[Finding]:
    limit = ctx.thresholds.trace_queue_time_seconds
    start = _start(ctx)
    seconds = ctx.traces.taken_at - ctx.traces_start.taken_at if ctx.traces_start is not None else None
    for flow in ctx.traces.flows:
        buckets = _buckets(flow, start.get((flow.destination, flow.service)))
        delivered = buckets[-1][1] if buckets else 0
        if delivered < MIN_DELIVERIES:
            continue
        p99 = quantile_bounds(buckets, 0.99)
        if p99[0] < limit:  # only where the whole bucket is over the limit: certainly slower, not perhaps
            continue
        q = _queue(ctx, flow)
        vhost, obj = _where(flow, q)
        evidence = {"publishing_service": flow.service, "destination": flow.destination,
                    "consuming_services": list(flow.consumers), "delivered_in_window": int(delivered),
                    "window_seconds": rounded(seconds), "queue_time_p50": said(quantile_bounds(buckets, 0.5)),
                    "queue_time_p99": said(p99), "measured_by": "the publish span's start to the first delivery "
                    "span's start, on the two services' clocks"}
        who = Named()
        tail = " The spans name no queue: the broker's view of its consumers cannot be joined."
        if q is not None:
            who = consumers_named(ctx, q)
            evidence.update(queue=q.name, ready=q.messages_ready, unacked=q.messages_unacked, consumers=q.consumers,
                            queue_consumers=_consumers_evidence(ctx, q),
                            joined_by="the queue's name, in the only vhost that has it (the spans name no vhost)")
            tail = (f" {q.name} holds {num(q.messages_ready)} ready and {num(q.messages_unacked)} unacked with "
                    f"{num(q.consumers)} consumer{'' if q.consumers == 1 else 's'}"
                    f"{': ' + few(evidence['queue_consumers']) if evidence['queue_consumers'] else ''}.")
        yield rule.finding(
            "warning", vhost, obj, who, evidence,
            f"{flow.service}'s messages to {flow.destination} waited p99 {said(p99)} before their first delivery "
            f"({int(delivered)} delivered over the window, p50 {said(quantile_bounds(buckets, 0.5))}), by the "
            f"applications' own spans.{tail}")


def _beside(ctx: Context, q: Queue) -> list[str]:
    """What the broker told of the queue's vhost over the window that can take messages away: connections that
    closed, consumers timed out, messages dropped."""
    if ctx.breaks is None:
        return []
    kinds = {CONNECTION_CLOSED: "a connection closed", CONNECTION_ERROR: "a connection closed on an error",
             CONSUMER_TIMEOUT: "a consumer timed out", MESSAGE_DROPPED: "messages dropped"}
    told = [f"{kinds[e.kind]}: {e.connection_name or e.client or e.connection or e.queue or 'unnamed'}"
            + (f" ({e.reason})" if e.reason else "") for e in ctx.breaks.events
            if e.kind in kinds and e.vhost in (q.vhost, None) and (e.queue in (None, q.name))]
    return told[-5:]


def _unprocessed(ctx: Context, rule: Rule) -> Iterator[Finding]:
    start = _start(ctx)
    deadline = ctx.traces.deadline_s
    for flow in ctx.traces.flows:
        q = _queue(ctx, flow)
        vhost, obj = _where(flow, q)
        base = {"publishing_service": flow.service, "destination": flow.destination,
                "consuming_services": list(flow.consumers), "deadline_seconds": rounded(deadline),
                "oldest_seconds": rounded(flow.oldest_unprocessed_s)}
        waiting, gone, unplaced = (flow.unprocessed.get(s, 0) for s in (WAITING, GONE, UNPLACED))
        if (gone or waiting) and q is not None:
            # One finding a flow: the messages gone and those still waiting, each said where there are some.
            evidence = dict(base, gone=gone or None, waiting=waiting or None, queue=q.name,
                            queue_holds=num(q.messages_ready) + num(q.messages_unacked), consumers=q.consumers,
                            queue_consumers=_consumers_evidence(ctx, q),
                            joined_by="the queue's name: the spans name no vhost, and one vhost alone among those "
                                      "watched has a queue of that name")
            said = []
            if gone:
                traced = _traced_over_window(ctx, start, q.name)
                by_broker = ctx.over_window(q, "deliver_get")  # deliveries and gets, acked or not
                untraced = by_broker is not None and traced is not None and by_broker >= traced + gone
                evidence.update(traced_deliveries_in_window=traced, broker_deliveries_in_window=by_broker,
                                broker_events=_beside(ctx, q))
                evidence["inferred"] = (
                    f"the broker delivered {by_broker} from {q.name} over the window, {by_broker - traced} more than "
                    "the spans show: a consumer that sends no spans may have taken them, or one that died before its "
                    "span ended (an auto-ack consumer loses what it was handed)" if untraced else
                    f"the broker's count of {q.name}'s deliveries over the window is not known (not reported: a "
                    "channel that closed before its statistics were emitted takes its count with it; or it went "
                    "back: the queue declared again, its node restarted): whether a consumer took them or they left "
                    "the queue another way is not known" if by_broker is None else
                    "the spans' count of deliveries over the window is not known (the first poll, or the exporter's "
                    "trace worker started again): whether a consumer took them or they left the queue another way "
                    "is not known" if traced is None else
                    "the broker delivered fewer from the queue than these and the traced deliveries together: they "
                    "left it another way (expired, dropped at a length limit, dead-lettered, or purged)")
                holding = [c for c in ctx.known_consumers_of(q) if c.ack_required is False]
                if untraced and holding:
                    # Handed over and settled at once, they leave the queue before their processing begins.
                    evidence["inferred"] += (
                        f"; or {few(c.identity or c.connection_name or c.channel for c in holding)}, consuming "
                        "with auto-ack now, still holds them unprocessed in its own buffer")
                said.append(f"{gone} of {flow.service}'s messages to {q.name} had no traced delivery within "
                            f"{deadline:g} s and the queue no longer holds them (it holds {evidence['queue_holds']}): "
                            f"gone from the queue, and no span says they were processed. Known: the spans and the "
                            f"broker's count; inferred: {evidence['inferred']}.")
            if waiting:
                # The oldest of the flow's unprocessed: the backlog's own where none is gone (in a FIFO queue the
                # gone ones are likely the older).
                oldest = "" if gone else f", the oldest {flow.oldest_unprocessed_s:.0f} s"
                said.append(f"{waiting} of {flow.service}'s messages to {q.name} have had no traced delivery for "
                            f"more than {deadline:g} s{oldest}, and {q.name} "
                            f"still holds at least that many, ready or unacknowledged: a backlog, with "
                            f"{num(q.consumers)} consumer{'' if q.consumers == 1 else 's'} (or deliveries still "
                            "being processed: a delivery's span comes when it ends).")
            yield rule.finding("warning", vhost, obj, consumers_named(ctx, q) if q.consumers else Named(), evidence,
                               " ".join(said))
        if unplaced or ((gone or waiting) and q is None):
            n = unplaced + (0 if q is not None else gone + waiting)
            why = ("deliveries without their publish were seen: the sampling does not keep pairs whole"
                   if not ctx.traces.unprocessed_known else
                   "no delivery of it was ever traced: its consumers send no spans" if not flow.delivered else
                   f"the spans name no queue, or several (only {flow.destination!r}: an exchange or a routing key)"
                   if not flow.queue else f"no single queue {flow.queue} among the vhosts watched, or its counts "
                   "unread")
            yield rule.finding(
                "info", vhost, obj, Named(), dict(base, unplaced=n, why_unplaced=why),
                f"{n} of {flow.service}'s messages to {flow.destination} had no traced delivery within "
                f"{deadline:g} s; whether they wait or are gone is not known: {why}.")


def _duplicates(ctx: Context, rule: Rule) -> Iterator[Finding]:
    start = _start(ctx)
    for flow in ctx.traces.flows:
        then = start.get((flow.destination, flow.service))
        duplicates = _grown(flow.duplicates, then.duplicates if then is not None else 0)
        if duplicates <= 0:
            continue
        redelivered = _grown(flow.redelivered, then.redelivered if then is not None else 0)
        q = _queue(ctx, flow)
        vhost, obj = _where(flow, q)
        evidence = {"publishing_service": flow.service, "destination": flow.destination,
                    "consuming_services": list(flow.consumers), "duplicate_deliveries": duplicates,
                    "flagged_redelivered_by_span": redelivered}
        said = ""
        if q is not None:
            broker = ctx.over_window(q, "redeliver")
            evidence.update(queue=q.name, broker_redeliveries_in_window=broker)
            if broker is not None:
                said = f"; the broker counted {broker} redeliveries on {q.name} over the window"
        yield rule.finding(
            "info", vhost, obj, consumers_named(ctx, q) if q is not None else Named(), evidence,
            f"{duplicates} deliveries of {flow.service}'s messages to {flow.destination} went again to a service "
            f"that had one already ({redelivered} flagged redelivered by their spans{said}): at-least-once delivery "
            "at work; each is processed twice unless the consumer is idempotent.")


def _skew(ctx: Context, rule: Rule) -> Iterator[Finding]:
    start = _start(ctx)
    for flow in ctx.traces.flows:
        then = start.get((flow.destination, flow.service))
        for consumer, n in sorted(flow.skewed.items()):
            grown = n - (then.skewed.get(consumer, 0) if then is not None else 0)
            if grown > 0:
                yield rule.finding(
                    "info", "", f"destination {flow.destination}, from {flow.service} to {consumer}", Named(),
                    {"publishing_service": flow.service, "consuming_service": consumer, "deliveries": grown},
                    f"{grown} deliveries to {consumer} started before {flow.service} began publishing them, by the "
                    f"two hosts' clocks: their clocks disagree. These are kept out of the queue times.")


def _sampling(ctx: Context, rule: Rule) -> Iterator[Finding]:
    w: TraceWindow = ctx.traces
    if w.unprocessed_known:
        return
    yield rule.finding(
        "info", "", "traces", Named(),
        {"orphan_deliveries": dict(w.orphans), "recent": w.recent_orphans, "waiting_long": w.waiting_long},
        f"{_orphaned(w)} though their trace context names one: the publishers' spans are sampled apart from the "
        "consumers', or sent elsewhere. Until none come, a publish without a delivery proves nothing, and no "
        "message is called unprocessed.")


def _orphaned(w: TraceWindow) -> str:
    said = []
    if w.recent_orphans:
        said.append(f"{w.recent_orphans} deliveries came without their publish span (by {few(w.orphans)})")
    if w.waiting_long:
        said.append(f"{w.waiting_long} deliveries have waited more than {w.deadline_s / 2:g} s for theirs")
    return "; ".join(said)


RULES = (
    Rule("trace-queue-time-high", "An application's messages wait long before their first delivery, by its own "
         "spans: a warning where the p99 over the window is certainly over trace_queue_time_seconds (its whole "
         "histogram bucket), from 5 deliveries. Joined with the queue's consumers where the spans name the queue.",
         "Look at the queue's consumers named: one at its prefetch needs a higher prefetch or more consumers, a "
         "stalled one needs its owner; a queue with one consumer for the rate in needs more. See RabbitMQ guide "
         "'Consumer Prefetch'.", _queue_time, needs=(TRACES,)),
    Rule("trace-messages-unprocessed", "An application's messages with no traced delivery within --trace-deadline, "
         "placed by the broker's view of their queue: a warning for those the queue no longer holds (gone, with "
         "what the broker delivered and told of the vhost beside them) and for a backlog (still waiting, with its "
         "age); info where they cannot be placed (the spans name no queue, the sampling breaks pairs, or no "
         "consumer is traced).",
         "For gone messages: check the consumers that closed or died holding deliveries (auto-ack loses what it "
         "was handed), length limits and TTLs on the queue, and consumers that send no spans. For a backlog: the "
         "queue's consumers. See RabbitMQ guide 'Consumer Acknowledgements and Publisher Confirms'.", _unprocessed,
         needs=(TRACES,)),
    Rule("trace-duplicate-deliveries", "A message delivered again to a service that had it already, by the spans, "
         "with the broker's redelivery count beside it: info.",
         "Make the consumer idempotent (deduplicate by message id), or find why it requeues or loses its channel; "
         "see RabbitMQ guide 'Reliability Guide', 'Consumer Acknowledgements'.", _duplicates, needs=(TRACES,)),
    Rule("trace-clock-skew", "Deliveries that started before their publish by the hosts' clocks: the publishing "
         "and the consuming host disagree on the time, and their queue times are left out; info.",
         "Synchronise both hosts' clocks (chrony or systemd-timesyncd).", _skew, needs=(TRACES,)),
    Rule("trace-sampling-incomplete", "Deliveries whose publish span never came though their trace context names "
         "one, or has not come in half the deadline: independent sampling (or a publisher sending its spans "
         "elsewhere); unprocessed messages are not judged while any come; info.",
         "Sample by the parent (the SDK's parentbased_* samplers, the default) so that a message's spans are kept or "
         "dropped together, and send every service's spans to the same Collector.", _sampling, needs=(TRACES,)),
)
