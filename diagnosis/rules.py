"""The rules: pure functions from a Context (snapshot, previous snapshot, probe statistics, thresholds) to
findings, one module per concern (consumers, publishers, queues, connections, cluster, probes). Rule IDs are a
contract: alerts and the UI key on them. The rules reference in docs/rules.md is generated from RULES
(python -m ackscope.apps.reference rules), so it cannot drift from the code.
"""

from __future__ import annotations

from dataclasses import replace

from ackscope.model.events import BROKER_LOG, EVENTS
from ackscope.model.findings import Diagnosis, Finding, NotEvaluated, worst_first
from ackscope.model.traces import TRACES

from . import (breaks, cluster, connections, consumers, federation, links, probes, publishers, queues, shovels,
               streams)
from . import auto_ack_gone, channel_churn, dead_letter_cycles, deleted_queues, deprecated, empty_gets
from . import traced_messages
from .context import Context, Rule, without_probes

__all__ = ["RULES", "Context", "Rule", "diagnose", "evaluate"]

RULES: tuple[Rule, ...] = (consumers.RULES + breaks.RULES + publishers.RULES + queues.RULES + connections.RULES
                           + cluster.RULES + links.RULES + streams.RULES + shovels.RULES + federation.RULES
                           + probes.RULES + empty_gets.RULES + deleted_queues.RULES + auto_ack_gone.RULES
                           + deprecated.RULES + dead_letter_cycles.RULES + channel_churn.RULES
                           + traced_messages.RULES)


def evaluate(ctx: Context) -> list[Finding]:
    """Every rule's findings, worst first."""
    return list(diagnose(ctx).findings)


def diagnose(ctx: Context) -> Diagnosis:
    """Every rule that applies to the broker's release and whose needs the snapshot meets, run; the others
    named, with why they did not."""
    ctx = replace(ctx, snapshot=without_probes(ctx.snapshot), previous=without_probes(ctx.previous))
    findings: list[Finding] = []
    skipped = []
    unknown = frozenset(ctx.snapshot.unreported) | (
        {EVENTS} if ctx.breaks is None or not ctx.breaks.told_by(BROKER_LOG) else set()) | (
        {TRACES} if ctx.traces is None or not ctx.traces.messaging_spans else set())
    for rule in RULES:
        missing = tuple(n for n in rule.needs if n in unknown)
        why = rule.inapplicable(ctx.release)
        if why:
            skipped.append(NotEvaluated(rule.id, (), why))
        elif missing:
            skipped.append(NotEvaluated(rule.id, missing))
        else:
            findings.extend(rule.check(ctx, rule))
    return Diagnosis(tuple(worst_first(findings)), tuple(skipped))
