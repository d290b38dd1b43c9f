"""The event log's file handling: atomic, rotated by size and time, and nothing lost when the disk fails."""

from __future__ import annotations

import pyarrow.parquet as pq
from helpers import wait_for
from probe_helpers import captured_log

from ackscope.model.schemas import EVENTS as SCHEMA
from ackscope.probes.events import Event, EventLog, now_us


def _event(seq: int) -> Event:
    return Event("run1", "quorum", "quorum", True, seq, "published", now_us())


def test_event_log_rotates_by_row_count_and_time_into_date_partitions(tmp_path):
    log = EventLog(tmp_path, rotate_seconds=0.3, max_rows=10)
    log.start()
    for seq in range(25):
        log.append(_event(seq))
    wait_for(lambda: sum(pq.read_table(f).num_rows for f in (tmp_path / "events").rglob("*.parquet")) == 25,
             timeout=5, what="all 25 events on disk")
    log.stop()
    files = list((tmp_path / "events").rglob("*.parquet"))
    assert len(files) >= 3  # 10 + 10 by size, the rest by time
    assert all(f.parent.name.startswith("date=") for f in files)
    assert all(pq.read_schema(f).remove_metadata() == SCHEMA.remove_metadata() for f in files)


def test_unwritable_event_dir_keeps_events_in_memory_says_so_once_and_writes_them_later(tmp_path):
    log = EventLog(tmp_path, rotate_seconds=3600, max_rows=1000)
    log.dir.parent.mkdir(parents=True, exist_ok=True)
    log.dir.write_text("a file where the events directory should be")
    with captured_log() as lines:
        for seq in range(5):
            log.append(_event(seq))
            assert log.flush() is None
        assert len([line for line in lines if "cannot write probe events" in line]) == 1
        log.dir.unlink()
        written = log.flush()
    assert written is not None and pq.read_table(written).num_rows == 5
    assert any("written to" in line for line in lines)


def test_event_buffer_is_bounded_and_counts_what_it_drops(tmp_path):
    log = EventLog(tmp_path, max_rows=10**9, max_buffered=100)
    for seq in range(150):
        log.append(_event(seq))
    assert log.dropped == 50
    written = log.flush()
    assert [r["seq"] for r in pq.read_table(written).to_pylist()][:1] == [50]
