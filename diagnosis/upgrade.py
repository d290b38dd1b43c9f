"""What moving today's broker to a target release changes, per client and object: each change of the table
(release_changes.CHANGES) between the broker's release and the target, predicted from one snapshot with its
policies and deprecated features in use. Pure: the same snapshot and target give the same prediction."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ackscope.model.events import BROKER_LOG, CONSUMER_TIMEOUT, Breaks, BrokerEvent
from ackscope.model.findings import Finding, NotEvaluated, Outlook, worst_first
from ackscope.model.snapshot import CHANNELS, QUEUE_COUNTS, QUEUE_DURABILITY, Queue, Snapshot

from .breaks import Timeout, timeout_in_force
from .context import MAX_NAMED, Context, Rule, consumers_named, few, named, num, without_probes
from .release_changes import CHANGES, PHASES, TARGETS, Change

# Facts of the upgrade's own, beside the snapshot's (model.snapshot's constants).
POLICIES = "the policies and operator policies"
DEPRECATED_USED = "the deprecated features in use (/api/deprecated-features/used)"
GLOBAL_PREFETCH = "the channels' global prefetch (RabbitMQ 4.x's API does not show it)"
NODE_TYPES = "the nodes' types, disc or ram (/api/nodes)"
DECLARED_BY = "not reported by the broker: its consumers are named (an inference: they likely declare it)"


@dataclass(frozen=True)
class Prediction:
    current: tuple[int, int] | None  # the broker's release; None where it did not say
    target: tuple[int, int]
    findings: tuple[Finding, ...]  # worst first
    not_evaluated: tuple[NotEvaluated, ...]  # the changes that could not be judged, and what they lack
    changes: tuple[Change, ...]  # the changes between the two releases, all judged or named in not_evaluated

    @property
    def at_or_past_target(self) -> bool:
        """The broker already runs the target release or a later one: nothing to predict."""
        return self.current is not None and self.current >= self.target


Predict = Callable[[Context, Change, Rule, tuple[int, int] | None, tuple[int, int]], Iterator[Finding]]


def predict(snapshot: Snapshot, target: tuple[int, int], breaks: Breaks | None = None) -> Prediction:
    """Each change from the broker's release (exclusive) to `target` (inclusive): a finding per client and
    object it meets, worst first. A broker whose release is unknown is judged against every change up to the
    target. `breaks`: the events of the recent window (the exporter's broker log), which show the clients that
    meet a change today (a consumer timed out); None where no log is read, and what it would show is said not
    known."""
    s = without_probes(snapshot)
    current = s.overview.release
    ctx = Context(s, breaks=breaks)
    unknown = set(s.unreported) | ({POLICIES} if s.policies is None else set()) | (
        {GLOBAL_PREFETCH} if s.channels and all(c.global_prefetch_count is None for c in s.channels) else set()) | (
        {NODE_TYPES} if all(n.node_type is None for n in s.nodes) else set()) | (
        # Before 3.13 the broker keeps no such list: the other changes are inferred from its objects, and said so.
        {DEPRECATED_USED} if s.deprecated_used is None and (current is None or current >= (3, 13)) else set())
    changes = tuple(c for c in CHANGES if c.release <= target and (
        current is None or current < c.release or c.every_target and current < target))
    found: list[Finding] = []
    skipped = []
    for change in changes:
        check, needs = PREDICTIONS[change.id]
        missing = tuple(n for n in needs if n in unknown)
        if missing:
            skipped.append(NotEvaluated(change.id, missing))
            continue
        found.extend(check(ctx, change, change.rule, current, target))
    return Prediction(current, target, tuple(worst_first(found)), tuple(skipped), changes)


def outlooks(snapshot: Snapshot, breaks: Breaks | None = None) -> tuple[Outlook, ...]:
    """The prediction for each release ackscope knows that is later than the broker's (each, where the broker
    does not say its own), oldest first, judged with the window's `breaks` (see predict): what the exporter
    serves as ackscope_upgrade_blocker (its warnings and criticals) and on the dashboard's Upgrade page."""
    current = snapshot.overview.release
    return tuple(Outlook(name, p.findings, p.not_evaluated)
                 for name, target in sorted(TARGETS.items(), key=lambda t: t[1])
                 if current is None or current < target
                 for p in (predict(snapshot, target, breaks),))


