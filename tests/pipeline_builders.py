"""Handcrafted probe event logs and snapshot histories for the pipeline's tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from ackscope.model.schemas import EVENTS, REPORTS, TRACE_MESSAGES
from ackscope.model.schemas import SNAPSHOTS as SCHEMAS

T0 = datetime(2026, 11, 21, 3, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


class Log:
    """Events of one probe target, written in the order a probe would see them."""

    def __init__(self, run_id: str = "run1", probe: str = "classic-persistent", queue_type: str = "classic",
                 persistent: bool = True, consumer: str | None = None):
        """`consumer`: the consumer tag its deliveries name (None: a log written before the probes named it)."""
        self.target = dict(run_id=run_id, probe=probe, queue_type=queue_type, persistent=persistent)
        self.consumer = consumer
        self.rows: list[dict] = []

    def add(self, seq: int, kind: str, t: float, latency_s: float | None = None, batch_size: int | None = None,
            redelivered: bool | None = None, consumer: str | None = None) -> Log:
        self.rows.append({**self.target, "seq": seq, "kind": kind, "ts": at(t), "latency_s": latency_s,
                          "batch_size": batch_size, "redelivered": redelivered,
                          "consumer": (consumer or self.consumer) if kind == "delivered" else None})
        return self

    def happy(self, seq: int, t: float) -> Log:
        """Published at t, delivered 2 ms later, acked, confirmed alone 5 ms after publishing."""
        return (self.add(seq, "published", t).add(seq, "delivered", t + 0.002, 0.002, redelivered=False)
                .add(seq, "acked", t + 0.003).add(seq, "confirmed", t + 0.005, 0.005, batch_size=1))


def frame(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(rows, EVENTS)


def _df(spark, schema: pa.Schema, rows: list[dict]):
    from ackscope.pipeline.inputs import spark_schema
    return spark.createDataFrame([tuple(r.get(n) for n in schema.names) for r in rows], spark_schema(schema))


def events_df(spark, *logs: Log):
    return _df(spark, EVENTS, [r for log in logs for r in log.rows])


def snapshot_df(spark, kind: str, rows: list[dict]):
    """Snapshot rows of `kind`; `taken_at` in seconds after T0, missing fields null."""
    return _df(spark, SCHEMAS[kind], [{**r, "taken_at": at(r["taken_at"])} for r in rows])


def write_events(data_dir: Path, *logs: Log, name: str = "part-000001.parquet") -> Path:
    rows = [r for log in logs for r in log.rows]
    day = min(r["ts"] for r in rows).date().isoformat()
    path = data_dir / "events" / f"date={day}" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(frame(rows), path, compression="zstd")
    return path


def rows_of(df, order: list[str]) -> list[dict]:
    return [r.asDict() for r in df.orderBy(*order).collect()]


def write_snapshots(data_dir: Path, kind: str, rows: list[dict], name: str = "part-000001.parquet",
                    schema: pa.Schema | None = None) -> Path:
    """Snapshot history rows of `kind` (`taken_at` in seconds after T0, missing fields null) as the exporter
    writes them, or as a writer of an older `schema` did."""
    schema = schema or SCHEMAS[kind]
    table = pa.Table.from_pylist([{n: at(r["taken_at"]) if n == "taken_at" else r.get(n) for n in schema.names}
                                  for r in rows], schema)
    path = data_dir / "snapshots" / kind / f"date={at(rows[0]['taken_at']).date().isoformat()}" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, compression="zstd")
    return path


def read_reports(out: Path) -> dict[str, list[dict]]:
    """Every report under `out`, its rows in a stable order: two runs' reports compare with ==."""
    return {name: sorted(ds.dataset(out / name, format="parquet", partitioning="hive").to_table().to_pylist(),
                         key=repr) for name in REPORTS}


def traced(published: float, delivered: float | None, destination: str = ",orders", service: str = "shop",
           consumer: str | None = "billing", **kw) -> dict:
    """One traced message as the exporter writes it (ackscope.model.schemas.TRACE_MESSAGES); times in seconds
    after T0, `delivered` None for none."""
    return {"published_at": at(published), "destination": destination, "service": service, "exchange": "",
            "queue": destination.lstrip(","), "consumer": consumer if delivered is not None else None,
            "delivered_at": at(delivered) if delivered is not None else None, "processing_s": kw.pop("processing_s",
                                                                                                      None),
            "deliveries": kw.pop("deliveries", 0 if delivered is None else 1), "duplicates": kw.pop("duplicates", 0),
            "redelivered": kw.pop("redelivered", 0), "publish_error": kw.pop("publish_error", False), **kw}


def traces_df(spark, rows: list[dict]):
    return _df(spark, TRACE_MESSAGES, rows)


def write_traces(data_dir: Path, rows: list[dict], name: str = "part-000001.parquet") -> Path:
    path = data_dir / "traces" / "messages" / f"date={rows[0]['published_at'].date().isoformat()}" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, TRACE_MESSAGES), path, compression="zstd")
    return path
