"""The Spark pipeline against plain pandas on synthetic probe event logs (a benchmark, not a test).

Generates 1M and 10M events in the documented schema (docs/events.md): three probes, published →
confirmed (in frames of 1–20) → delivered → acked, 2% requeued and redelivered, a few confirmed and never
delivered (lost), spread over two days, in files of 100,000 rows like the probes' own rotation. Then, side by
side in one run, each in a process of its own:
  - `ackscope pipeline --master local[2]`: all ten reports and summary.json;
  - pandas: the same delivery audit (lost, duplicates, redelivered ...) and the same confirm latency
    percentiles per minute (exact, where Spark's are approximate), reading the same files.
Prints wall time and peak RSS (the process and its children: Spark's JVM) of each, and whether the two
audits agree. Target: at 10M events, Spark local[2] no slower than pandas and within 4 GiB.

    python bench/pipeline_scale.py [--sizes 1000000,10000000] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import psutil
import pyarrow as pa
import pyarrow.parquet as pq

from ackscope.model.schemas import EVENTS as SCHEMA

PROBES = (("classic-persistent", "classic", True), ("classic-transient", "classic", False),
          ("quorum", "quorum", True))
START_US = int(datetime(2026, 11, 20, tzinfo=UTC).timestamp() * 1_000_000)
SPAN_US = 2 * 86_400 * 1_000_000
ROWS_PER_FILE = 100_000


def generate(target_rows: int, out: Path, seed: int = 1) -> int:
    """Write about `target_rows` events under out/events/date=…/; return the exact count."""
    rng = np.random.default_rng(seed)
    per_probe = target_rows // (4.06 * len(PROBES))  # ~4 rows a message, plus requeues
    tables = []
    for p, (probe, queue_type, persistent) in enumerate(PROBES):
        n = int(per_probe)
        seq = np.arange(1, n + 1, dtype=np.int64)
        published = START_US + np.sort(rng.integers(0, SPAN_US, n))
        confirm_lat = rng.lognormal(-6.0 if persistent else -7.5, 0.7, n)
        # Frames: consecutive messages settled together, one arrival time per frame.
        frame_id = np.cumsum(rng.random(n) < 1 / 8)
        frame_size = np.bincount(frame_id)[frame_id]
        frame_last = np.maximum.reduceat(published + (confirm_lat * 1e6).astype(np.int64),
                                         np.flatnonzero(np.r_[True, np.diff(frame_id) != 0]))
        confirmed_at = frame_last[frame_id - frame_id[0]]
        deliver_lat = rng.lognormal(-7.0, 0.5, n)
        delivered_at = published + (deliver_lat * 1e6).astype(np.int64)
        lost = rng.random(n) < 1e-4
        requeued = (rng.random(n) < 0.02) & ~lost
        kept = ~lost
        cols = {"seq": [], "kind": [], "ts": [], "latency_s": [], "batch_size": [], "redelivered": []}

        def add(mask, kind, ts, latency=None, batch=None, redelivered=None):
            k = int(mask.sum())
            cols["seq"].append(seq[mask])
            cols["kind"].append(np.full(k, kind, dtype=object))
            cols["ts"].append(ts[mask])
            cols["latency_s"].append(np.full(k, np.nan) if latency is None else latency[mask])
            cols["batch_size"].append(np.full(k, -1) if batch is None else batch[mask])
            cols["redelivered"].append(np.full(k, -1, dtype=np.int8) if redelivered is None
                                       else np.full(k, redelivered, dtype=np.int8))

        every = np.ones(n, dtype=bool)
        add(every, "published", published)
        add(every, "confirmed", confirmed_at, (confirmed_at - published) / 1e6, frame_size)
        add(kept, "delivered", delivered_at, deliver_lat, redelivered=0)
        add(requeued, "requeued", delivered_at + 100)
        redelivered_at = delivered_at + 5_000
        add(requeued, "delivered", redelivered_at, (redelivered_at - published) / 1e6, redelivered=1)
        add(kept, "acked", np.where(requeued, redelivered_at, delivered_at) + 50)
        merged = {k: np.concatenate(v) for k, v in cols.items()}
        rows = len(merged["seq"])
        tables.append(pa.table({
            "run_id": pa.array(np.full(rows, f"run{p:010d}", dtype=object), pa.string()),
            "probe": pa.array(np.full(rows, probe, dtype=object), pa.string()),
            "queue_type": pa.array(np.full(rows, queue_type, dtype=object), pa.string()),
            "persistent": pa.array(np.full(rows, persistent)),
            "seq": merged["seq"],
            "kind": pa.array(merged["kind"], pa.string()),
            "ts": pa.array(merged["ts"], pa.timestamp("us", tz="UTC")),
            "latency_s": pa.array(merged["latency_s"], pa.float64(), from_pandas=True),
            "batch_size": pa.array(merged["batch_size"], pa.int64(), mask=merged["batch_size"] < 0),
            "redelivered": pa.array(merged["redelivered"] == 1, pa.bool_(), mask=merged["redelivered"] < 0),
        }, schema=SCHEMA))
    events = pa.concat_tables(tables).sort_by([("ts", "ascending")])
    for i, start in enumerate(range(0, events.num_rows, ROWS_PER_FILE)):
        chunk = events.slice(start, ROWS_PER_FILE)
        day = chunk.column("ts")[0].as_py().date().isoformat()
        path = out / "events" / f"date={day}" / f"part-{i:06d}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(chunk, path, compression="zstd")
    return events.num_rows


PANDAS = r'''
import json, sys, pandas as pd
events = pd.read_parquet(sys.argv[1], columns=["run_id", "probe", "queue_type", "persistent", "seq", "kind", "ts",
                                               "latency_s"])
deadline = pd.Timedelta(seconds=120)
key = ["run_id", "probe", "seq"]
kinds = events.groupby(key + ["kind"], observed=True).size().unstack("kind", fill_value=0)
confirmed_at = events[events.kind == "confirmed"].groupby(key).ts.min()
run_end = events.groupby(["run_id", "probe"]).ts.max()
msg = kinds.join(confirmed_at.rename("confirmed_at"))
msg = msg.join(run_end.rename("run_end"), on=["run_id", "probe"])
for k in ("returned", "requeued", "nacked"):
    if k not in msg:
        msg[k] = 0
undelivered = msg.confirmed_at.notna() & (msg.returned == 0) & (msg.delivered == 0)
msg["lost"] = undelivered & (msg.confirmed_at + deadline <= msg.run_end)
msg["duplicates"] = (msg.delivered - 1 - msg.requeued).clip(lower=0)
audit = msg.groupby(["run_id", "probe"]).agg(published=("published", lambda s: int((s > 0).sum())),
                                            confirmed=("confirmed", lambda s: int((s > 0).sum())),
                                            delivered=("delivered", lambda s: int((s > 0).sum())),
                                            duplicates=("duplicates", "sum"), lost=("lost", "sum"))
redelivered = events[(events.kind == "delivered")].groupby("probe").size()
confirms = events[events.kind == "confirmed"]
window = confirms.ts.dt.floor("1min")
pct = confirms.groupby([window, confirms.probe, confirms.queue_type, confirms.persistent]).latency_s.quantile(
    [0.5, 0.9, 0.99, 0.999]).unstack()
print(json.dumps({"windows": len(pct), "audit": {p: {k: int(v) for k, v in r.items()}
                                                for (_, p), r in audit.iterrows()}}))
'''


def measure(command: list[str], mark: str | None = None) -> tuple[float, int, str, float | None]:
    """Wall seconds, peak RSS of the process tree (bytes), stdout, and the seconds until a stderr line
    starting with `mark` appeared (None without a mark)."""
    started = time.monotonic()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: dict[str, float] = {}
    err_lines: list[str] = []

    def watch_stderr():
        for line in proc.stderr:
            err_lines.append(line)
            if mark and line.strip().startswith(mark) and mark not in seen:
                seen[mark] = time.monotonic() - started

    watcher = threading.Thread(target=watch_stderr, daemon=True)
    watcher.start()
    peak = 0
    ps = psutil.Process(proc.pid)
    while proc.poll() is None:
        try:
            rss = ps.memory_info().rss + sum(c.memory_info().rss for c in ps.children(recursive=True))
            peak = max(peak, rss)
        except psutil.Error:
            pass
        time.sleep(0.1)
    out = proc.stdout.read()
    watcher.join()
    if proc.returncode != 0:
        raise SystemExit(f"{command[0]} failed ({proc.returncode}):\n{''.join(err_lines)[-2000:]}")
    return time.monotonic() - started, peak, out, seen.get(mark) if mark else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000000,10000000")
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="ackscope-bench-pipeline-"))
    ackscope = str(Path(sys.executable).with_name("ackscope"))
    print(f"{'events':>12} {'engine, work':<22} {'wall s':>8} {'peak RSS':>12}  notes")
    try:
        for size in (int(s) for s in args.sizes.split(",")):
            data = work / f"data-{size}"
            shutil.rmtree(data, ignore_errors=True)
            rows = generate(size, data)
            # The command writes the audit, the lost messages and the confirm percentiles first: the time
            # until confirm_latency is done is the like-for-like figure against pandas.
            t_spark, m_spark, _, t_same = measure([ackscope, "pipeline", "--data-dir", str(data), "--out",
                                                   str(work / f"out-{size}"), "--master", "local[2]"],
                                                  mark="confirm_latency")
            summary = json.loads((work / f"out-{size}" / "summary.json").read_text())
            t_pd, m_pd, out, _ = measure([sys.executable, "-c", PANDAS, str(data / "events")])
            pandas_audit = json.loads(out)["audit"]
            agree = all(pandas_audit[p]["lost"] == summary["probes"][p]["lost"]
                        and pandas_audit[p]["duplicates"] == summary["probes"][p]["duplicates"]
                        and pandas_audit[p]["delivered"] == summary["probes"][p]["delivered"]
                        for p in pandas_audit)
            lost = sum(v["lost"] for v in summary["probes"].values())
            print(f"{rows:>12,} {'spark, audit + pcts':<22} {t_same:8.1f} {'':>12}  JVM start and file checks "
                  f"included")
            print(f"{rows:>12,} {'spark, all 10 reports':<22} {t_spark:8.1f} {m_spark / 2**20:8.0f} MiB  "
                  f"{lost} lost")
            print(f"{rows:>12,} {'pandas, audit + pcts':<22} {t_pd:8.1f} {m_pd / 2**20:8.0f} MiB  "
                  f"audits agree: {'yes' if agree else 'NO'}")
            sys.stdout.flush()
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