def _evidence(change: Change, target: tuple[int, int], **facts) -> dict:
    return {**facts, "changes_in": change.release_name, "target": f"{target[0]}.{target[1]}",
            "effect": change.effect, "source": change.source}


def _queue_finding(change: Change, rule: Rule, ctx: Context, q: Queue, target: tuple[int, int],
                   explanation: str, severity: str | None = None, **facts) -> Finding:
    return rule.finding(severity or change.severity, q.vhost, f"queue {q.name}", consumers_named(ctx, q),
                        _evidence(change, target, queue=q.name, queue_type=q.type, consumers=q.consumers,
                                  declared_by=DECLARED_BY, **facts), explanation)


# -- the predictions, one per change ----------------------------------------------------------------------------
def _mirroring(ctx: Context, change: Change, rule: Rule, current, target) -> Iterator[Finding]:
    for p in ctx.snapshot.policies or ():
        keys = [k for k, _ in p.definition if k.startswith("ha-")]
        if not keys:
            continue
        try:
            pattern = re.compile(p.pattern)
            matched = [q for q in ctx.snapshot.queues if q.vhost == p.vhost and q.type == "classic"
                       and pattern.search(q.name)]
        except re.error:
            matched = []
        who = named(c for q in matched for c in ctx.known_consumers_of(q))
        kind = "operator policy" if p.operator else "policy"
        yield rule.finding(
            change.severity, p.vhost, f"{kind} {p.name}", who,
            _evidence(change, target, policy=p.name, operator=p.operator, pattern=p.pattern, apply_to=p.apply_to,
                      ha_keys=keys, queues_matched=len(matched), queues=few(q.name for q in matched),
                      matched_by="its pattern, as Python's re reads it (an inference: the broker's own match "
                                 "is not reported)",
                      declared_by="not reported by the broker: an operator, a definitions file or a deployment"),
            f"{kind} {p.name} sets {', '.join(keys)}: RabbitMQ {change.release_name} refuses it when declared "
            f"('not recognised policy settings'), and where it exists its mirroring has no effect: the "
            f"{len(matched)} classic queue(s) it matches keep one replica, and lose every message on their node "
            "if it fails.")


def _delivery_limit(ctx: Context, change: Change, rule: Rule, current, target) -> Iterator[Finding]:
    nack_counts = target < (4, 3)
    for q in ctx.snapshot.queues:
        if q.type != "quorum" or q.delivery_limit is not None:
            continue
        requeued = num(q.message_stats.redeliver)
        dead_letters = q.dead_letters is not False  # not shown: no loss is claimed
        fate = (f"dead-lettered to {q.dead_letter_target}" if q.dead_letters else
                "dead-lettered or dropped (its dead-letter settings are not shown)" if dead_letters else "dropped")
        counts = ("basic.nack and basic.reject with requeue both count" if nack_counts else
                  "from 4.3 basic.reject(requeue) counts and basic.nack(requeue) does not (which of them the "
                  "consumers send, the broker does not say)")
        severity = "critical" if requeued and not dead_letters else "warning"
        yield _queue_finding(
            change, rule, ctx, q, target,
            f"quorum queue {q.name} has no delivery limit today; RabbitMQ {change.release_name} gives it 20: a "
            f"message delivered 20 times is {fate} ({counts})." + (
                f" Its consumers requeue now ({requeued} redeliveries counted): those messages will be {fate}"
                + ("." if nack_counts else " where they are rejected, and loop on where they are nacked.")
                if requeued else ""),
            severity, redelivered=q.message_stats.redeliver, dead_letter_target=q.dead_letter_target,
            delivery_limit_on_target=20)


def _nack_not_counted(ctx: Context, change: Change, rule: Rule, current, target) -> Iterator[Finding]:
    if current is None or current < (4, 0):
        return  # from 3.x, quorum-delivery-limit says what the limit will do
    for q in ctx.snapshot.queues:
        # From 4.0 every quorum queue has a limit (20 by default) unless its own is negative; the API leaves the
        # field out for a new queue's first seconds (measured on 4.0.5), which is no "unlimited".
        own = json.loads(dict(q.arguments).get("x-delivery-limit", "null"))
        disabled = isinstance(own, (int, float)) and own < 0
        if q.type != "quorum" or disabled or not num(q.message_stats.redeliver):
            continue
        limit = q.delivery_limit or 20
        yield _queue_finding(
            change, rule, ctx, q, target,
            f"quorum queue {q.name} redelivers ({q.message_stats.redeliver} counted) under a delivery limit of "
            f"{limit}: from 4.3 a consumer's basic.nack(requeue) no longer counts towards it, so a nack loop the "
            "limit ends today goes on forever.",
            redelivered=q.message_stats.redeliver,
            delivery_limit=q.delivery_limit if q.delivery_limit is not None else "20 (the default; not reported yet)")


