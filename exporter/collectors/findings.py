"""ackscope_finding: 1 per active diagnosis finding, so alerts can key on the rule and point at the culprit;
ackscope_rule_not_evaluated: 1 per rule the source cannot feed, so its silence is not read as health."""

from __future__ import annotations

from ackscope.model.findings import Diagnosis

from .families import gauge

LABELS = ("rule", "severity", "vhost", "object", "connection_name", "client")


class FindingCollector:
    def __init__(self, diagnosis: Diagnosis):
        self._diagnosis = diagnosis

    def collect(self):
        yield gauge("ackscope_finding", "1 for each active diagnosis finding (rule IDs: docs/rules.md).", LABELS,
                    self._diagnosis.findings,
                    lambda f: (f.rule, f.severity, f.vhost, f.object, f.connection_name, f.client), lambda f: 1)
        yield gauge("ackscope_rule_not_evaluated", "1 for each diagnosis rule this source cannot feed (what it needs "
                    "is in the label): no finding from it means nothing.", ("rule", "needs"),
                    self._diagnosis.not_evaluated, lambda n: (n.rule, "; ".join(n.needs) or n.why), lambda n: 1)
