"""Rules about consumers: how they acknowledge, what prefetch binds them, what keeps coming back."""

from __future__ import annotations

from collections.abc import Iterator

from ackscope.model.findings import Finding
from ackscope.model.snapshot import CHANNELS, QUEUE_COUNTS, Channel, Queue, binding_limit

from .context import ACKS_GUIDE, Context, Rule, consumers_named, num, rounded


def _prefetch_unlimited(ctx: Context, rule: Rule) -> Iterator[Finding]:
    for con in ctx.snapshot.consumers:
        ch = ctx.channel(con.channel)
        if con.ack_required is not True or con.prefetch_count != 0 or ch is None or num(ch.global_prefetch_count):
            continue
        unacked = num(ch.messages_unacked)
        # A latent risk with nothing at stake is info: no message is held (yet).
        severity = ("critical" if unacked >= ctx.thresholds.unlimited_prefetch_unacked_critical
                    else "warning" if unacked > 0 else "info")
        yield rule.finding(severity, con.vhost, f"channel {con.channel}",
                           con, {"queue": con.queue, "prefetch": 0, "unacked": unacked},
                           f"consumer {con.consumer_tag} on queue {con.queue} acks manually with no prefetch "
                           f"limit: the broker pushes it every message it can; it holds {unacked} unacked.")


def _auto_ack(ctx: Context, rule: Rule) -> Iterator[Finding]:
    t = ctx.thresholds
    for con in ctx.snapshot.consumers:
        if con.ack_required is not False:
            continue
        q = ctx.queue(con.vhost, con.queue)
        ready = num(q.messages_ready) if q else 0
        rate = ctx.window_rate(q, "deliver_get") if q else None
        busy = ready >= t.auto_ack_backlog or (rate or 0) >= t.auto_ack_delivery_rate
        yield rule.finding("warning" if busy else "info", con.vhost, f"channel {con.channel}", con,
                           {"queue": con.queue, "ready": ready, "delivery_rate": rounded(rate),
                            "window_seconds": rounded(ctx.window_seconds)},
                           f"consumer {con.consumer_tag} on queue {con.queue} uses automatic acknowledgement: a "
                           "message counts as delivered once written to the socket and is lost if the "
                           "connection drops; no prefetch limit protects the consumer from being flooded.")


def _prefetch_saturated(ctx: Context, rule: Rule) -> Iterator[Finding]:
    seen = set()
    for con in ctx.snapshot.consumers:
        ch, q = ctx.channel(con.channel), ctx.queue(con.vhost, con.queue)
        if ch is None or q is None or con.ack_required is not True or (ch.name, q.name) in seen:
            continue
        seen.add((ch.name, q.name))
        if num(q.messages_ready) == 0:
            continue
        full = next(((unacked, limit) for unacked, limit in _held_against(ctx, ch, q)
                     if limit is not None and unacked >= limit), None)
        if full is None:
            continue
        unacked, limit = full
        yield rule.finding("warning", con.vhost, f"channel {ch.name}", ch,
                           {"queue": q.name, "unacked": unacked, "prefetch_limit": limit,
                            "ready": q.messages_ready},
                           f"the consumer holds {unacked} unacked, its whole prefetch of {limit}, "
                           f"while {q.messages_ready} messages wait in {q.name}: the consumer is the bottleneck.")


def _held_against(ctx: Context, ch: Channel, q: Queue) -> list[tuple[int, int | None]]:
    """Unacked deliveries and the limit that binds them: the whole channel's against the channel's limit;
    and, where the channel's consumers of the queue are all of the queue's consumers, the queue's unacked
    against their own prefetch (capped by the channel-wide one): one consumer of a channel can be full
    while the channel, with room for its other consumers, is not."""
    held = [(num(ch.messages_unacked), ch.prefetch_limit)]
    mine = [c.prefetch_count for c in ctx.consumers_of(q) if c.channel == ch.name]
    if mine and len(mine) == num(q.consumers) and q.messages_unacked is not None and None not in mine:
        held.append((q.messages_unacked, binding_limit(mine, ch.global_prefetch_count)))
    return held


