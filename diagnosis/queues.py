"""Rules about queues: durability against what they hold, backlogs nobody consumes, polling."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from ackscope.core.durations import describe
from ackscope.model.findings import STAMPED, Finding
from ackscope.model.snapshot import (DEAD_LETTER_COUNTS, QUEUE_COUNTS, QUEUE_DEAD_LETTERED_HELD, QUEUE_DURABILITY,
                                     QUEUE_PERSISTENT_COUNTS, Queue)

from .context import RELIABILITY_GUIDE, Context, Rule, consumers_named, num, rounded


def _transient_in_durable(ctx: Context, rule: Rule) -> Iterator[Finding]:
    for q in ctx.snapshot.queues:
        if q.durable is not True or q.type != "classic" or q.messages_persistent is None:
            continue
        total = num(q.messages_ready) + num(q.messages_unacked)
        transient = total - q.messages_persistent
        if transient > 0:
            yield rule.finding("warning", q.vhost, f"queue {q.name}", consumers_named(ctx, q),
                               {"messages": total, "persistent": q.messages_persistent, "transient": transient},
                               f"durable queue {q.name} holds {transient} transient messages: the queue survives "
                               "a broker restart, they do not.")


def _non_durable_backlog(ctx: Context, rule: Rule) -> Iterator[Finding]:
    for q in ctx.snapshot.queues:
        total = num(q.messages_ready) + num(q.messages_unacked)
        if q.durable is False and total >= ctx.thresholds.non_durable_backlog:
            # An exclusive or auto-delete queue dies with its consumer by design (a framework's reply or
            # event queue): losing it on a restart is what it is for, so info.
            temporary = q.exclusive is True or q.auto_delete is True
            yield rule.finding("info" if temporary else "warning", q.vhost, f"queue {q.name}", consumers_named(ctx, q),
                               {"messages": total, "durable": False, "exclusive": q.exclusive},
                               f"non-durable queue {q.name} holds {total} messages: a broker restart deletes the "
                               "queue and all of them.")


def _gets(ctx: Context, q: Queue) -> tuple[int | None, int | None]:
    """basic.get fetches from the queue over the window: with manual ack, and with no ack."""
    return ctx.over_window(q, "get"), ctx.over_window(q, "get_no_ack")


def _age(ctx: Context, q: Queue) -> dict:
    """The evidence of how long the queue's oldest message has waited, and where that comes from."""
    oldest = ctx.oldest_message(q)
    if oldest is None:
        return {}
    return {"oldest_message_age_s": rounded(oldest.age_seconds),
            "age_from": "the head message's timestamp property (its publisher's clock)" if oldest.source == STAMPED
            else "inferred: a lower bound, ready messages no delivery has reached since (assumes messages leave "
                 "only by delivery)"}


def _no_consumers(ctx: Context, rule: Rule) -> Iterator[Finding]:
    for q in ctx.snapshot.queues:
        # A stream's messages_ready is what it retains, read again by whoever subscribes: no backlog.
        if not q.stream and q.consumers == 0 and num(q.messages_ready) >= ctx.thresholds.no_consumers_backlog \
                and not any(_gets(ctx, q)):  # a queue polled with basic.get is read: queue-polled judges it
            yield rule.finding("warning", q.vhost, f"queue {q.name}", None,
                               {"ready": q.messages_ready, "consumers": 0, **_age(ctx, q)},
                               f"{q.messages_ready} messages wait in {q.name} and nothing consumes from it.")


def _waiting(ctx: Context, rule: Rule) -> Iterator[Finding]:
    limit = ctx.thresholds.oldest_message_seconds
    for q in ctx.snapshot.queues:
        oldest = ctx.oldest_message(q)
        if q.stream or not num(q.consumers) or oldest is None or oldest.age_seconds < limit:
            continue  # nobody consuming is no-consumers-backlog's
        at_least = "" if oldest.source == STAMPED else "at least "
        yield rule.finding(
            "warning", q.vhost, f"queue {q.name}", consumers_named(ctx, q),
            {"ready": q.messages_ready, "unacked": q.messages_unacked, "consumers": q.consumers,
             "delivered_over_window": ctx.over_window(q, "deliver_get"), **_age(ctx, q)},
            f"the oldest message of {q.name} has waited {at_least}{describe(oldest.age_seconds)} though "
            f"{q.consumers} consumer(s) are attached: they take nothing from it, or less than arrives.")


