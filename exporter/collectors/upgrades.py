"""What moving the broker to a later release changes (the predictions of `ackscope upgrade-check`,
docs/upgrade.md), so a fleet's upgrade can be counted and alerted on in Prometheus before it happens:
ackscope_upgrade_blockers counts the items of each change (info ones left out), ackscope_upgrade_blocker names each
client object, worst first, up to ITEMS_PER_KIND of a change (one change may meet every queue of a large broker: the
count stays whole); ackscope_upgrade_not_evaluated: 1 per change that could not be judged, so no series is never
read as nothing to change."""

from __future__ import annotations

from collections import Counter

from ackscope.model.findings import Diagnosis

from .families import gauge

ITEMS_PER_KIND = 100
# kind: the change (its id in docs/upgrade.md); severity: critical where the release will refuse it or lose
# messages, warning where it behaves differently or deprecates it (info items are no blockers: left out).
LABELS = ("to", "kind", "severity", "vhost", "object", "client")


class UpgradeCollector:
    def __init__(self, diagnosis: Diagnosis):
        self._upgrades = diagnosis.upgrades

    def collect(self):
        # An info item is said (upgrade-check, the dashboard), not counted: what changes for it is a safety net a
        # healthy client never meets, and a broker of 2,000 such queues is not 2,000 blockers.
        items = [(o.to, f) for o in self._upgrades for f in o.findings if f.severity != "info"]
        counts = Counter((to, f.rule, f.severity) for to, f in items)
        named: Counter = Counter()
        shown = []
        for to, f in items:  # worst first within each change
            named[(to, f.rule)] += 1
            if named[(to, f.rule)] <= ITEMS_PER_KIND:
                shown.append((to, f))
        yield gauge("ackscope_upgrade_blockers", "How many client objects moving the broker to release `to` "
                    "changes, by change (kind, docs/upgrade.md) and severity: critical where that release refuses "
                    "them or loses their messages.", ("to", "kind", "severity"), counts.items(),
                    lambda row: row[0], lambda row: row[1])
        yield gauge("ackscope_upgrade_blocker", "1 for each client object that moving the broker to release `to` "
                    f"changes, as ackscope upgrade-check names it: the worst {ITEMS_PER_KIND} of each change (kind); "
                    "ackscope_upgrade_blockers counts them all.", LABELS, shown,
                    lambda row: (row[0], row[1].rule, row[1].severity, row[1].vhost, row[1].object, row[1].client),
                    lambda row: 1)
        yield gauge("ackscope_upgrade_not_evaluated", "1 for each change of release `to` that could not be judged "
                    "(what it needs is in the label): no ackscope_upgrade_blocker of its kind means nothing.",
                    ("to", "kind", "needs"), ((o.to, n) for o in self._upgrades for n in o.not_evaluated),
                    lambda row: (row[0], row[1].rule, "; ".join(row[1].needs) or row[1].why), lambda row: 1)