def _prefetch_one(ctx: Context, rule: Rule) -> Iterator[Finding]:
    for con in ctx.snapshot.consumers:
        q = ctx.queue(con.vhost, con.queue)
        ch = ctx.channel(con.channel)
        # Prefetch 1 as it binds: the consumer's own, or a channel-wide 1 (Celery's acks_late with
        # worker_prefetch_multiplier=1 sets global QoS 1 and leaves the consumer's at 0).
        limit = ch.limit_for(con.prefetch_count) if ch is not None else con.prefetch_count
        if con.ack_required is not True or limit != 1 or q is None:
            continue
        if num(q.messages_ready) < ctx.thresholds.prefetch_one_backlog:
            continue
        yield rule.finding("warning", con.vhost, f"channel {con.channel}", con,
                           {"queue": q.name, "prefetch": 1, "ready": q.messages_ready},
                           f"a consumer with prefetch 1 drains {q.name}, which holds {q.messages_ready} ready "
                           "messages: every delivery waits for the previous ack's round trip.")


def _requeue_loop(ctx: Context, rule: Rule) -> Iterator[Finding]:
    t = ctx.thresholds
    for q in ctx.snapshot.queues:
        redeliver, deliver = ctx.window_rate(q, "redeliver"), ctx.window_rate(q, "deliver_get")
        if redeliver is None or deliver is None or redeliver < t.requeue_min_rate:
            continue
        if redeliver < t.requeue_ratio * deliver:
            continue
        critical = deliver > 0 and redeliver >= 0.9 * deliver
        yield rule.finding("critical" if critical else "warning", q.vhost, f"queue {q.name}", consumers_named(ctx, q),
                           {"redeliver_rate": rounded(redeliver), "deliver_rate": rounded(deliver),
                            "window_seconds": rounded(ctx.window_seconds), "consumers": q.consumers},
                           f"{redeliver:.1f} of {deliver:.1f} deliveries per second on {q.name} are redeliveries: "
                           "consumers reject or nack with requeue and the same messages come straight back "
                           "(a poison message, or every consumer failing), burning network and CPU.")


RULES: tuple[Rule, ...] = (
    Rule("prefetch-unlimited", "A manual-ack consumer whose channel has prefetch 0 (unlimited); info while it "
         "holds nothing, critical when it holds many unacked messages.",
         f"Set basic.qos prefetch (100-300 is a good start); see {ACKS_GUIDE}, "
         "'Channel Prefetch Setting (QoS)'.", _prefetch_unlimited, needs=(CHANNELS,)),
    Rule("auto-ack-consumer", "A consumer with automatic acknowledgement; a warning when its queue has a backlog "
         "or a high delivery rate.", f"Use manual acks with a prefetch limit where losing a message matters; see "
         f"{ACKS_GUIDE}, 'Acknowledgement Modes'.", _auto_ack, needs=(CHANNELS,)),
    Rule("prefetch-saturated", "A consumer at its prefetch limit while its queue holds ready messages: the "
         "consumer is the bottleneck.", "Add consumers or make processing faster; raise prefetch only if "
         f"processing is fast and uniform. See {ACKS_GUIDE}, 'Channel Prefetch Setting (QoS)'.", _prefetch_saturated,
         needs=(CHANNELS, QUEUE_COUNTS)),
    Rule("prefetch-one", "Prefetch 1 on a queue with a backlog: throughput bound by round trips.",
         f"Raise prefetch (tens to hundreds) unless strict one-at-a-time fairness is required; see {ACKS_GUIDE}, "
         "'Consumer Acknowledgement Modes, Prefetch and Throughput'.", _prefetch_one,
         needs=(CHANNELS, QUEUE_COUNTS)),
    Rule("requeue-loop", "A queue redelivering, over the window, at a rate comparable to its delivery rate: a "
         "poison message, or every consumer requeues.",
         "Find the message consumers reject; nack without requeue to a dead-letter "
         f"exchange after a few attempts; see {ACKS_GUIDE}, 'Negative Acknowledgement and Requeuing of "
         "Deliveries'.", _requeue_loop, needs=(QUEUE_COUNTS,)),
)
