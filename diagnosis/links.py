"""Rules about AMQP 1.0 clients, in AMQP 1.0's terms: what their receivers leave unsettled against their credit,
and the links that settle before anything is known (pre-settled receivers and senders)."""

from __future__ import annotations

from collections.abc import Iterator

from ackscope.model.findings import Finding
from ackscope.model.snapshot import AMQP10_LINKS, Link

from .context import Context, Named, Rule, num, rounded

AMQP_GUIDE = "RabbitMQ guide 'AMQP 1.0'"


def _who(link: Link) -> Named:
    return Named("", link.client or "", link.identity)


def _where(link: Link) -> str:
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
        yield rule.finding("critical" if critical else "warning", link.vhost, _where(link), _who(link),
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
        yield rule.finding("warning" if busy else "info", link.vhost, _where(link), _who(link),
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
        yield rule.finding("warning" if moved else "info", link.vhost, _where(link), _who(link),
                           {"address": link.address, "snd_settle_mode": "settled", "transfers": moved,
                            "publish_rate": rounded(rate), "window_seconds": rounded(ctx.window_seconds),
                            "protocol": "AMQP 1.0"},
                           f"AMQP 1.0 sender '{link.name}' publishes to {link.address} pre-settled: it never hears "
                           "whether the broker took a message (no outcome, the AMQP 0-9-1 equivalent of publishing "
                           "without confirms), so a message the broker could not route or store is lost unseen"
                           + (f"; {moved} transfers in the last {ctx.window_seconds:.0f}s." if moved else
                              "; it has published nothing in the window."))


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
)
