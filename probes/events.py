"""The probe event log: Parquet files under DIR/events/date=YYYY-MM-DD/, the Spark pipeline's input.
Written atomically and rotated by ackscope.core.parquet_log; the schema, ackscope.model.schemas.EVENTS,
is a contract (docs/events.md)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from ackscope.core.parquet_log import ParquetLog
from ackscope.model.schemas import EVENTS


@dataclass(frozen=True, slots=True)
class Event:
    run_id: str
    probe: str
    queue_type: str
    persistent: bool
    seq: int
    kind: str
    ts_us: int  # microseconds since the epoch, UTC
    latency_s: float | None = None
    batch_size: int | None = None
    redelivered: bool | None = None
    consumer: str | None = None  # a delivery's consumer tag: order is judged per consumer


class EventLog(ParquetLog):
    """Probe events under DIR/events/, rotated every `rotate_seconds` or `max_rows`, never unbounded."""

    def __init__(self, data_dir: str | Path, rotate_seconds: float = 60.0, max_rows: int = 100_000,
                 max_buffered: int = 1_000_000):
        super().__init__(Path(data_dir) / "events", EVENTS, "ts", "probe events", rotate_seconds, max_rows,
                         max_buffered)

    def append(self, event: Event) -> None:  # type: ignore[override]
        super().append({"run_id": event.run_id, "probe": event.probe, "queue_type": event.queue_type,
                        "persistent": event.persistent, "seq": event.seq, "kind": event.kind, "ts": event.ts_us,
                        "latency_s": event.latency_s, "batch_size": event.batch_size,
                        "redelivered": event.redelivered, "consumer": event.consumer})


def now_us() -> int:
    return time.time_ns() // 1000
