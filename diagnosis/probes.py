"""Rules about what the probes measure: confirm latency, lost, nacked and duplicated messages, probes down."""

from __future__ import annotations

from collections.abc import Iterator

from ackscope.core.quantile import beyond_largest_bucket, histogram_quantile
from ackscope.model.findings import Finding
from ackscope.model.probes import TargetStats

from .context import ACKS_GUIDE, RELIABILITY_GUIDE, Context, Named, Rule


# The probes' own findings are about a target, not one of its connections: named for a human only.
PROBES = Named(identity="ackscope-probe")


def _probe_labels(p: TargetStats) -> dict:
    return {"queue_type": p.queue_type, "persistent": p.persistent}


def _probe_latency(ctx: Context, rule: Rule) -> Iterator[Finding]:
    for p in ctx.probes:
        buckets = p.buckets("confirm_latency_seconds")
        p99 = histogram_quantile(buckets, 0.99)  # as Prometheus and the dashboard estimate it
        if p99 is None or p99 <= ctx.thresholds.probe_confirm_p99_seconds:
            continue
        if beyond_largest_bucket(buckets, 0.99):  # say how far we know it is
            evidence, told = {"confirm_p99_seconds_above": p99}, f"more than {p99:g}s"
        else:
            evidence, told = {"confirm_p99_seconds": round(p99, 6)}, f"about {p99:.3g}s"
        yield rule.finding("warning", "", f"probe {p.target}", PROBES, {**evidence, **_probe_labels(p)},
                           f"the probe's publisher waits {told} for 99% of its confirms on {p.queue_type} queue "
                           f"ackscope.probe.{p.target}.")


def _probe_lost(ctx: Context, rule: Rule) -> Iterator[Finding]:
    for p in ctx.probes:
        lost = p.counters.get("lost", 0)
        if lost > 0:
            yield rule.finding("critical" if p.persistent else "warning", "", f"probe {p.target}", PROBES,
                               {"lost": lost, "confirmed": p.counters.get("confirmed"), **_probe_labels(p)},
                               f"{lost:g} messages the broker confirmed were never delivered to the probe's "
                               "consumer within the loss deadline" + ("." if p.persistent else
                                                                       " (transient messages: a restart loses them)."))


def _probe_nacked(ctx: Context, rule: Rule) -> Iterator[Finding]:
    for p in ctx.probes:
        nacked = p.counters.get("nacked", 0)
        if nacked > 0:
            by_design = p.target == "reject-publish"
            yield rule.finding("info" if by_design else "warning", "", f"probe {p.target}", PROBES,
                               {"nacked": nacked, "published": p.counters.get("published"), **_probe_labels(p)},
                               f"the broker refused {nacked:g} of the probe's publishes with basic.nack" + (
                                   " (this target's queue rejects publishes when full, on purpose)." if by_design
                                   else "."))


def _probe_duplicates(ctx: Context, rule: Rule) -> Iterator[Finding]:
    for p in ctx.probes:
        dups = p.counters.get("duplicates", 0)
        if dups > 0:
            yield rule.finding("info", "", f"probe {p.target}", PROBES,
                               {"duplicates": dups, "republished": p.counters.get("republished"),
                                **_probe_labels(p)},
                               f"the probe received {dups:g} messages twice: at-least-once delivery at work "
                               "(a republish after a lost connection, or a redelivery of an ack that was lost).")


def _probe_out_of_order(ctx: Context, rule: Rule) -> Iterator[Finding]:
    for p in ctx.probes:
        first = p.counters.get("out_of_order_first", 0)
        if first > 0:
            consumers = p.gauges.get("consumers")
            yield rule.finding("critical" if consumers == 1 else "warning", "", f"probe {p.target}", PROBES,
                               {"out_of_order_first": first,
                                "out_of_order_redelivered": p.counters.get("out_of_order_redelivered"),
                                "delivered": p.counters.get("delivered"), "consumers": consumers,
                                **_probe_labels(p)},
                               f"{first:g} first deliveries (not flagged redelivered) reached a probe consumer "
                               "after a message published later on the same channel: RabbitMQ keeps publish "
                               f"order from one channel through one queue to each consumer, and ackscope.probe."
                               f"{p.target} did not" + (", with a single consumer." if consumers == 1 else "."))


def _probe_down(ctx: Context, rule: Rule) -> Iterator[Finding]:
    for p in ctx.probes:
        if not p.up:
            yield rule.finding("warning", "", f"probe {p.target}", PROBES, _probe_labels(p),
                               f"the probe for ackscope.probe.{p.target} has no open publisher and consumer "
                               "channel: the broker is unreachable to it, refuses its login, or its queue "
                               "conflicts (see the exporter's log).")


RULES: tuple[Rule, ...] = (
    Rule("probe-confirm-latency-high", "A probe's confirm latency p99 above the threshold.", "Look at disk "
         "latency, queue length and alarms; persistent messages wait for the message store's fsync, batched "
         f"every few hundred ms under load; see {ACKS_GUIDE}, 'Latency of Publisher Confirms'.", _probe_latency),
    Rule("probe-message-lost", "A confirmed probe message never delivered within the loss deadline (critical "
         "for persistent messages).", "Check the probe queue's history (restarts, deletions, policies such as "
         f"TTL or length limits) and the broker's logs; see {RELIABILITY_GUIDE}.", _probe_lost),
    Rule("probe-nacked", "The broker nacked probe publishes.", "Check the probe queue's length limit and "
         f"overflow behaviour and the broker's logs; see {ACKS_GUIDE}, 'Negative Acknowledgments for Publishes'.",
         _probe_nacked),
    Rule("probe-duplicates", "The probe received a message twice (at-least-once delivery at work).",
         f"Nothing to fix in the broker; consumers must be idempotent; see {RELIABILITY_GUIDE}, "
         "'At the Consumer'.", _probe_duplicates),
    Rule("probe-out-of-order", "A probe consumer received a first delivery after a message published later "
         "(critical for a queue with a single consumer). Redeliveries out of order are expected (a requeued "
         "message goes back to its place): counted in ackscope_probe_out_of_order_redelivered_total, never a "
         "finding.", "Look for anything else that publishes into or moves messages of the probe's queue (a shovel, "
         "a policy, dead-lettering into it); without one, report it to the RabbitMQ team with the evidence and the "
         f"probe event log; see {RELIABILITY_GUIDE}, 'Ordering'.", _probe_out_of_order),
    Rule("probe-down", "A probe target without open publisher and consumer channels.", "Read the exporter's log: "
         "connection refused, login refused, or a probe queue declared with other arguments.", _probe_down),
)
