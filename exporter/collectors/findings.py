"""ackscope_finding: 1 per active diagnosis finding, so alerts can key on the rule and point at the culprit."""

from __future__ import annotations

from ackscope.model.findings import Finding

from .families import gauge

LABELS = ("rule", "severity", "vhost", "object", "connection_name")


class FindingCollector:
    def __init__(self, findings: tuple[Finding, ...]):
        self._findings = findings

    def collect(self):
        yield gauge("ackscope_finding", "1 for each active diagnosis finding (rule IDs: docs/rules.md).", LABELS, self._findings,
                    lambda f: (f.rule, f.severity, f.vhost, f.object, f.connection_name), lambda f: 1)