def _dead_lettering_stuck(ctx: Context, rule: Rule) -> Iterator[Finding]:
    for q in ctx.snapshot.queues:
        # Held at the window's start (or, where it held none yet then, at the poll before) and no fewer now: the
        # target has confirmed none of them since.
        then = ctx.at_window_start(q)
        if then is None or not then.messages_dlx:
            then = ctx.previous_queue(q)
        held, before = q.messages_dlx, then.messages_dlx if then is not None else None
        if not held or not before or held < before or then is q:
            continue
        limit = q.max_length
        total = num(q.messages_ready) + num(q.messages_unacked) + held
        full = limit is not None and total >= 0.9 * limit
        exchange = q.dead_letter_exchange or "the default exchange"
        route = f" with routing key {q.dead_letter_routing_key!r}" if q.dead_letter_routing_key else ""
        yield rule.finding(
            "critical" if full else "warning", q.vhost, f"queue {q.name}", consumers_named(ctx, q),
            {"dead_lettered_held": held, "held_earlier": before, "dead_letter_strategy": q.dead_letter_strategy,
             "dead_letter_exchange": q.dead_letter_exchange, "dead_letter_routing_key": q.dead_letter_routing_key,
             "messages": total, "max_length": limit,
             "why": "not reported by the broker: the exchange is missing, routes nowhere, or its queue refuses "
                    "(reject-publish, its own length limit); the node's log says which once (\"Cannot forward any "
                    "dead-letter messages\")"},
            f"quorum queue {q.name} holds {held} dead-lettered messages that {exchange}{route} has not confirmed "
            f"({before} earlier in the window): at-least-once dead-lettering stopped, and they stay in the queue"
            + (f", which is near its length limit of {limit}: publishers are refused next." if full else "."))


def _polled(ctx: Context, rule: Rule) -> Iterator[Finding]:
    t = ctx.thresholds
    for q in ctx.snapshot.queues:
        with_ack, no_ack = _gets(ctx, q)
        if q.consumers != 0 or not (with_ack or no_ack):
            continue
        ready, seconds, gets = num(q.messages_ready), ctx.window_seconds, num(with_ack) + num(no_ack)
        losing, behind = bool(no_ack), ready >= t.no_consumers_backlog
        yield rule.finding("warning" if losing or behind else "info", q.vhost, f"queue {q.name}", None,
                           {"gets_with_ack": with_ack, "gets_without_ack": no_ack, "ready": ready,
                            "get_rate": rounded(gets / seconds), "window_seconds": rounded(seconds)},
                           f"{q.name} has no consumer and is read by polling with basic.get "
                           f"({gets} fetches in the last {seconds:.0f}s)"
                           + (f", {no_ack} of them without ack: a fetched message is gone even if the reader "
                              "dies before handling it" if losing else "")
                           + (f"; {ready} messages wait: a get costs a round trip per message, a consumer "
                              "is pushed them" if behind else "") + ".")



# -- messages the broker gives up on ---------------------------------------------------------------------
@dataclass(frozen=True)
class Removal:
    """Messages one reason removed over the window on one queue: from the nodes' counters (per node, queue type
    and strategy, no queue named), attributed to the queue its own counters show them leaving."""

    queue: Queue
    reason: str  # delivery_limit | expired | maxlen | rejected
    dropped: bool  # no dead-letter exchange: gone
    counted: int | None  # the nodes' count of the reason and strategy over the window; None without it
    nodes: tuple[str, ...]  # where they were counted
    left: int  # what left the queue without acks over the window (removed_without_ack)
    shared_with: int  # other queues the same count may belong to

    def evidence(self, ctx: Context) -> dict:
        q = self.queue
        how = "dropped" if self.dropped else "dead_lettered"
        counted = {f"{how}_on_nodes": self.counted, "nodes": list(self.nodes)} if self.counted is not None else {}
        return {"reason": self.reason, **counted, "left_queue_without_ack": self.left,
                "window_seconds": rounded(ctx.window_seconds), "queue_type": q.type,
                "delivery_limit": q.delivery_limit, "dead_letter_exchange": q.dead_letter_exchange or None,
                "redelivered": ctx.over_window(q, "redeliver"),
                "attribution": "inferred: the broker counts " + (
                    f"these per node, not per queue; this queue's counters show {self.left} messages leaving it "
                    "without acks" + (f", and {self.shared_with} other queue(s) could share the count"
                                      if self.shared_with else "")
                    if self.counted is not None else
                    f"no removal per queue, and its Prometheus plugin was not read; this queue's counters show "
                    f"{self.left} messages leaving it without acks after redeliveries")}


