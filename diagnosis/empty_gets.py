"""basic.get answered empty, over and over: a client polling a queue in a loop without pausing. Each get is a round
trip the broker serves for nothing (measured in a public report: 392,668 get-empty in 45 s from one pika client).
queue-polled counts only the gets that returned a message; this counts the ones that did not.

The management API counts get-empty per queue and per channel, but keeps no breakdown of a channel's gets by
queue: the pollers of a queue are the channels of its vhost whose get-empty count grew; one is named only where it
alone polled empty at the storm's rate, as much as the queue counts, and the queue alone stormed: candidates
otherwise. With statistics off only the node's Prometheus plugin
counts them (rabbitmq_global_messages_get_empty_total), per node and queue type: unattributed, no queue named."""

from __future__ import annotations

from collections.abc import Iterator

from ackscope.model.findings import Finding
from ackscope.model.snapshot import QUEUE_COUNTS, QUEUE_PERSISTENT_COUNTS, Channel, Queue

from .context import Context, Rule, few, num, rounded

STAT = "get_empty"


def _pollers(ctx: Context, vhost: str) -> list[tuple[Channel, int]]:
    """The channels of `vhost` whose get-empty count grew over the window, with how much, most first."""
    grown = ((ch, ctx.over_window(ch, STAT)) for ch in ctx.snapshot.channels if ch.vhost == vhost)
    return sorted(((ch, n) for ch, n in grown if n), key=lambda p: (-p[1], p[0].name))


def _per_queue(ctx: Context, rule: Rule, seconds: float) -> Iterator[Finding]:
    limit = ctx.thresholds.get_empty_rate
    storms: dict[str, list[tuple[Queue, int]]] = {}  # vhost: its queues polled empty at a storm's rate
    for q in ctx.snapshot.queues:
        empty = ctx.over_window(q, STAT)
        if empty and empty / seconds >= limit:
            storms.setdefault(q.vhost, []).append((q, empty))
    for vhost, storming in storms.items():
        pollers = _pollers(ctx, vhost)
        # A channel polling empty at a storm's rate itself, in a vhost where one queue storms, is that queue's poller:
        # the broker does not count a channel's gets by queue, and a channel that polled another queue now and then
        # (or one deleted in the window) is no culprit. Where several queues storm, each such channel is a candidate.
        stormers = [(c, n) for c, n in pollers if n / seconds >= limit]
        for q, empty in storming:
            # Named only where one channel alone could have polled all of it: with two such channels, either may
            # have spread its count over other queues.
            named = [c for c, n in stormers] if len(storming) == 1 and len(stormers) == 1 \
                and stormers[0][1] >= 0.9 * empty else []
            fetched = num(ctx.over_window(q, "get")) + num(ctx.over_window(q, "get_no_ack"))
            evidence = {"get_empty": empty, "get_empty_rate": rounded(empty / seconds),
                        "window_seconds": rounded(seconds), "gets_with_a_message": fetched, "ready": q.messages_ready,
                        "consumers": q.consumers}
            if pollers:
                evidence["pollers"] = [f"{c.identity or c.connection_name or c.name} (channel {c.name}): {n} get-empty"
                                       for c, n in pollers[:3]]
                evidence["pollers_from"] = (
                    "the channels of its vhost polling empty at this rate themselves; this is the vhost's only queue "
                    "polled empty at this rate (the broker does not count a channel's gets by queue)" if named else
                    "candidates: the channels of its vhost polled empty over the window (the broker does not count a "
                    "channel's gets by queue)")
            by = (f" by {few(c.identity or c.connection_name or c.name for c in named)}" if named else
                  f"; the channels polling empty in its vhost: {few(c.identity or c.name for c, _ in pollers)} "
                  "(which of them polls this queue is not counted)" if pollers else "")
            yield rule.finding(
                "warning", q.vhost, f"queue {q.name}", named[0] if named else None, evidence,
                f"basic.get on {q.name} came back empty {empty} times in {rounded(seconds)} s "
                f"({rounded(empty / seconds)} a second){by}: a client polls it in a loop without pausing, and the "
                f"broker serves each get for nothing ({fetched} returned a message).")


def _node_wide(ctx: Context, rule: Rule, seconds: float) -> Iterator[Finding]:
    """Where no queue counts its get-empty (statistics off), the nodes' own counters: no queue named."""
    start = ctx.window_start
    before = {(c.node, c.protocol, c.queue_type): c.get_empty for c in start.protocol_counts}
    grown: dict[str, dict[str, int]] = {}  # node: {queue type: get-empty over the window}
    for c in ctx.snapshot.protocol_counts:
        then = before.get((c.node, c.protocol, c.queue_type))
        if c.get_empty is None or then is None:  # not counted at the window's start: not the window's
            continue
        change = c.get_empty - then if c.get_empty >= then else c.get_empty  # lower: its node restarted
        if change > 0:
            by_type = grown.setdefault(c.node, {})
            by_type[c.queue_type] = by_type.get(c.queue_type, 0) + change
    for node, by_type in sorted(grown.items()):
        empty = sum(by_type.values())
        if empty / seconds < ctx.thresholds.get_empty_rate:
            continue
        yield rule.finding(
            "warning", "", f"node {node}", None,
            {"get_empty": empty, "get_empty_rate": rounded(empty / seconds), "window_seconds": rounded(seconds),
             "by_queue_type": dict(sorted(by_type.items())), "queue": "unattributed",
             "counted_by": "the node's Prometheus plugin (rabbitmq_global_messages_get_empty_total): per node and "
                           "queue type, no queue or channel named; the queues' own counts are not read "
                           "(statistics off)"},
            f"basic.get came back empty {empty} times in {rounded(seconds)} s on node {node} "
            f"({rounded(empty / seconds)} a second), on queues the broker does not name (unattributed): a client "
            "polls in a loop without pausing.")


def _storm(ctx: Context, rule: Rule) -> Iterator[Finding]:
    seconds = ctx.window_seconds
    if seconds is None:
        return
    yield from _per_queue(ctx, rule, seconds)
    # Where the management API counts the queues' get-empty, they say where they went: the node's counters would say
    # it again, unnamed (and before a queue's first statistics, wrongly). Its queue counts are read where it reports
    # the persistent messages too; the Prometheus plugin's (statistics off, a large broker) count no get-empty.
    if ctx.snapshot.overview.statistics_disabled or QUEUE_PERSISTENT_COUNTS in ctx.snapshot.unreported:
        yield from _node_wide(ctx, rule, seconds)


RULES = (
    Rule("get-empty-storm", "basic.get answered empty over and over: a client polls a queue in a loop without "
         "pausing, a round trip the broker serves for nothing each time; a warning from get_empty_rate a second over "
         "the window. The queue and its pollers (the channels of its vhost polled empty) where the management API "
         "counts them; per node, unattributed, where only the Prometheus plugin does (statistics off).",
         "Consume with basic.consume (the broker pushes messages as they arrive, under a prefetch limit) instead of "
         "polling with basic.get; where a client must poll, have it wait before the next get when one comes back "
         "empty; see RabbitMQ guide 'Consumers', 'Fetching Individual Messages (\"Pull API\")'.", _storm,
         needs=(QUEUE_COUNTS,)),
)
