"""What a probe message carries, so the consumer can audit it: run, target, sequence number and the
moment its publish frame went out (this process's monotonic clock: publisher and consumer share it)."""

from __future__ import annotations

import json
from dataclasses import dataclass

CONTENT_TYPE = "application/vnd.ackscope.probe+json"


@dataclass(frozen=True)
class ProbeMessage:
    run_id: str
    target: str
    seq: int
    published_ns: int

    def encode(self, size: int = 0) -> bytes:
        """The body, padded with spaces to at least `size` bytes."""
        body = json.dumps({"run": self.run_id, "target": self.target, "seq": self.seq,
                           "published_ns": self.published_ns}, separators=(",", ":")).encode()
        return body.ljust(size)

    @classmethod
    def decode(cls, body: bytes) -> ProbeMessage | None:
        """The message, or None when the body is not one of ours (another run's leftovers are still ours)."""
        try:
            d = json.loads(body)
            return cls(str(d["run"]), str(d["target"]), int(d["seq"]), int(d["published_ns"]))
        except (ValueError, TypeError, KeyError):
            return None
