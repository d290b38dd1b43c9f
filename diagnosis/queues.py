"""Rules about queues: durability against what they hold, backlogs nobody consumes, polling."""

from __future__ import annotations

from collections.abc import Iterator

from ackscope.model.findings import Finding
from ackscope.model.snapshot import QUEUE_COUNTS, QUEUE_DURABILITY, QUEUE_PERSISTENT_COUNTS, Queue

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


def _no_consumers(ctx: Context, rule: Rule) -> Iterator[Finding]:
    for q in ctx.snapshot.queues:
        if q.consumers == 0 and num(q.messages_ready) >= ctx.thresholds.no_consumers_backlog \
                and not any(_gets(ctx, q)):  # a queue polled with basic.get is read: queue-polled judges it
            yield rule.finding("warning", q.vhost, f"queue {q.name}", "",
                               {"ready": q.messages_ready, "consumers": 0},
                               f"{q.messages_ready} messages wait in {q.name} and nothing consumes from it.")


def _polled(ctx: Context, rule: Rule) -> Iterator[Finding]:
    t = ctx.thresholds
    for q in ctx.snapshot.queues:
        with_ack, no_ack = _gets(ctx, q)
        if q.consumers != 0 or not (with_ack or no_ack):
            continue
        ready, seconds, gets = num(q.messages_ready), ctx.window_seconds, num(with_ack) + num(no_ack)
        losing, behind = bool(no_ack), ready >= t.no_consumers_backlog
        yield rule.finding("warning" if losing or behind else "info", q.vhost, f"queue {q.name}", "",
                           {"gets_with_ack": with_ack, "gets_without_ack": no_ack, "ready": ready,
                            "get_rate": rounded(gets / seconds), "window_seconds": rounded(seconds)},
                           f"{q.name} has no consumer and is read by polling with basic.get "
                           f"({gets} fetches in the last {seconds:.0f}s)"
                           + (f", {no_ack} of them without ack: a fetched message is gone even if the reader "
                              "dies before handling it" if losing else "")
                           + (f"; {ready} messages wait: a get costs a round trip per message, a consumer "
                              "is pushed them" if behind else "") + ".")


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
    Rule("queue-polled", "A queue without consumers read with basic.get; a warning when gets go without ack "
         "(a fetched message is lost with its reader) or messages pile up.", "Consume with basic.consume, "
         "manual acks and a prefetch limit instead of polling; see RabbitMQ guide 'Consumers', 'Fetching "
         "Individual Messages (\"Pull API\")'.", _polled, needs=(QUEUE_COUNTS,)),
)
