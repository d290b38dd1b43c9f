"""The rules: pure functions from a Context (snapshot, previous snapshot, probe statistics, thresholds) to
findings, one module per concern (consumers, publishers, queues, connections, cluster, probes). Rule IDs are a
contract: alerts and the UI key on them. The rules reference in docs/rules.md is generated from RULES
(python -m ackscope.apps.reference rules), so it cannot drift from the code.
"""

from __future__ import annotations

from dataclasses import replace

from ackscope.model.findings import Diagnosis, Finding, NotEvaluated, worst_first
from ackscope.model.probes import NAMESPACE, is_probe_connection
from ackscope.model.snapshot import Snapshot

from ackscope.model.events import BROKER_LOG, EVENTS

from . import breaks, cluster, connections, consumers, links, probes, publishers, queues, streams
from .context import Context, Rule

__all__ = ["RULES", "Context", "Rule", "diagnose", "evaluate"]

RULES: tuple[Rule, ...] = (consumers.RULES + breaks.RULES + publishers.RULES + queues.RULES + connections.RULES
                           + cluster.RULES + links.RULES + streams.RULES + probes.RULES)


def evaluate(ctx: Context) -> list[Finding]:
    """Every rule's findings, worst first."""
    return list(diagnose(ctx).findings)


def _without_probes(s: Snapshot | None) -> Snapshot | None:
    """The snapshot without the probes' own connections, channels, consumers and queues: the probe rules
    judge what the probes measure; the client rules never judge the client the probes are."""
    if s is None:
        return None
    return replace(s, connections=tuple(c for c in s.connections if not is_probe_connection(c.connection_name)),
                   channels=tuple(c for c in s.channels if not is_probe_connection(c.connection_name)),
                   consumers=tuple(c for c in s.consumers if not is_probe_connection(c.connection_name)),
                   queues=tuple(q for q in s.queues if not q.name.startswith(NAMESPACE)))


def diagnose(ctx: Context) -> Diagnosis:
    """Every rule that applies to the broker's release and whose needs the snapshot meets, run; the others
    named, with why they did not."""
    ctx = replace(ctx, snapshot=_without_probes(ctx.snapshot), previous=_without_probes(ctx.previous))
    findings: list[Finding] = []
    skipped = []
    unknown = frozenset(ctx.snapshot.unreported) | (
        {EVENTS} if ctx.breaks is None or not ctx.breaks.told_by(BROKER_LOG) else set())
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
