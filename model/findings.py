"""A finding: one rule's verdict on one object, with the numbers behind it and what to do."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

SEVERITIES = ("info", "warning", "critical")


@dataclass(frozen=True)
class Finding:
    rule: str  # a contract: alerts and the UI key on it
    severity: str  # info | warning | critical
    vhost: str
    object: str  # the queue, channel, connection or node it is about
    connection_name: str  # the name the culprit's connection was given (the broker's user_provided_name), or ""
    evidence: dict[str, Any] = field(default_factory=dict)
    explanation: str = ""
    remedy: str = ""
    since: float | None = None  # unix time it was first seen, in an unbroken run of polls (see Onset)
    # What the culprit runs: its client library and version (Connection.client), or ""; for a queue, its
    # consumers'. A label: unlike the identity, it does not change when the client reconnects.
    client: str = ""
    # Who the culprit is for a human: its connection name, or, for a client that gives none, what it runs, from
    # where and as whom (Connection.identity); for a queue, its consumers'. In the text and JSON, never a label.
    identity: str = ""

    @property
    def rank(self) -> int:
        return SEVERITIES.index(self.severity)

    @property
    def culprit(self) -> str:
        """How a human names it: the object, and the client that owns it when there is one."""
        who = self.identity or self.connection_name or self.client
        return f"{self.object} ({who})" if who else self.object

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class NotEvaluated:
    """A rule that could not run on this snapshot: its source does not report what the rule needs. Said,
    so that no finding is never mistaken for health."""

    rule: str
    needs: tuple[str, ...]
    why: str = ""  # a rule that cannot apply to the broker's release says why instead (then it needs nothing)

    @property
    def reason(self) -> str:
        """Why it did not run, in one phrase."""
        return self.why or "needs " + ", ".join(self.needs)

    def to_json(self) -> dict[str, Any]:
        return {"rule": self.rule, "needs": list(self.needs), **({"why": self.why} if self.why else {})}


@dataclass(frozen=True)
class Outlook:
    """What moving the broker to one later release changes: a finding per client and object it meets (each
    change's id its rule), worst first, and the changes that could not be judged."""

    to: str  # the release, as "4.3"
    findings: tuple[Finding, ...] = ()
    not_evaluated: tuple[NotEvaluated, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"to": self.to, "findings": [f.to_json() for f in self.findings],
                "not_evaluated": [n.to_json() for n in self.not_evaluated]}


# Where a queue's oldest message's age comes from.
STAMPED = "timestamp"  # the head message's timestamp property, as its publisher set it (the broker's figure)
INFERRED = "inferred"  # a lower bound from the queue's own history: messages no delivery has reached since then


@dataclass(frozen=True)
class OldestMessage:
    """How long the oldest message of a queue has waited: its head message's age where its publisher stamped it,
    else at least as long as the queue's history says (a lower bound)."""

    vhost: str
    queue: str
    age_seconds: float
    source: str  # STAMPED | INFERRED


@dataclass(frozen=True)
class Diagnosis:
    """The rules' verdict on one snapshot: the findings, worst first, and the rules that could not run; beside
    them, what each later release ackscope knows would change (none when the broker runs the newest)."""

    findings: tuple[Finding, ...] = ()
    not_evaluated: tuple[NotEvaluated, ...] = ()
    upgrades: tuple[Outlook, ...] = ()
    oldest: tuple[OldestMessage, ...] = ()  # each queue's oldest message's age, where it is known


def worst_first(findings: list[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (-f.rank, f.rule, f.vhost, f.object))
