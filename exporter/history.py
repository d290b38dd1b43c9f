"""Snapshot history under DIR/snapshots/{channels,consumers,queues}/: the state behind the metrics, as
Parquet (ackscope.core.parquet_log: atomic, rotated, bounded), every poll or every Nth. The Spark pipeline
reads it for prefetch saturation, redelivery hot spots and publisher safety over time."""

from __future__ import annotations

from pathlib import Path

from ackscope.core.parquet_log import ParquetLog
from ackscope.model.schemas import CHANNEL_COUNTS, QUEUE_COUNTS, SNAPSHOTS, TRACE_MESSAGES
from ackscope.model.snapshot import Snapshot


def rows(snapshot: Snapshot) -> dict[str, list[dict]]:
    """The snapshot's channels, consumers and queues as rows of ackscope.model.schemas.SNAPSHOTS (pure)."""
    ts = int(snapshot.taken_at * 1_000_000)
    return {
        "channels": [{"taken_at": ts, "vhost": c.vhost, "channel": c.name, "connection_name": c.connection_name,
                      "user": c.user, "prefetch_count": c.prefetch_count,
                      "global_prefetch_count": c.global_prefetch_count, "prefetch_limit": c.prefetch_limit,
                      "messages_unacked": c.messages_unacked, "messages_unconfirmed": c.messages_unconfirmed,
                      "consumer_count": c.consumer_count, "confirm": c.confirm, "transactional": c.transactional,
                      **{f"{n}_total": getattr(c.message_stats, stat) for n, stat in CHANNEL_COUNTS.items()},
                      "client": c.client, "identity": c.identity or None}
                     for c in snapshot.channels],
        "consumers": [{"taken_at": ts, "vhost": c.vhost, "queue": c.queue, "consumer_tag": c.consumer_tag,
                       "channel": c.channel, "connection_name": c.connection_name,
                       "prefetch_count": c.prefetch_count, "ack_required": c.ack_required,
                       "client": c.client, "identity": c.identity or None}
                      for c in snapshot.consumers],
        "queues": [{"taken_at": ts, "vhost": q.vhost, "queue": q.name, "type": q.type, "durable": q.durable,
                    "messages_ready": q.messages_ready, "messages_unacked": q.messages_unacked,
                    "messages_persistent": q.messages_persistent, "consumers": q.consumers,
                    "consumer_utilisation": q.consumer_utilisation,
                    **{f"{n}_total": getattr(q.message_stats, stat) for n, stat in QUEUE_COUNTS.items()}}
                   for q in snapshot.queues],
    }


class SnapshotHistory:
    def __init__(self, data_dir: str | Path, every: int = 1, rotate_seconds: float = 300.0):
        self.every = every
        self._polls = 0
        self.logs = {kind: ParquetLog(Path(data_dir) / "snapshots" / kind, schema, "taken_at",
                                      f"{kind} snapshots", rotate_seconds=rotate_seconds, max_rows=500_000,
                                      max_buffered=2_000_000)
                     for kind, schema in SNAPSHOTS.items()}

    def record(self, snapshot: Snapshot) -> None:
        """Keep this snapshot if it is the every-th one since the start."""
        self._polls += 1
        if (self._polls - 1) % self.every:
            return
        for kind, kind_rows in rows(snapshot).items():
            if kind_rows:
                self.logs[kind].extend(kind_rows)

    def start(self) -> None:
        for log in self.logs.values():
            log.start()

    def stop(self) -> None:
        for log in self.logs.values():
            log.stop()


def trace_log(data_dir: str | Path, rotate_seconds: float = 300.0) -> ParquetLog:
    """The applications' traced messages under DIR/traces/messages/, a row each as the exporter forgets it
    (ackscope.model.schemas.TRACE_MESSAGES): `ackscope pipeline` audits them per message."""
    return ParquetLog(Path(data_dir) / "traces" / "messages", TRACE_MESSAGES, "published_at", "traced messages",
                      rotate_seconds=rotate_seconds, max_rows=1_000_000, max_buffered=2_000_000)