def removals(ctx: Context, reasons: tuple[str, ...]) -> Iterator[Removal]:
    """Each queue that messages left for one of `reasons` over the window. With the nodes' dead-letter counters,
    a reason's count (queue type, strategy) goes to the queues of that type and strategy whose counters show
    messages leaving them without acks (for the delivery limit: quorum queues with a limit that redelivered).
    Without the counters, only the delivery limit is inferred: from a limited quorum queue that redelivered and
    lost messages without acks."""
    counted = ctx.dead_lettered_over_window()
    for reason in reasons:
        groups = {(t, s): nodes for (r, t, s), nodes in (counted or {}).items() if r == reason}
        if counted is None:
            if reason != "delivery_limit":
                continue
            groups = {("quorum", None): {}}
        for (queue_type, strategy), nodes in sorted(groups.items(), key=lambda g: (g[0][0], g[0][1] or "")):
            dropped = None if strategy is None else strategy == "disabled"
            found = [(q, left) for q in ctx.snapshot.queues
                     if q.type == queue_type and _may_remove(ctx, q, reason, dropped)
                     for left in (ctx.removed_without_ack(q),) if left]
            for q, left in found:
                yield Removal(q, reason, not q.dead_letter_exchange if dropped is None else dropped,
                              sum(nodes.values()) if counted is not None else None, tuple(sorted(nodes)), left,
                              len(found) - 1)


def _may_remove(ctx: Context, q: Queue, reason: str, dropped: bool | None) -> bool:
    """Whether the queue can be where the nodes counted `reason`: its dead-lettering matches the strategy
    counted (unknown matches any), and for the delivery limit it has one and redelivered."""
    if dropped is not None and q.dead_letter_exchange is not None and (q.dead_letter_exchange == "") != dropped:
        return False
    return reason != "delivery_limit" or (q.delivery_limit is not None and bool(ctx.over_window(q, "redeliver")))


def _delivery_limit(ctx: Context, rule: Rule) -> Iterator[Finding]:
    for r in removals(ctx, ("delivery_limit",)):
        q = r.queue
        many = r.counted if r.counted is not None and not r.shared_with else r.left
        what = ("dropped: the queue has no dead-letter exchange, so messages the broker had confirmed are gone"
                if r.dropped else f"dead-lettered to exchange '{q.dead_letter_exchange}'")
        yield rule.finding("critical" if r.dropped else "warning", q.vhost, f"queue {q.name}", consumers_named(ctx, q),
                           r.evidence(ctx),
                           f"in the last {ctx.window_seconds:.0f}s about {many} messages reached the delivery limit "
                           f"of quorum queue {q.name} ({q.delivery_limit} deliveries) and were {what}. Its "
                           "consumers return them (reject or nack with requeue) until the broker gives up on them.",
                           None if r.dropped else "Read what reaches the dead-letter exchange and find why the "
                           "consumers return these messages; see RabbitMQ guide 'Quorum Queues', 'Poison Message "
                           "Handling'.")


# Why a reason removes messages, for the finding's sentence; and how grave each is without a dead-letter exchange.
_WHY = {"expired": "expired (their TTL passed)", "maxlen": "pushed out of the full queue (its length limit, "
        "overflow drop-head)", "rejected": "rejected by consumers without requeue"}
_GRAVITY = {"expired": "info", "maxlen": "warning", "rejected": "warning"}


def _dropped(ctx: Context, rule: Rule) -> Iterator[Finding]:
    for r in removals(ctx, tuple(_WHY)):
        if not r.dropped:
            continue
        q = r.queue
        many = r.counted if not r.shared_with else r.left
        yield rule.finding(_GRAVITY[r.reason], q.vhost, f"queue {q.name}", consumers_named(ctx, q), r.evidence(ctx),
                           f"in the last {ctx.window_seconds:.0f}s about {many} messages of {q.name} were "
                           f"{_WHY[r.reason]} and dropped: the queue has no dead-letter exchange to catch them."
                           + (" A TTL drops by design; if these messages matter, dead-letter them."
                              if r.reason == "expired" else ""))