def _global_qos(ctx: Context, change: Change, rule: Rule, current, target) -> Iterator[Finding]:
    for ch in ctx.snapshot.channels:
        if not ch.global_prefetch_count:
            continue
        consumers = ctx.consumers_on(ch.name)
        n = max(len(consumers), num(ch.consumer_count))
        yield rule.finding(
            change.severity, ch.vhost, f"channel {ch.name}", ch,
            _evidence(change, target, global_prefetch_count=ch.global_prefetch_count,
                      prefetch_count=ch.prefetch_count, consumers=n,
                      queues=few(c.queue for c in consumers),
                      unacked_at_most_today=ch.global_prefetch_count,
                      unacked_at_most_on_target=ch.global_prefetch_count * max(n, 1)),
            f"the channel sets a global prefetch of {ch.global_prefetch_count} for its {n} consumer(s): RabbitMQ "
            f"{change.release_name} applies it per consumer, so the channel may hold "
            f"{ch.global_prefetch_count * max(n, 1)} unacked where it holds {ch.global_prefetch_count} at most today.")


def _transient(ctx: Context, change: Change, rule: Rule, current, target) -> Iterator[Finding]:
    phase = PHASES.get(target, {}).get(change.feature, "")
    for q in ctx.snapshot.queues:
        if q.durable is False and q.exclusive is False and q.type == "classic":
            yield _queue_finding(
                change, rule, ctx, q, target,
                f"queue {q.name} is neither durable nor exclusive: transient_nonexcl_queues, deprecated from 4.0 "
                f"and {phase or 'of an unknown phase'} on {target[0]}.{target[1]} (measured): accepted there, "
                "refused by a later release.", deprecation_phase_on_target=phase)


def _declared_with(argument: str, refused: Callable[[Queue, str], bool], said: str) -> Predict:
    """A change that refuses a queue declared with `argument` where `refused(queue, value)`: the broker's words
    `said`."""
    def check(ctx: Context, change: Change, rule: Rule, current, target) -> Iterator[Finding]:
        for q in ctx.snapshot.queues:
            value = dict(q.arguments).get(argument)
            if value is not None and refused(q, value):
                yield _queue_finding(
                    change, rule, ctx, q, target,
                    f"queue {q.name} was declared with {argument} = {value}: RabbitMQ {change.release_name} refuses "
                    f"that declare ({said}), so the application that declares it at start fails.",
                    argument=argument, value=value)
    return check


def _classic_timeout(ctx: Context, change: Change, rule: Rule, current, target) -> Iterator[Finding]:
    """A warning per classic queue whose consumers rely on the timeout: the queue sets its own, or the broker's
    log told of a consumer timed out on it in the window. Every other classic queue with a manual-ack consumer
    loses only a safety net a healthy client never meets: one info finding for the broker, counted."""
    log_read = ctx.breaks is not None and ctx.breaks.told_by(BROKER_LOG)
    timed_out: dict[tuple[str, str], list[BrokerEvent]] = defaultdict(list)
    unnamed = 0  # RabbitMQ 3.x's log names no queue in a consumer timeout
    for e in ctx.breaks.events if log_read else ():
        if e.kind != CONSUMER_TIMEOUT:
            continue
        if e.queue is None:
            unnamed += 1
        else:
            timed_out[(e.vhost or "", e.queue)].append(e)
    rest: list[tuple[Queue, list, Timeout]] = []
    for q in ctx.snapshot.queues:
        acking = [c for c in ctx.known_consumers_of(q) if c.ack_required]
        events = timed_out.get((q.vhost, q.name), [])
        if q.type != "classic" or not (acking or events):
            continue
        # A queue whose timed-out consumer has not subscribed again: the timeout the broker's log says it applied.
        timeout = (timeout_in_force(ctx, acking[0], q) if acking else
                   Timeout(events[-1].timeout_ms, "the broker's log: the timeout it applied last", ""))
        if q.consumer_timeout_ms or events:
            yield _relied_on(ctx, change, rule, q, target, acking, timeout, events)
        elif timeout.ms is not None:  # where none applies today, the release changes nothing
            rest.append((q, acking, timeout))
    if rest:
        yield _safety_net(ctx, change, rule, target, rest, log_read, unnamed)


