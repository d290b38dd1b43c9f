"""Rules about consumers: how they acknowledge, what prefetch binds them, what keeps coming back."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from ackscope.model.findings import Finding
from ackscope.model.snapshot import CHANNELS, CONNECTIONS, QUEUE_COUNTS, Channel, Consumer, Queue, binding_limit

from .breaks import stuck
from .context import ACKS_GUIDE, Context, Rule, consumers_named, last_seen, named, num, rounded


def _prefetch_unlimited(ctx: Context, rule: Rule) -> Iterator[Finding]:
    for con in ctx.snapshot.consumers:
        ch = ctx.channel(con.channel)
        if con.ack_required is not True or con.prefetch_count != 0 or ch is None or num(ch.global_prefetch_count):
            continue
        q = ctx.queue(con.vhost, con.queue)
        unseen = _channel_limit_unseen(ctx, ch)
        unacked = num(ch.messages_unacked)
        if unseen and unacked < ctx.thresholds.unlimited_prefetch_unacked_critical \
                and q is not None and num(q.messages_ready) > 0:
            # The broker pushes an unlimited consumer every ready message: messages left ready mean a limit
            # binds it, one this release does not show (Celery's global QoS on RabbitMQ 4.0-4.2).
            continue
        # A latent risk with nothing at stake is info: no message is held (yet). Where a channel-wide limit may
        # bind unseen, a few held may be that limit's; many are held against no limit anyone can see.
        warns_from = ctx.thresholds.unlimited_prefetch_unacked_unseen if unseen else 1
        severity = ("critical" if unacked >= ctx.thresholds.unlimited_prefetch_unacked_critical
                    else "warning" if unacked >= warns_from else "info")
        version = ctx.snapshot.overview.rabbitmq_version or "this release"
        evidence = {"queue": con.queue, "prefetch": 0, "unacked": unacked}
        if unseen:
            evidence["channel_prefetch"] = (f"not reported by RabbitMQ {version}: a channel-wide (global) limit "
                                            "may bind unseen (not known)")
        elif ch.global_prefetch_count is None:
            evidence["channel_prefetch"] = (f"applied per consumer by RabbitMQ {version}: the consumer's prefetch "
                                            "is what binds")
        yield rule.finding(severity, con.vhost, f"channel {con.channel}", con, evidence,
                           f"consumer {con.consumer_tag} on queue {con.queue} acks manually with no prefetch "
                           f"limit: the broker pushes it every message it can; it holds {unacked} unacked." + (
                               f" RabbitMQ {version} does not show a channel-wide (global) prefetch: if the client "
                               "set one, it binds unseen." if unseen else ""))


def _channel_limit_unseen(ctx: Context, ch: Channel) -> bool:
    """Whether a channel-wide (global) prefetch may bind this channel without the broker showing it: RabbitMQ
    4.0-4.2 apply one and report none (None here); 3.x reports it; from 4.3 it is applied to each consumer, whose
    prefetch then shows it (docs/versions.md)."""
    return ch.global_prefetch_count is None and not (ctx.release is not None and ctx.release >= (4, 3))


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
    held = stuck(ctx)
    for con in ctx.snapshot.consumers:
        ch, q = ctx.channel(con.channel), ctx.queue(con.vhost, con.queue)
        # A stream's ready messages are its retained log, not a backlog the consumer holds up (its acks grant credit).
        # A consumer that acks nothing is stalled, not slow: consumer-stalled (or consumer-cancelled-by-broker) says
        # so, and what comes next.
        if ch is None or q is None or q.stream or con.ack_required is not True or (ch.name, q.name) in seen \
                or ch.name in held:
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
        if con.ack_required is not True or limit != 1 or q is None or q.stream:
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
        redelivered, delivered = ctx.over_window(q, "redeliver"), ctx.over_window(q, "deliver_get")
        if not redelivered or not delivered or redelivered < t.requeue_ratio * delivered:
            continue
        seconds = ctx.window_seconds
        # The management API leaves out a counter never counted: a queue nobody acked from has no `ack`.
        acked = num(ctx.over_window(q, "ack"))
        # A loop is a share, whatever the rate: redeliveries comparable to deliveries with (almost) nothing acked
        # is one from a few redeliveries (a poison message killing its consumer each time loops at 0.6/s). Where
        # acks get through, only a fast rate of redeliveries is worth a finding.
        # One consumer's death returns at most what it held: a worker killed once with 16 unacked is no loop.
        held = max(num(p.messages_unacked) for p in (ctx.at_window_start(q), ctx.previous_queue(q), q) if p is not None)
        stuck_loop = acked <= t.requeue_acked_share * delivered and redelivered >= t.requeue_min_redeliveries \
            and redelivered > held
        if not stuck_loop and redelivered / seconds < t.requeue_min_rate:
            continue
        redeliver, deliver = redelivered / seconds, delivered / seconds
        # Nothing gets through: the queue's consumers can no longer do their work (a loop's first delivery, still
        # in the window, is no redelivery: the share alone would call a slow poison loop a warning until it left).
        critical = stuck_loop or redelivered >= 0.9 * delivered
        fate = requeue_fate(ctx, q)
        dying = _consumers_dying(ctx, q) if not acked else None
        who = consumers_named(ctx, q)
        if not who.identity and dying:  # between two of its consumers' lives: name the ones that died
            who = named(dying)
        evidence = {"redeliver_rate": rounded(redeliver), "deliver_rate": rounded(deliver),
                    "redelivered_in_window": redelivered, "delivered_in_window": delivered, "acked_in_window": acked,
                    "window_seconds": rounded(seconds), "last_seen": last_seen(ctx, q, "redeliver"),
                    "consumers": q.consumers, "queue_type": q.type, "delivery_limit": q.delivery_limit,
                    "next": fate.next, "rabbitmq": ctx.snapshot.overview.rabbitmq_version}
        died = ""
        if dying:
            evidence["consumer_connections_closed"] = len({c.connection for c in dying})
            died = (f" Every consumer connection seen on {q.name} earlier in the window "
                    f"({len({c.connection for c in dying})}) has closed, and none acked: each consumer dies holding "
                    "the message and the broker requeues what a dead connection held (inferred from the polls: its "
                    "consumers' connections come and go).")
        elif not acked and _consumed_unseen(ctx, q, delivered):
            evidence["consumers_seen"] = "none at any poll of the window, while it delivered to consumers"
            died = (f" No poll of the window saw a consumer on {q.name} while it delivered {delivered} messages to "
                    "consumers, none acked: its consumers come and go between polls, each dying (or cancelling) "
                    "holding the message, which the broker requeues (inferred from the polls).")
        yield rule.finding("critical" if critical else "warning", q.vhost, f"queue {q.name}", who, evidence,
                           f"{redelivered} of the {delivered} deliveries on {q.name} in the last {seconds:.0f}s "
                           f"({redeliver:.2g} of {deliver:.2g} per second) were redeliveries, and {acked} were "
                           "acked: consumers reject or nack with requeue, or die holding them, and the same messages "
                           f"come straight back (a poison message, or every consumer failing), the last "
                           f"{evidence['last_seen']}.{died} {fate.says}",
                           fate.remedy)


def _consumed_unseen(ctx: Context, q: Queue, delivered: int) -> bool:
    """Whether the queue delivered to consumers over the window (not basic.get) while every poll of it there is
    (the window's start, the one before, this one) counted none: consumers that live shorter than a poll."""
    gets = num(ctx.over_window(q, "get")) + num(ctx.over_window(q, "get_no_ack"))
    polled = [p for p in (ctx.at_window_start(q), ctx.previous_queue(q), q) if p is not None]
    return delivered > gets and len(polled) >= 2 and all(p.consumers == 0 for p in polled)


def _consumers_dying(ctx: Context, q: Queue) -> list[Consumer]:
    """The queue's consumers seen earlier in the window (the window's start, the poll before) whose connections
    have all closed since; none where one of them lives on, or where the connections were not read."""
    if CONNECTIONS in ctx.snapshot.unreported:
        return []
    earlier = [c for s in (ctx.window_start, ctx.previous) if s is not None for c in s.consumers
               if (c.vhost, c.queue) == (q.vhost, q.name)]
    alive = {c.name for c in ctx.snapshot.connections}
    return [] if not earlier or any(c.connection in alive for c in earlier) else earlier


@dataclass(frozen=True)
class Fate:
    """What a requeue loop comes to on this release and this queue."""

    next: str  # a word for the evidence: loops-forever, dropped-at-limit, dead-lettered-at-limit
    says: str  # the sentence for the finding
    remedy: str


_GIVE_UP = ("Find the message consumers reject; nack without requeue to a dead-letter exchange after a few "
            "attempts (count them in a header)")


def requeue_fate(ctx: Context, q: Queue) -> Fate:
    """Whether the loop goes on forever or the queue's delivery limit ends it, as the broker's release applies
    it: a classic queue (any release) and a queue without a limit never give up a message; a quorum queue with
    one drops it at the limit, or dead-letters it where it has a dead-letter exchange (4.0 gives every quorum
    queue a limit of 20). From 4.3 the limit counts delivery-count, which basic.reject(requeue) raises and
    basic.nack(requeue) does not: then a nacking consumer loops forever, and only the queue's counters tell the
    two apart (messages leaving it without acks)."""
    release = ctx.release
    limit = q.delivery_limit if q.type == "quorum" else None
    if limit is None:
        why = ("classic queues have no delivery limit" if q.type == "classic" else
               "the queue has no delivery limit")
        return Fate("loops-forever", f"Nothing ends the loop: {why}, so each message comes back until a consumer "
                    "acks it or rejects it without requeue.",
                    f"{_GIVE_UP}; or move the queue to a quorum queue with a delivery limit and a dead-letter "
                    f"exchange; see {ACKS_GUIDE}, 'Negative Acknowledgement and Requeuing of Deliveries'.")
    # Not shown (the plugin alone): neither dropped nor kept is claimed.
    dropped = q.dead_letters is False
    where = ("dropped: no dead-letter exchange is set, so they are lost" if dropped else
             f"dead-lettered to {q.dead_letter_target}" if q.dead_letters else
             "dead-lettered or dropped (the source does not show the queue's dead-letter settings)")
    catch = ("Set a dead-letter exchange on the queue (policy key dead-letter-exchange) so that what the limit "
             "removes is kept, then find why consumers reject it" if dropped else
             "Read what reaches the dead-letter exchange and find why consumers reject it")
    if release is not None and release >= (4, 3):
        leaving = _leaving_at_limit(ctx, q)
        if not leaving:
            return Fate("loops-forever", f"On RabbitMQ {release[0]}.{release[1]} the delivery limit of {limit} "
                        "counts delivery-count, which basic.nack(requeue=true) (or AMQP 1.0 'released') does not "
                        "raise: no message is leaving the queue, so its consumers nack, and the loop goes on "
                        "forever." + _delayed(q),
                        f"{_GIVE_UP}; or reject with basic.reject(requeue=true), which counts towards the limit of "
                        f"{limit}; see the RabbitMQ 4.3 release notes on quorum queue delivery limits.")
        return Fate("dropped-at-limit" if dropped else "dead-lettered-at-limit",
                    f"Messages are leaving the queue at its delivery limit ({leaving} in the window, inferred): its "
                    f"consumers reject with requeue, which raises delivery-count, and after {limit} deliveries "
                    f"each message is {where}." + _delayed(q), f"{catch}.")
    return Fate("dropped-at-limit" if dropped else "dead-lettered-at-limit",
                f"The quorum queue's delivery limit ends it: after {limit} deliveries each message is {where}.",
                f"{catch}; see RabbitMQ guide 'Quorum Queues', 'Poison Message Handling'.")


def _leaving_at_limit(ctx: Context, q: Queue) -> int | None:
    """How many messages the queue's delivery limit removed over the window: the nodes' count of quorum queues'
    removals at the limit with the queue's strategy, where the plugin was read (none counted: none left, whatever
    the queue's lagging depth suggests); else what its own counters show leaving it without acks."""
    counted = ctx.dead_lettered_over_window()
    if counted is None:
        return ctx.removed_without_ack(q)
    return sum(sum(nodes.values()) for (reason, queue_type, strategy), nodes in counted.items()
               if reason == "delivery_limit" and queue_type == "quorum"
               and (q.dead_letters is None or (strategy == "disabled") == (not q.dead_letters)))


def _delayed(q: Queue) -> str:
    return (f" Delayed retry holds {q.messages_delayed} messages back before their next delivery."
            if q.messages_delayed else "")


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
    Rule("requeue-loop", "A queue whose redeliveries over the window are requeue_ratio of its deliveries or more: "
         "at any rate from requeue_min_redeliveries where (almost) nothing is acked (requeue_acked_share), else from "
         "requeue_min_rate a second: a poison message, or every consumer requeues or dies holding it (said where "
         "every consumer connection seen in the window closed, or no poll saw a consumer while it delivered to "
         "consumers). Critical where nine in ten deliveries come back.",
         "Find the message consumers reject; nack without requeue to a dead-letter "
         f"exchange after a few attempts; see {ACKS_GUIDE}, 'Negative Acknowledgement and Requeuing of "
         "Deliveries'.", _requeue_loop, needs=(QUEUE_COUNTS,)),
)
