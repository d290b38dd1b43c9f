"""Which vhosts and queues a source reports: --include-vhosts, --exclude-queues and their kin."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Selection:
    """Which vhosts and queues to watch: regexes matched against the whole name; None matches all."""

    include_vhosts: Any = None
    exclude_vhosts: Any = None
    include_queues: Any = None
    exclude_queues: Any = None

    def vhost(self, name: str) -> bool:
        return _selected(name, self.include_vhosts, self.exclude_vhosts)

    def queue(self, name: str) -> bool:
        return _selected(name, self.include_queues, self.exclude_queues)


def _selected(name: str, include: Any, exclude: Any) -> bool:
    if include is not None and not include.fullmatch(name):
        return False
    return exclude is None or not exclude.fullmatch(name)
