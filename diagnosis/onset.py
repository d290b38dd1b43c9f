"""Since when each finding holds: "since when" is the on-call's third question."""

from __future__ import annotations

from dataclasses import replace

from ackscope.model.findings import Finding


class Onset:
    """Remembers since when each finding has held: a finding seen at every poll keeps the time of the first
    one; once a poll does not find it, it starts again. The rules stay pure; this is their memory."""

    def __init__(self):
        self._first: dict[tuple[str, str, str], float] = {}

    def stamp(self, findings: list[Finding], taken_at: float) -> list[Finding]:
        """`findings` of a snapshot taken at `taken_at`, each with its `since`."""
        first = {(f.rule, f.vhost, f.object): self._first.get((f.rule, f.vhost, f.object), taken_at)
                 for f in findings}
        self._first = first
        return [replace(f, since=first[(f.rule, f.vhost, f.object)]) for f in findings]
