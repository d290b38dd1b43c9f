"""Rules about AMQP 1.0 clients, in AMQP 1.0's terms: what their receivers leave unsettled against their credit,
the links that settle before anything is known (pre-settled receivers and senders), and the outcomes receivers
settle with where the broker counts them (released or modified: redelivered; rejected: dead-lettered or dropped)."""

from __future__ import annotations

from collections.abc import Iterator

from ackscope.model.findings import Finding
from ackscope.model.snapshot import AMQP10_LINKS, DEAD_LETTER_COUNTS, Link

from .context import Context, Named, Rule, few, num, rounded

AMQP_GUIDE = "RabbitMQ guide 'AMQP 1.0'"


def link_culprit(link: Link) -> Named:
    """Who a link finding names: the link's client (a link has no connection name of its own)."""
    return Named("", link.client or "", link.identity)


def link_object(link: Link) -> str:
    return f"link '{link.name}' (session {link.session}) of connection {link.connection}"


def _unsettled_unbounded(ctx: Context, rule: Rule) -> Iterator[Finding]:
    for link in ctx.snapshot.links:
        held = link.unsettled
        if link.role != "receiver" or link.settled is not False or held is None or link.credit is None:
            continue
        # A receiver that grants credit only as it settles holds at most the credit it granted; one that holds more
        # grants credit as transfers arrive, and nothing bounds what it holds.
        if held <= link.credit:
            continue
        critical = held >= ctx.thresholds.unlimited_prefetch_unacked_critical
        yield rule.finding("critical" if critical else "warning", link.vhost, link_object(link), link_culprit(link),
                           {"queue": link.queue, "unsettled": held, "credit": link.credit,
                            "delivery_count": link.delivery_count, "protocol": "AMQP 1.0",
                            "unsettled_counted": "per session by the broker; this link is the session's only "
                                                 "receiver"},
                           f"AMQP 1.0 receiver '{link.name}' on queue {link.queue} holds {held} unsettled deliveries "
                           f"against a link credit of {link.credit}: the client grants credit again as transfers "
                           "arrive, not as it settles them, so credit bounds nothing and the broker sends it every "
                           "message it can (the AMQP 0-9-1 equivalent is a manual-ack consumer without prefetch).")


def _presettled_receiver(ctx: Context, rule: Rule) -> Iterator[Finding]:
    t = ctx.thresholds
    for link in ctx.snapshot.links:
        if link.role != "receiver" or link.settled is not True:
            continue
        q = ctx.queue(link.vhost, link.queue or "")
        ready = num(q.messages_ready) if q is not None and not q.stream else 0
        moved = ctx.link_transfers(link)
        rate = None if moved is None else moved / ctx.window_seconds
        busy = ready >= t.auto_ack_backlog or (rate or 0) >= t.auto_ack_delivery_rate
        yield rule.finding("warning" if busy else "info", link.vhost, link_object(link), link_culprit(link),
                           {"queue": link.queue, "send_settled": True, "ready": ready, "delivery_rate": rounded(rate),
                            "window_seconds": rounded(ctx.window_seconds), "protocol": "AMQP 1.0"},
                           f"AMQP 1.0 receiver '{link.name}' on queue {link.queue} takes its deliveries pre-settled "
                           "(at-most-once, the analog of automatic acknowledgement): a message counts as delivered "
                           "once sent and is lost if the client fails before handling it.")


def _presettled_sender(ctx: Context, rule: Rule) -> Iterator[Finding]:
    for link in ctx.snapshot.links:
        if link.role != "sender" or link.settled is not True:
            continue
        moved = ctx.link_transfers(link)
        rate = None if moved is None else moved / ctx.window_seconds
        yield rule.finding("warning" if moved else "info", link.vhost, link_object(link), link_culprit(link),
                           {"address": link.address, "snd_settle_mode": "settled", "transfers": moved,
                            "publish_rate": rounded(rate), "window_seconds": rounded(ctx.window_seconds),
                            "protocol": "AMQP 1.0"},
                           f"AMQP 1.0 sender '{link.name}' publishes to {link.address} pre-settled: it never hears "
                           "whether the broker took a message (no outcome, the AMQP 0-9-1 equivalent of publishing "
                           "without confirms), so a message the broker could not route or store is lost unseen"
                           + (f"; {moved} transfers in the last {ctx.window_seconds:.0f}s." if moved else
                              "; it has published nothing in the window."))


