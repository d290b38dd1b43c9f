"""Rows appended from any thread, written as Parquet files under DIR/date=YYYY-MM-DD/ by a writer thread.

Each file is written whole under a hidden name (Spark and pyarrow skip names starting with '.'), fsynced,
then renamed: a crash never leaves a half-written file where a reader would look. Files rotate by time and
by row count. If writing fails (a full or missing disk), rows stay buffered up to `max_buffered`, the oldest
dropped and counted beyond that, and the trouble is logged once, and once again when it ends.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

log = logging.getLogger("ackscope")


class ParquetLog:
    def __init__(self, directory: str | Path, schema: pa.Schema, time_column: str, what: str,
                 rotate_seconds: float = 60.0, max_rows: int = 100_000, max_buffered: int = 1_000_000):
        self.dir = Path(directory)
        self.schema = schema
        self.time_column = time_column  # microseconds since the epoch, UTC: picks the date partition
        self.what = what  # for the log: "probe events", "queue snapshots"
        self.rotate_seconds = rotate_seconds
        self.max_rows = max_rows
        self.max_buffered = max_buffered
        self.dropped = 0
        self._buffer: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing = False

    def append(self, row: dict[str, Any]) -> None:
        self.extend([row])

    def extend(self, rows: list[dict[str, Any]]) -> None:
        with self._lock:
            self._buffer.extend(rows)
            excess = len(self._buffer) - self.max_buffered
            if excess > 0:
                del self._buffer[:excess]
                self.dropped += excess
            full = len(self._buffer) >= self.max_rows
        if full:
            self._wake.set()

    def start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self._thread = threading.Thread(target=self._run, name=f"ackscope-{self.dir.name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Write what is buffered and stop."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        self.flush()

    def flush(self) -> Path | None:
        """Write the buffered rows now, max_rows to a file; the last file's path, or None when there were
        none (or writing failed: they stay buffered)."""
        with self._lock:
            rows, self._buffer = self._buffer, []
        if not rows:
            return None
        start = 0
        try:
            for start in range(0, len(rows), self.max_rows):  # no file above max_rows
                path = self._write(rows[start:start + self.max_rows])
        except OSError as e:
            rows = rows[start:]
            with self._lock:  # keep them for the next try, within the same bound (the newest win)
                room = max(0, self.max_buffered - len(self._buffer))
                kept = rows[len(rows) - room:] if room else []
                self.dropped += len(rows) - len(kept)
                self._buffer[:0] = kept
            if not self._failing:
                log.error("cannot write %s under %s: %s; keeping them in memory", self.what, self.dir,
                          e.strerror or e)
                self._failing = True
            return None
        if self._failing:
            log.info("%s are written to %s again", self.what, self.dir)
            self._failing = False
        return path

    def _write(self, rows: list[dict[str, Any]]) -> Path:
        first = datetime.fromtimestamp(rows[0][self.time_column] / 1e6, tz=timezone.utc)
        partition = self.dir / f"date={first:%Y-%m-%d}"
        partition.mkdir(parents=True, exist_ok=True)
        name = f"part-{first:%H%M%S}-{os.getpid()}-{uuid.uuid4().hex[:8]}.parquet"
        table = pa.Table.from_pylist(rows, schema=self.schema)
        hidden = partition / f".{name}.tmp"
        with open(hidden, "wb") as f:
            pq.write_table(table, f, compression="zstd")
            f.flush()
            os.fsync(f.fileno())
        final = partition / name
        os.replace(hidden, final)
        return final

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.rotate_seconds)
            self._wake.clear()
            self.flush()
