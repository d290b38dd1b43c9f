"""What the probes watch: one target per queue, with the rates and limits that keep them safe.

Every resource a probe touches is named ackscope.probe.<...>, so a user whose permissions match only
^ackscope\\.probe\\. can run them, and nothing else on the broker is ever touched.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from ackscope.model.probes import NAMESPACE as PREFIX

EXCHANGE = PREFIX + "direct"
QUEUE_TYPES = ("classic", "quorum", "stream")
_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")


@dataclass(frozen=True)
class Target:
    name: str
    queue_type: str = "classic"
    persistent: bool = True
    rate: float = 5.0  # steady messages per second
    burst_size: int = 200  # messages published at once every burst_interval (0: no bursts)
    burst_interval: float = 60.0
    prefetch: int = 20
    consumers: int = 1  # consumers of the queue, each on a channel of its own
    processing_delay: float = 0.0  # seconds the consumer waits before acking
    requeue_share: float = 0.02  # deliveries nacked with requeue=true, once each
    max_length: int = 10_000  # x-max-length: the queue never holds more
    overflow: str | None = None  # x-overflow, e.g. reject-publish
    expires_ms: int = 3_600_000  # x-expires: an abandoned probe queue removes itself after an hour
    message_size: int = 128

    @property
    def queue(self) -> str:
        return PREFIX + self.name

    def arguments(self) -> dict[str, Any]:
        """The queue's x-arguments: its type and the bounds that make it safe to leave behind."""
        args: dict[str, Any] = {"x-queue-type": self.queue_type}
        if self.queue_type == "stream":
            # Streams take no x-expires or x-max-length; they are bounded by size and age instead.
            args.update({"x-max-length-bytes": self.max_length * max(self.message_size, 256),
                         "x-max-age": "1h"})
            return args
        args.update({"x-expires": self.expires_ms, "x-max-length": self.max_length})
        if self.overflow:
            args["x-overflow"] = self.overflow
        return args

    def validate(self) -> Target:
        if not _NAME.fullmatch(self.name):
            raise ValueError(f"target name {self.name!r}: use lower-case letters, digits, '-' and '_' (up to 63)")
        if self.queue_type not in QUEUE_TYPES:
            raise ValueError(f"target {self.name}: queue_type must be one of {', '.join(QUEUE_TYPES)}")
        if not 0 < self.rate <= 1000:
            raise ValueError(f"target {self.name}: rate must be above 0 and at most 1000 messages per second")
        if not 0 <= self.burst_size <= 10_000:
            raise ValueError(f"target {self.name}: burst_size must be 0 to 10000")
        if self.burst_interval <= 0:
            raise ValueError(f"target {self.name}: burst_interval must be positive")
        if not 1 <= self.prefetch <= 10_000:
            raise ValueError(f"target {self.name}: prefetch must be 1 to 10000")
        if not 1 <= self.consumers <= 10:
            raise ValueError(f"target {self.name}: consumers must be 1 to 10")
        if not 0 <= self.requeue_share <= 0.5:
            raise ValueError(f"target {self.name}: requeue_share must be 0 to 0.5")
        if not 0 <= self.processing_delay <= 60:
            raise ValueError(f"target {self.name}: processing_delay must be 0 to 60 seconds")
        if not 1 <= self.max_length <= 1_000_000:
            raise ValueError(f"target {self.name}: max_length must be 1 to 1000000")
        if not 0 <= self.message_size <= 65_536:
            raise ValueError(f"target {self.name}: message_size must be 0 to 65536 bytes")
        if self.queue_type == "stream" and (self.requeue_share or self.consumers > 1):
            # A stream keeps its messages: there is no requeue, and each consumer reads every message.
            return replace(self, requeue_share=0.0, consumers=1)
        return self


DEFAULT_TARGETS = (
    Target("classic-persistent", "classic", persistent=True),
    Target("classic-transient", "classic", persistent=False),
    Target("quorum", "quorum", persistent=True),
)
# Proves the nack path: a queue of ten that refuses publishes when full, drained slowly, so bursts overflow.
REJECT_PUBLISH = Target("reject-publish", "classic", persistent=True, max_length=10, overflow="reject-publish",
                        prefetch=1, processing_delay=0.2, requeue_share=0.0, burst_size=50)

_FIELDS = {f for f in Target.__dataclass_fields__}


def targets_from_config(rows: Any, defaults: dict[str, Any], reject_publish: bool) -> tuple[Target, ...]:
    """Targets from the TOML's [[probe.targets]] (or the default set), with shared settings applied."""
    if rows is None:
        chosen = list(DEFAULT_TARGETS)
    else:
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise ValueError("[[probe.targets]] must be a list of tables")
        chosen = []
        for row in rows:
            unknown = set(row) - _FIELDS
            if unknown:
                raise ValueError(f"[[probe.targets]]: unknown setting {sorted(unknown)[0]!r}")
            if "name" not in row:
                raise ValueError("[[probe.targets]]: every target needs a name")
            chosen.append(Target(**row))
    shared = {k: v for k, v in defaults.items() if v is not None}
    explicit = [set(r) for r in rows] if rows else [set() for _ in chosen]
    chosen = [replace(t, **{k: v for k, v in shared.items() if k not in given}) for t, given in zip(chosen, explicit)]
    if reject_publish and all(t.name != REJECT_PUBLISH.name for t in chosen):
        chosen.append(REJECT_PUBLISH)
    names = [t.name for t in chosen]
    if len(set(names)) != len(names):
        raise ValueError("[[probe.targets]]: target names must be unique")
    return tuple(t.validate() for t in chosen)