def _receivers_of(ctx: Context, queue_type: str) -> list[Link]:
    """The AMQP 1.0 receivers that settle (not pre-settled) on queues of `queue_type`."""
    return [k for k in ctx.snapshot.links if k.role == "receiver" and k.settled is not True
            and (q := ctx.queue(k.vhost, k.queue or "")) is not None and q.type == queue_type]


def _named(receivers: list[Link]) -> Named:
    return Named("", few({k.client for k in receivers if k.client}), few({k.identity for k in receivers}))


def _where_counted(ctx: Context, queue_type: str, receivers: list[Link]) -> tuple[str, str, dict]:
    """(vhost, object, evidence) of a finding from counts the broker keeps per node and queue type: the one queue of
    the type AMQP 1.0 receivers consume from, where there is one; else all of that type."""
    queues = sorted({(k.vhost, k.queue or "") for k in receivers})
    vhost = queues[0][0] if len({v for v, _ in queues}) == 1 else ""
    what = f"queue {queues[0][1]}" if len(queues) == 1 else f"AMQP 1.0 receivers of {queue_type} queues"
    known = AMQP10_LINKS not in ctx.snapshot.unreported
    return vhost, what, {
        "queues": [q for _, q in queues] if known else None,
        "attribution": "inferred: the broker counts AMQP 1.0 deliveries per node and queue type, not per queue; "
                       + ("these are the AMQP 1.0 receivers of queues of that type" if known else
                          "this release does not list AMQP 1.0 links, so the receivers are not named")}


def _fate(ctx: Context, queue_type: str) -> str:
    """What releasing a delivery again and again comes to, by release and queue type."""
    if queue_type != "quorum":
        return f"{queue_type.capitalize()} queues have no delivery limit: nothing ends the loop."
    if ctx.release is not None and ctx.release >= (4, 3):
        return ("From RabbitMQ 4.3 'released' does not count towards a quorum queue's delivery limit ('modified' "
                "with delivery-failed does): a receiver that releases loops forever.")
    return ("Each return counts towards the quorum queue's delivery limit (20 by default from RabbitMQ 4.0): past it "
            "the message is dropped, or dead-lettered where the queue has a dead-letter exchange.")


def _requeue_loop(ctx: Context, rule: Rule) -> Iterator[Finding]:
    t, grown = ctx.thresholds, ctx.deliveries_over_window("amqp10")
    for queue_type, (delivered, redelivered) in sorted((grown or {}).items()):
        seconds = ctx.window_seconds
        # A loop is a share, whatever the rate (a poison message whose receiver dies each time loops slowly): where
        # nearly every delivery comes back, a few redeliveries make one; a smaller share needs a fast rate. The
        # nodes count no AMQP 1.0 settlements, so "nearly every" stands in for "nothing accepted".
        looping = redelivered >= 0.9 * delivered and redelivered >= t.requeue_min_redeliveries
        if redelivered < t.requeue_ratio * delivered or not looping and redelivered / seconds < t.requeue_min_rate:
            continue
        receivers = _receivers_of(ctx, queue_type)
        if AMQP10_LINKS not in ctx.snapshot.unreported and not receivers:
            continue  # the node's count is of receivers this poll does not see: another vhost's, or one not yet listed
        vhost, what, evidence = _where_counted(ctx, queue_type, receivers)
        yield rule.finding("critical" if redelivered >= 0.9 * delivered else "warning", vhost, what, _named(receivers),
                           {"protocol": "AMQP 1.0", "queue_type": queue_type,
                            "redeliver_rate": rounded(redelivered / seconds),
                            "deliver_rate": rounded(delivered / seconds), "window_seconds": rounded(seconds),
                            "rabbitmq": ctx.snapshot.overview.rabbitmq_version, **evidence},
                           f"{redelivered / seconds:.1f} of {delivered / seconds:.1f} AMQP 1.0 deliveries per second "
                           f"from {queue_type} queues are redeliveries: receivers settle them 'released' or "
                           "'modified', and the same messages come straight back (a poison message, or every "
                           f"receiver failing). {_fate(ctx, queue_type)}")


