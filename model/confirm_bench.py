"""What `ackscope bench confirms` measured on a broker: messages per second for each publisher strategy and queue
type. The bench saves it as JSON (--save); the exporter and `ackscope diagnose` read it back (--confirm-bench) so
that a finding about how a publisher waits for its confirms quotes what the alternatives do on this broker."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class StrategyRate:
    strategy: str  # as the bench names it: "confirm and wait, per message", "streaming confirms, window 500", ...
    queue_type: str  # classic | quorum
    rate: float  # messages per second, persistent
    p50_seconds: float | None  # from publish to the broker's answer


@dataclass(frozen=True)
class ConfirmBench:
    broker: str  # the AMQP URL it was measured on, without its password
    measured_at: float  # Unix time
    rates: tuple[StrategyRate, ...]

    def to_json(self) -> dict:
        return {"broker": self.broker, "measured_at": self.measured_at,
                "rates": [{"strategy": r.strategy, "queue_type": r.queue_type, "rate": r.rate,
                           "p50_seconds": r.p50_seconds} for r in self.rates]}

    @classmethod
    def from_json(cls, doc: object) -> ConfirmBench:
        """ValueError, saying what is wrong, where `doc` is not what to_json() gives."""
        if not isinstance(doc, dict) or not isinstance(doc.get("rates"), list):
            raise ValueError("not a saved 'ackscope bench confirms' result (no list of rates)")
        rates = []
        for i, r in enumerate(doc["rates"]):
            if not (isinstance(r, dict) and isinstance(r.get("strategy"), str) and isinstance(r.get("queue_type"), str)
                    and _number(r.get("rate")) and (r.get("p50_seconds") is None or _number(r["p50_seconds"]))):
                raise ValueError(f"rate {i + 1} is not a strategy, a queue type and a number of messages per second")
            rates.append(StrategyRate(r["strategy"], r["queue_type"], float(r["rate"]),
                                      None if r.get("p50_seconds") is None else float(r["p50_seconds"])))
        if not _number(doc.get("measured_at")):
            raise ValueError("it does not say when it was measured")
        return cls(str(doc.get("broker", "")), float(doc["measured_at"]), tuple(rates))


def _number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
