"""The probe event log: Parquet files under DIR/events/date=YYYY-MM-DD/, the Spark pipeline's input.

Each file is written whole under a hidden name (Spark and pyarrow skip names starting with '.'), then
renamed: a crash never leaves a half-written file where a reader would look. Files rotate by time and
by row count, so none grows without bound and a reader sees events within one rotation interval.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

log = logging.getLogger("ackscope.probes")

# The documented contract (docs/events.md): names, types and meaning do not change without a new column.
SCHEMA = pa.schema([
    pa.field("run_id", pa.string(), nullable=False),
    pa.field("probe", pa.string(), nullable=False),
    pa.field("queue_type", pa.string(), nullable=False),
    pa.field("persistent", pa.bool_(), nullable=False),
    pa.field("seq", pa.int64(), nullable=False),
    pa.field("kind", pa.string(), nullable=False),
    pa.field("ts", pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field("latency_s", pa.float64()),
    pa.field("batch_size", pa.int64()),
    pa.field("redelivered", pa.bool_()),
])
KINDS = ("published", "confirmed", "nacked", "returned", "confirm_timeout", "republished", "delivered", "acked",
         "requeued")


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


class EventLog:
    """Buffers events and writes them as Parquet files, rotated every `rotate_seconds` or `max_rows`.

    Thread-safe: probe threads append, a writer thread flushes. If the buffer reaches `max_buffered`
    (the disk is gone, say), the oldest events are dropped and counted rather than memory growing.
    """

    def __init__(self, data_dir: str | Path, rotate_seconds: float = 60.0, max_rows: int = 100_000,
                 max_buffered: int = 1_000_000):
        self.dir = Path(data_dir) / "events"
        self.rotate_seconds = rotate_seconds
        self.max_rows = max_rows
        self.max_buffered = max_buffered
        self.dropped = 0
        self.files_written = 0
        self._buffer: list[Event] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing = False

    def append(self, event: Event) -> None:
        with self._lock:
            if len(self._buffer) >= self.max_buffered:
                del self._buffer[0]
                self.dropped += 1
            self._buffer.append(event)
            full = len(self._buffer) >= self.max_rows
        if full:
            self._wake.set()

    def start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self._thread = threading.Thread(target=self._run, name="ackscope-events", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Write what is buffered and stop."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        self.flush()

    def flush(self) -> Path | None:
        """Write the buffered events now, max_rows to a file; the last file's path, or None when there
        were none (or writing failed: they stay buffered)."""
        with self._lock:
            events, self._buffer = self._buffer, []
        if not events:
            return None
        try:
            for start in range(0, len(events), self.max_rows):  # no file above max_rows
                path = write_events(self.dir, events[start:start + self.max_rows])
                self.files_written += 1
        except OSError as e:
            events = events[start:]
            with self._lock:  # keep them for the next try, within the same bound (the newest win)
                room = max(0, self.max_buffered - len(self._buffer))
                kept = events[len(events) - room:] if room else []
                self.dropped += len(events) - len(kept)
                self._buffer[:0] = kept
            if not self._failing:
                log.error("cannot write probe events under %s: %s; keeping them in memory", self.dir, e.strerror)
                self._failing = True
            return None
        if self._failing:
            log.info("probe events are written to %s again", self.dir)
            self._failing = False
        return path

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.rotate_seconds)
            self._wake.clear()
            self.flush()


def write_events(events_dir: Path, events: list[Event]) -> Path:
    """Write `events` as one Parquet file in the date partition of the first, atomically; its path."""
    first = datetime.fromtimestamp(events[0].ts_us / 1e6, tz=timezone.utc)
    partition = events_dir / f"date={first:%Y-%m-%d}"
    partition.mkdir(parents=True, exist_ok=True)
    name = f"part-{first:%H%M%S}-{os.getpid()}-{uuid.uuid4().hex[:8]}.parquet"
    table = pa.table({
        "run_id": [e.run_id for e in events],
        "probe": [e.probe for e in events],
        "queue_type": [e.queue_type for e in events],
        "persistent": [e.persistent for e in events],
        "seq": [e.seq for e in events],
        "kind": [e.kind for e in events],
        "ts": [e.ts_us for e in events],
        "latency_s": [e.latency_s for e in events],
        "batch_size": [e.batch_size for e in events],
        "redelivered": [e.redelivered for e in events],
    }, schema=SCHEMA)
    hidden = partition / f".{name}.tmp"
    with open(hidden, "wb") as f:
        pq.write_table(table, f, compression="zstd")
        f.flush()
        os.fsync(f.fileno())
    final = partition / name
    os.replace(hidden, final)
    return final


def now_us() -> int:
    return time.time_ns() // 1000
