"""ackscope_upgrade_blocker: 1 per client object that moving the broker to a later release changes, so a fleet's
upgrade can be counted and alerted on in Prometheus before it happens (the same predictions as `ackscope
upgrade-check`, docs/upgrade.md); ackscope_upgrade_not_evaluated: 1 per change that could not be judged, so no
series is never read as nothing to change."""

from __future__ import annotations

from ackscope.model.findings import Diagnosis

from .families import gauge

# kind: the change (its id in docs/upgrade.md); severity: critical where the release will refuse it or lose
# messages, warning where it behaves differently or deprecates it.
LABELS = ("to", "kind", "severity", "vhost", "object", "client")


class UpgradeCollector:
    def __init__(self, diagnosis: Diagnosis):
        self._upgrades = diagnosis.upgrades

    def collect(self):
        yield gauge("ackscope_upgrade_blocker", "1 for each client object that moving the broker to release `to` "
                    "changes: kind is the change (docs/upgrade.md), severity critical where that release refuses "
                    "it or loses its messages.", LABELS,
                    ((o.to, f) for o in self._upgrades for f in o.findings),
                    lambda row: (row[0], row[1].rule, row[1].severity, row[1].vhost, row[1].object, row[1].client),
                    lambda row: 1)
        yield gauge("ackscope_upgrade_not_evaluated", "1 for each change of release `to` that could not be judged "
                    "(what it needs is in the label): no ackscope_upgrade_blocker of its kind means nothing.",
                    ("to", "kind", "needs"), ((o.to, n) for o in self._upgrades for n in o.not_evaluated),
                    lambda row: (row[0], row[1].rule, "; ".join(row[1].needs) or row[1].why), lambda row: 1)