RULES: tuple[Rule, ...] = (
    Rule("transient-in-durable-queue", "A durable classic queue holding non-persistent messages (lost on "
         "restart).", "Publish with delivery mode 2 (persistent) where the messages must survive a restart; see "
         f"{RELIABILITY_GUIDE}, 'Queue Durability and Message Persistence'.",
         _transient_in_durable, needs=(QUEUE_COUNTS, QUEUE_PERSISTENT_COUNTS, QUEUE_DURABILITY)),
    Rule("non-durable-queue-backlog", "A non-durable queue holding messages; info for an exclusive or auto-delete "
         "queue.", "Declare the queue durable if "
         f"its messages must survive a restart; see {RELIABILITY_GUIDE}, 'Queue Durability'.", _non_durable_backlog,
         needs=(QUEUE_COUNTS, QUEUE_DURABILITY)),
    Rule("no-consumers-backlog", "Ready messages and no consumer.", "Start or fix the consumers, or set a TTL or "
         "length limit; see RabbitMQ guide 'Queues', 'Queue Length Limit' and 'TTL'.", _no_consumers,
         needs=(QUEUE_COUNTS,)),
    Rule("messages-waiting", "A queue with consumers whose oldest message has waited longer than "
         "oldest_message_seconds (300): from the head message's timestamp where publishers stamp it, else a lower "
         "bound from the queue's history (inferred). The stuck queue a depth threshold misses.",
         "Find why the consumers take nothing from it: stalled or at their prefetch (consumer-stalled, "
         "unacked-at-prefetch), fewer or slower than the rate in (add consumers), or a single active consumer "
         "holding it; see RabbitMQ guide 'Consumers'.", _waiting, needs=(QUEUE_COUNTS,)),
    Rule("dead-lettering-stuck", "A quorum queue dead-lettering at-least-once whose dead-lettered messages no "
         "target confirms over the window (messages_dlx held, not falling); critical near its length limit.",
         "Make the dead-letter target take them: create the dead-letter exchange, bind a queue for the routing "
         "key, or free the target queue (its length limit with reject-publish); see RabbitMQ guide 'Dead "
         "Lettering', 'At-Least-Once Dead Lettering'.", _dead_lettering_stuck,
         needs=(QUEUE_COUNTS, QUEUE_DEAD_LETTERED_HELD)),
    Rule("queue-polled", "A queue without consumers read with basic.get; a warning when gets go without ack "
         "(a fetched message is lost with its reader) or messages pile up.", "Consume with basic.consume, "
         "manual acks and a prefetch limit instead of polling; see RabbitMQ guide 'Consumers', 'Fetching "
         "Individual Messages (\"Pull API\")'.", _polled, needs=(QUEUE_COUNTS,)),
    Rule("delivery-limit-reached", "Messages that reached a quorum queue's delivery limit over the window: "
         "critical when dropped (no dead-letter exchange: confirmed messages are gone, RabbitMQ 4's default limit "
         "of 20 included), a warning when dead-lettered. From the nodes' dead-letter counters where the "
         "Prometheus plugin is read, attributed to the queue by its own counters (inferred).",
         "Set a dead-letter exchange on the queue (policy key dead-letter-exchange) so what the limit removes is "
         "kept, and find why consumers return these messages; see RabbitMQ guide 'Quorum Queues', 'Poison "
         "Message Handling'.", _delivery_limit, needs=(QUEUE_COUNTS,)),
    Rule("messages-dropped", "Messages a queue without a dead-letter exchange dropped over the window because "
         "they expired (info: a TTL drops by design), overflowed its length limit or were rejected without "
         "requeue (warning), from the nodes' dead-letter counters, attributed to the queue (inferred).",
         "Set a dead-letter exchange where these messages matter (policy key dead-letter-exchange); raise the "
         "length limit or use overflow reject-publish so publishers are told; see RabbitMQ guide 'Dead Letter "
         "Exchanges'.", _dropped, needs=(QUEUE_COUNTS, DEAD_LETTER_COUNTS)),
)