def _rejects(ctx: Context, rule: Rule) -> Iterator[Finding]:
    grown, counted = ctx.deliveries_over_window("amqp10"), ctx.dead_lettered_over_window()
    for (reason, queue_type, strategy), nodes in sorted((counted or {}).items()):
        receivers = _receivers_of(ctx, queue_type)
        # Rejected where AMQP 1.0 receivers took deliveries from queues of that type in the window.
        if reason != "rejected" or not (grown or {}).get(queue_type, (0, 0))[0] or (
                AMQP10_LINKS not in ctx.snapshot.unreported and not receivers):
            continue
        many, dropped = sum(nodes.values()), strategy == "disabled"
        vhost, what, evidence = _where_counted(ctx, queue_type, receivers)
        yield rule.finding("warning" if dropped else "info", vhost, what, _named(receivers),
                           {"protocol": "AMQP 1.0", "queue_type": queue_type, "outcome": "rejected",
                            "dropped" if dropped else "dead_lettered": many, "nodes": sorted(nodes),
                            "window_seconds": rounded(ctx.window_seconds), **evidence},
                           f"in the last {ctx.window_seconds:.0f}s {many} messages of {queue_type} queues were "
                           "settled 'rejected' while AMQP 1.0 receivers consumed them, and "
                           + ("dropped: the queue has no dead-letter exchange to catch them." if dropped else
                              "dead-lettered."))


RULES: tuple[Rule, ...] = (
    Rule("receiver-unsettled-unbounded", "An AMQP 1.0 receiver holding more unsettled deliveries than its link "
         "credit: it grants credit as transfers arrive, so nothing bounds what it holds; critical when it holds "
         "many.", "Grant link credit only as deliveries are settled (a fixed window: the client's credit of N "
         "replenished on settlement), or settle promptly; see " + AMQP_GUIDE + ", 'Flow Control'.",
         _unsettled_unbounded, needs=(AMQP10_LINKS,)),
    Rule("receiver-presettled", "An AMQP 1.0 receiver whose deliveries are pre-settled (at-most-once, the analog of "
         "auto-ack); a warning when its queue has a backlog or a high delivery rate.",
         "Attach the receiver with snd-settle-mode unsettled and settle (accept) each message once handled, where "
         f"losing a message matters; see {AMQP_GUIDE}, 'Settlement'.", _presettled_receiver, needs=(AMQP10_LINKS,)),
    Rule("sender-presettled", "An AMQP 1.0 sender publishing pre-settled (snd-settle-mode settled): no outcome, no "
         "confirm; a warning while it publishes.", "Publish unsettled and wait for each message's outcome "
         f"(accepted, rejected, released) before counting it sent; see {AMQP_GUIDE}, 'Settlement'.",
         _presettled_sender, needs=(AMQP10_LINKS,)),
    Rule("receiver-requeue-loop", "AMQP 1.0 deliveries of a queue type coming back (outcome released or modified) "
         "at a rate comparable to the deliveries, over the window, from the nodes' counters per protocol and queue "
         "type; the receivers of such queues are named (inferred).", "Find the message receivers give back; settle "
         f"it 'rejected' (dead-lettered where the queue has a dead-letter exchange) after a few attempts; see "
         f"{AMQP_GUIDE}, 'Outcomes', and RabbitMQ guide 'Quorum Queues', 'Poison Message Handling'.", _requeue_loop,
         needs=(DEAD_LETTER_COUNTS,)),
    Rule("receiver-rejects", "Messages settled 'rejected' over the window on queues of a type AMQP 1.0 receivers "
         "consume from: a warning where no dead-letter exchange catches them (dropped), info where dead-lettered.",
         "Set a dead-letter exchange (policy key dead-letter-exchange) where rejected messages matter, and find why "
         f"receivers reject them; see {AMQP_GUIDE}, 'Outcomes'.", _rejects, needs=(DEAD_LETTER_COUNTS,)),
)