def _today(timeout: Timeout) -> str:
    return f"{timeout.ms / 1000:g} s ({timeout.source})" if timeout.ms is not None else f"none ({timeout.source})"


def _relied_on(ctx: Context, change: Change, rule: Rule, q: Queue, target: tuple[int, int], acking: list,
               timeout: Timeout, events: list[BrokerEvent]) -> Finding:
    why, facts = [], {}
    if q.consumer_timeout_ms:
        set_by = ("its x-consumer-timeout argument" if "x-consumer-timeout" in dict(q.arguments)
                  else "a consumer-timeout policy")
        why.append(f"it sets its own consumer timeout ({q.consumer_timeout_ms / 1000:g} s, {set_by}): its "
                   "application relies on the broker taking deliveries back from a consumer that stops acking")
        facts.update(own_timeout_ms=q.consumer_timeout_ms, own_timeout_set_by=set_by)
    if events:
        why.append(f"the broker's log told of {len(events)} consumer timeout(s) on it in the recent window: a "
                   "consumer of it does stop acking, and the timeout is what gives its deliveries back today")
        facts.update(timeouts_in_window=len(events), timeout_applied_ms=events[-1].timeout_ms,
                     timed_out_consumer=events[-1].consumer_tag or "not named by the log", timeouts_told_by=BROKER_LOG)
    return _queue_finding(
        change, rule, ctx, q, target,
        f"classic queue {q.name} relies on the consumer timeout: {'; and '.join(why)}. Today the timeout is "
        f"{_today(timeout)}; from RabbitMQ {change.release_name} none applies to a classic queue, so a consumer "
        "that stops acking holds its deliveries until its connection closes.",
        "warning", manual_ack_consumers=len(acking), timeout_today_ms=timeout.ms, timeout_source=timeout.source,
        **facts)


def _safety_net(ctx: Context, change: Change, rule: Rule, target: tuple[int, int],
                rest: list[tuple[Queue, list, Timeout]], log_read: bool, unnamed: int) -> Finding:
    vhosts = {q.vhost for q, _, _ in rest}
    one_vhost = len(vhosts) == 1
    names = [q.name if one_vhost else f"{q.name} (vhost {q.vhost})" for q, _, _ in rest]
    listed = few(names)
    today = sorted({_today(t) for _, _, t in rest})
    if not log_read:
        lately = ("whether a consumer of them was timed out lately is not known: the broker's log is not read "
                  "(the exporter's --broker-log)")
    elif unnamed:
        lately = (f"the broker's log told of {unnamed} consumer timeout(s) in the recent window on queues it does "
                  "not name (RabbitMQ 3.x): one of these may rely on the timeout")
    else:
        lately = "the broker's log told of no consumer timed out on them in the recent window"
    return rule.finding(
        "info", next(iter(vhosts)) if one_vhost else "", "classic queues with manual-ack consumers",
        named(c for _, acking, _ in rest for c in acking),
        _evidence(change, target, classic_queues=len(rest), queues=listed,
                  manual_ack_consumers=sum(len(acking) for _, acking, _ in rest),
                  timeout_today="; ".join(today[:MAX_NAMED]) + (
                      f"; and {len(today) - MAX_NAMED} more" if len(today) > MAX_NAMED else ""),
                  timed_out_lately=lately),
        f"{len(rest)} classic queue(s) have consumers that ack manually ({listed}): from RabbitMQ "
        f"{change.release_name} no consumer timeout applies to them, where today a consumer that stops acking is "
        f"timed out after {today[0] if len(today) == 1 else 'the timeout in force'}. A client that acks loses "
        "nothing: the timeout is a safety net, which only a consumer that stops acking meets (then its deliveries "
        f"stay held until its connection closes). None of them sets its own timeout; {lately}.")


