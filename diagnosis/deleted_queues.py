"""Queues whose messages die with the queue: an auto-delete or exclusive queue holding messages (its last consumer
or its connection going deletes them), and a queue gone, or declared again, that held messages at the last poll that
listed it.

The broker counts nothing of what a deleted queue held: the loss is read from two polls, the queue holding N at one
and gone at the next, or declared again in between, and said for the window (diagnosis.departures). A queue declared
again under its name keeps its counters in the management API (measured on 3.10.8 and 4.3.6: publish, deliver_get
and redeliver as before the deletion), and is listed without statistics until its first emission (about 3 s): what
says it is new is an auto-delete queue that had a consumer at the last poll and counts none now (the broker deletes
it when its last consumer goes), or is listed without statistics. What its consumers took between the two polls is
not known: N is what it held then, at most what went with it. A queue deleted by an operator on purpose is a loss all
the same: the finding says what it held, not who deleted it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from ackscope.core.durations import describe
from ackscope.model.findings import Finding
from ackscope.model.snapshot import QUEUE_COUNTS, Queue

from .context import Context, Rule, consumers_named, few, named, num, rounded
from .departures import DepartedQueue, held_messages, queues_departed

def _temporary(q: Queue) -> str | None:
    """What deletes the queue on its own: its last consumer leaving, or its connection closing; None: neither."""
    if q.exclusive:
        return "exclusive: deleted when its connection closes"
    if q.auto_delete:
        return "auto-delete: deleted when its last consumer goes (cancels, or its channel or connection closes)"
    return None


def _kept_across_restart(q: Queue) -> bool:
    """A durable queue keeps its persistent messages across a restart; an exclusive one is transient whatever its
    durable flag says."""
    return bool(q.durable) and not q.exclusive


def _requeued(ctx: Context, q: Queue) -> int:
    return num(ctx.over_window(q, "redeliver"))


def _temporary_holding(ctx: Context, rule: Rule) -> Iterator[Finding]:
    for q in ctx.snapshot.queues:
        how = _temporary(q)
        held = held_messages(q)
        # A stream is neither auto-delete nor exclusive; an empty reply queue is what such queues are for.
        if how is None or not held or q.stream:
            continue
        persistent = num(q.messages_persistent)
        requeued = _requeued(ctx, q)
        # Persistent messages in a durable queue were meant to outlive a restart, and die with a consumer instead;
        # messages its consumers give back are not being processed, and are there when the consumer leaves.
        risky = (_kept_across_restart(q) and persistent > 0) or requeued > 0
        yield rule.finding(
            "warning" if risky else "info", q.vhost, f"queue {q.name}", consumers_named(ctx, q),
            {"messages": held, "ready": q.messages_ready, "unacked": q.messages_unacked,
             "persistent": q.messages_persistent, "durable": q.durable, "auto_delete": q.auto_delete,
             "exclusive": q.exclusive, "consumers": q.consumers, "requeued_over_window": requeued},
            f"{'durable ' if q.durable else ''}queue {q.name} is {how}, and holds {held} messages"
            + (f" ({persistent} persistent)" if persistent else "")
            + (f", {requeued} of them given back by its consumers over the window" if requeued else "")
            + ": they are deleted with it.")


def _deleted_holding(ctx: Context, rule: Rule) -> Iterator[Finding]:
    for d in _deleted_over_window(ctx).values():
        before, again = d.record, d.again
        held = held_messages(before)
        if again is None:
            what = "was deleted" + (" with its vhost" if d.with_vhost else "") + (
                f" (it was {_temporary(before)})" if _temporary(before) else "")
        else:
            counts = "no consumer" if again.consumers == 0 else "no statistics yet"
            what = (f"was deleted when its last consumer went (it was auto-delete), and declared again: it holds "
                    f"{held_messages(again)} and counts {counts}")
        persistent = num(before.messages_persistent)
        # Persistent messages in a durable queue are what the broker confirmed as kept even across a restart: their
        # loss is the loss of confirmed messages. Others the publisher let go with a restart, not with a deletion.
        kept = _kept_across_restart(before) and persistent > 0
        requeued = num(ctx.over_window(before, "redeliver"))
        ago = ctx.snapshot.taken_at - d.last_seen
        evidence = {"messages_at_last_poll": held, "ready": before.messages_ready, "unacked": before.messages_unacked,
                    "persistent": before.messages_persistent, "durable": before.durable,
                    "auto_delete": before.auto_delete, "exclusive": before.exclusive,
                    "consumers_at_last_poll": before.consumers,
                    "last_poll_seconds_ago": rounded(ago),
                    "lost": f"up to {held}: what its consumers took between the polls is not counted (inferred)"}
        if d.consumers:
            evidence["consumers_named"] = few(c.identity or c.connection_name or c.channel for c in d.consumers)
        if d.consumers_at < d.last_seen:
            back = describe(round(d.last_seen - d.consumers_at))
            evidence["consumers_from"] = (f"an earlier poll's consumer list, {back} before the last poll that listed "
                                          "the queue (that poll listed none for it)")
        if requeued:
            evidence["requeued_before"] = requeued
        yield rule.finding(
            "critical" if kept else "warning", before.vhost, f"queue {before.name}",
            named(d.consumers) if d.consumers else None, evidence,
            f"queue {before.name} held {held} message(s)"
            + (f" ({persistent} persistent, in a durable queue)" if kept else "")
            + f" at the last poll that listed it, {describe(round(ago))} before this one, and {what}. What it still "
            f"held was deleted with it: up to {held}, which the broker counts nowhere"
            + (f"; its consumers then: {evidence['consumers_named']}" if d.consumers else "") + ".")


def _deleted_over_window(ctx: Context) -> Mapping[tuple[str, str], DepartedQueue]:
    """The queues deleted holding messages over the window: as the exporter remembered them from poll to poll, or,
    without that memory, between the poll before and this one."""
    if ctx.departed is not None:
        return ctx.departed.queues
    return queues_departed(ctx.previous, ctx.snapshot, ctx.earlier)


RULES = (
    Rule("temporary-queue-holding", "An auto-delete or exclusive queue holding messages: they are deleted with it when "
         "its last consumer or its connection goes. Info; a warning where they are persistent in a durable queue, or "
         "its consumers gave messages back over the window (they are not being processed).",
         "Keep messages that matter in a queue that outlives its consumers (durable, not auto-delete or exclusive); "
         "leave temporary queues to replies and events a lost consumer no longer needs; see RabbitMQ guide "
         "'Queues', 'Temporary Queues'.", _temporary_holding, needs=(QUEUE_COUNTS,)),
    Rule("queue-deleted-holding", "A queue that held messages at a poll and is gone at the next, or, auto-delete, was "
         "deleted as its last consumer went and declared again holding fewer: deleted with what it held (up to that "
         "many: what was consumed between the polls is not counted). Critical where they were persistent in a durable "
         "queue (messages the broker confirmed as kept), a warning otherwise. Judged from two polls, and said for the "
         "window.",
         "Find who deletes it (an auto-delete queue's last consumer cancelling, an exclusive queue's connection "
         "closing, a client or an operator deleting it, its vhost deleted) and keep messages that matter in a durable "
         "queue nothing deletes while it holds them; see RabbitMQ guide 'Queues', 'Temporary Queues'.",
         _deleted_holding, needs=(QUEUE_COUNTS,)),
)