def _statistics(ctx: Context, change: Change, rule: Rule, current, target) -> Iterator[Finding]:
    if ctx.snapshot.overview.statistics_disabled:
        return
    phase = PHASES.get(target, {}).get(change.feature, "")
    yield rule.finding(
        change.severity, "", "the management plugin's statistics", None,
        _evidence(change, target, statistics_disabled=False, said_by="the broker (/api/overview's disable_stats)",
                  phase_on_target=phase or "not listed"),
        f"the broker collects the management plugin's statistics: {change.feature} is deprecated from 4.0 and "
        f"{phase or 'not listed'} on {target[0]}.{target[1]} (measured); a later release removes them.")


def _ram_nodes(ctx: Context, change: Change, rule: Rule, current, target) -> Iterator[Finding]:
    phase = PHASES.get(target, {}).get(change.feature, "")
    removed = phase in ("denied_by_default", "removed", "disconnected")
    for n in ctx.snapshot.nodes:
        if n.node_type == "ram":
            yield rule.finding(
                "critical" if removed else change.severity, "", f"node {n.name}", None,
                _evidence(change, target, node=n.name, node_type=n.node_type, said_by="the broker (/api/nodes)",
                          phase_on_target=phase or "not listed"),
                f"node {n.name} is a ram node: on {target[0]}.{target[1]} ram_node_type is {phase or 'not listed'} "
                "(measured)" + (": the node cannot run there as it is." if removed else
                                ", and a later release removes it."))


def _deprecated_used(ctx: Context, change: Change, rule: Rule, current, target) -> Iterator[Finding]:
    named = {c.feature for c in CHANGES if c.feature and c.id != change.id}
    for f in ctx.snapshot.deprecated_used or ():
        if f.name in named:
            continue  # its own change names the objects
        phase = PHASES.get(target, {}).get(f.name)
        refused = phase in ("denied_by_default", "removed", "disconnected")
        yield rule.finding(
            "critical" if refused else change.severity, "", f"deprecated feature {f.name}", None,
            _evidence(change, target, feature=f.name, phase_now=f.phase, phase_on_target=phase or "not listed",
                      doc_url=f.doc_url, said_by="the broker (/api/deprecated-features/used)"),
            f"the broker says deprecated feature {f.name} is in use ({f.phase} today); on {target[0]}.{target[1]} "
            f"it is {phase or 'not listed (measured)'}" + (": what uses it is refused there." if refused else "."))


# Each change's prediction, and what it reads that a poll may not report (a list that failed is no list of none).
PREDICTIONS: dict[str, tuple[Predict, tuple[str, ...]]] = {
    "classic-queue-mirroring-removed": (_mirroring, (POLICIES, QUEUE_COUNTS)),
    "quorum-delivery-limit": (_delivery_limit, (QUEUE_COUNTS,)),
    "delivery-limit-ignores-nack": (_nack_not_counted, (QUEUE_COUNTS,)),
    "global-qos-per-consumer": (_global_qos, (CHANNELS, GLOBAL_PREFETCH)),
    "transient-nonexclusive-queue": (_transient, (QUEUE_COUNTS, QUEUE_DURABILITY)),
    "consumer-timeout-argument-on-classic-queue": (
        _declared_with("x-consumer-timeout", lambda q, v: q.type == "classic",
                       "PRECONDITION_FAILED - invalid arg 'x-consumer-timeout' ... of queue type "
                       "rabbit_classic_queue"), (QUEUE_COUNTS,)),
    "classic-queue-version-1": (
        _declared_with("x-queue-version", lambda q, v: v == "1",
                       "PRECONDITION_FAILED - invalid arg 'x-queue-version': unsupported queue version '1'"),
        (QUEUE_COUNTS,)),
    "queue-master-locator": (
        _declared_with("x-queue-master-locator", lambda q, v: True,
                       "the connection is closed: 541 INTERNAL_ERROR - Feature `queue_master_locator` is "
                       "deprecated"), (QUEUE_COUNTS,)),
    "classic-queue-consumer-timeout-ignored": (_classic_timeout, (QUEUE_COUNTS, CHANNELS)),
    "management-metrics-collection": (_statistics, ()),
    "ram-node-type": (_ram_nodes, (NODE_TYPES,)),
    "deprecated-feature-in-use": (_deprecated_used, (DEPRECATED_USED,)),
}
