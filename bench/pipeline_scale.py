"""The Spark pipeline against plain pandas on synthetic probe event logs (a benchmark, not a test).

Generates 1M, 10M, 30M and 100M events (once, kept in --workdir outside the repository) in the documented
schema (docs/events.md): three probes, published → confirmed (in frames of 1–20) → delivered (to the probe's one
consumer, in publish order, so that the order audit runs as on the probes' own logs) → acked, 2%
requeued and redelivered, a few confirmed and never delivered (lost), spread over two days, in files of 100,000
rows like the probes' own rotation. Then, side by side in one run, each in a process of its own:
  - `ackscope pipeline --master local[2]`: all ten reports and summary.json;
  - pandas: the same delivery audit (lost, duplicates, redelivered ...) and the same confirm latency
    percentiles per minute (exact, where Spark's are approximate), reading the same files.
Prints wall time and peak RSS (the process and its children: Spark's JVM) of each, and whether the two
audits agree; pandas is stopped past 20 GiB (the machine has 24). Target: at 100M events, all ten reports in
Spark local[2] within 10 minutes and 4 GiB of RSS. Then `--incremental`: a state built over each of
--incremental-histories (30M events by default), 1M events added and read incrementally, against a full run over
both (reports equal?) and a full run over 1M alone (target: within 2x its time); with --before, the baseline's
code does the same beside it. The results also go to DIR/results.json.

    python bench/pipeline_scale.py [--sizes 1000000,10000000,30000000,100000000] [--workdir DIR]
        [--incremental-histories 30000000,100000000] [--before DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import psutil
import pyarrow as pa
import pyarrow.parquet as pq
from baseline import baseline_command

from ackscope.model.schemas import EVENTS as SCHEMA

PROBES = (("classic-persistent", "classic", True), ("classic-transient", "classic", False),
          ("quorum", "quorum", True))
START_US = int(datetime(2026, 11, 20, tzinfo=UTC).timestamp() * 1_000_000)
SPAN_US = 2 * 86_400 * 1_000_000
ROWS_PER_FILE = 100_000


def _per_slice(target_rows: int) -> tuple[int, int]:
    """(slices, messages per probe in each) of a log of about `target_rows` events: about 5M events a slice."""
    slices = max(1, round(target_rows / 5_000_000))
    return slices, int((target_rows // slices) // (4.06 * len(PROBES)))  # ~4 rows a message, plus requeues


def generate(target_rows: int, out: Path, seed: int = 1) -> int:
    """Write about `target_rows` events under out/events/date=…/; return the exact count. Made a slice of the
    time span at a time, so that 100M events need no more memory than 5M."""
    slices, n = _per_slice(target_rows)
    width = SPAN_US // slices
    return _write([_slice(n, i * n, START_US + i * width, width, np.random.default_rng(seed + i))
                   for i in range(slices)], out, "part")


def extend(history_rows: int, added_rows: int, out: Path, seed: int = 99) -> int:
    """About `added_rows` more events of the same probe runs, after the log of `history_rows` ends, at its rate:
    what the probes write next, as new files in out/events/."""
    slices, n = _per_slice(history_rows)
    added = int(added_rows // (4.06 * len(PROBES)))
    width = SPAN_US // slices * added // n
    return _write([_slice(added, slices * n, START_US + SPAN_US, width, np.random.default_rng(seed))], out, "next")


def _write(chunks, out: Path, prefix: str) -> int:
    """The chunks (each sorted by time) in files of ROWS_PER_FILE rows under out/events/date=…/."""
    rows, files = 0, 0
    for chunk in chunks:
        rows += chunk.num_rows
        for start in range(0, chunk.num_rows, ROWS_PER_FILE):
            part = chunk.slice(start, ROWS_PER_FILE)
            day = part.column("ts")[0].as_py().date().isoformat()
            path = out / "events" / f"date={day}" / f"{prefix}-{files:06d}.parquet"
            path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(part, path, compression="zstd")
            files += 1
    return rows


def _slice(n: int, seq0: int, t0: int, width: int, rng) -> pa.Table:
    """`n` messages of each probe, numbered after `seq0`, published in [t0, t0 + width), with all their events."""
    tables = []
    for p, (probe, queue_type, persistent) in enumerate(PROBES):
        seq = np.arange(seq0 + 1, seq0 + n + 1, dtype=np.int64)  # one run per probe: seq goes on
        published = t0 + np.sort(rng.integers(0, width, n))
        confirm_lat = rng.lognormal(-6.0 if persistent else -7.5, 0.7, n)
        # Frames: consecutive messages settled together, one arrival time per frame.
        frame_id = np.cumsum(rng.random(n) < 1 / 8)
        frame_size = np.bincount(frame_id)[frame_id]
        frame_last = np.maximum.reduceat(published + (confirm_lat * 1e6).astype(np.int64),
                                         np.flatnonzero(np.r_[True, np.diff(frame_id) != 0]))
        confirmed_at = frame_last[frame_id - frame_id[0]]
        deliver_lat = rng.lognormal(-7.0, 0.5, n)
        # One consumer per probe, as the probes run: it receives in publish order.
        delivered_at = np.maximum.accumulate(published + (deliver_lat * 1e6).astype(np.int64))
        lost = rng.random(n) < 1e-4
        requeued = (rng.random(n) < 0.02) & ~lost
        kept = ~lost
        cols = {"seq": [], "kind": [], "ts": [], "latency_s": [], "batch_size": [], "redelivered": [], "consumer": []}

        def add(mask, kind, ts, latency=None, batch=None, redelivered=None):
            k = int(mask.sum())
            cols["seq"].append(seq[mask])
            cols["kind"].append(np.full(k, kind, dtype=object))
            cols["ts"].append(ts[mask])
            cols["latency_s"].append(np.full(k, np.nan) if latency is None else latency[mask])
            cols["batch_size"].append(np.full(k, -1) if batch is None else batch[mask])
            cols["redelivered"].append(np.full(k, -1, dtype=np.int8) if redelivered is None
                                       else np.full(k, redelivered, dtype=np.int8))
            cols["consumer"].append(np.full(k, None if kind != "delivered" else f"ctag-{probe}", dtype=object))

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
            "consumer": pa.array(merged["consumer"], pa.string()),
        }, schema=SCHEMA))
    return pa.concat_tables(tables).sort_by([("ts", "ascending")])


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


PANDAS_LIMIT = 20 * 2**30  # past this the single-process tool is stopped: the machine has 24 GiB


@dataclass
class Measured:
    wall: float
    peak: int
    out: str
    at_mark: float | None
    failure: str | None
    err: str


def measure(command: list[str], mark: str | None = None, limit: int | None = None) -> Measured:
    """Run `command`: wall seconds, peak RSS of the process tree (bytes), stdout, the seconds until a stderr line
    starting with `mark` appeared, and why it failed (stopped past `limit` bytes, or its exit), if it did."""
    started = time.monotonic()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: dict[str, float] = {}
    err_lines: list[str] = []
    out: list[str] = []

    def watch_stderr():
        for line in proc.stderr:
            err_lines.append(line)
            if mark and line.strip().startswith(mark) and mark not in seen:
                seen[mark] = time.monotonic() - started

    threads = [threading.Thread(target=watch_stderr, daemon=True),
               threading.Thread(target=lambda: out.append(proc.stdout.read()), daemon=True)]
    for t in threads:
        t.start()
    peak, failure = 0, None
    ps = psutil.Process(proc.pid)
    while proc.poll() is None:
        try:
            rss = ps.memory_info().rss + sum(c.memory_info().rss for c in ps.children(recursive=True))
            peak = max(peak, rss)
        except psutil.Error:
            pass
        if limit and peak > limit:
            failure = f"stopped past {limit / 2**30:.0f} GiB after {time.monotonic() - started:.0f} s"
            proc.kill()
            break
        time.sleep(0.1)
    proc.wait()
    for t in threads:
        t.join()
    wall = time.monotonic() - started
    if failure is None and proc.returncode != 0:
        last = [line.strip() for line in err_lines if line.strip()][-1:] or ["no message"]
        failure = f"exit {proc.returncode} after {wall:.0f} s: {last[0][:120]}"
    return Measured(wall, peak, "".join(out), seen.get(mark) if mark else None, failure, "".join(err_lines))


def dataset(work: Path, size: int) -> tuple[Path, int]:
    """The event log of `size`, generated once and kept in `work` (a marker says it is complete)."""
    data = work / f"data-{size}"
    done = data / ".rows"
    if done.exists():
        return data, int(done.read_text())
    shutil.rmtree(data, ignore_errors=True)
    rows = generate(size, data)
    done.write_text(str(rows))
    return data, rows


def _reports(out: Path) -> dict[str, list]:
    import pyarrow.dataset as ds

    from ackscope.model.schemas import REPORTS
    return {name: sorted(ds.dataset(out / name, format="parquet", partitioning="hive").to_table().to_pylist(),
                         key=repr) for name in REPORTS}


def _linked(source: Path, target: Path) -> None:
    """`source`'s event files hard-linked under `target`: the same files, another data dir, no copy."""
    for f in (source / "events").rglob("*.parquet"):
        link = target / f.relative_to(source)
        link.parent.mkdir(parents=True, exist_ok=True)
        os.link(f, link)


def incremental(work: Path, commands: dict[str, list[str]], history: int, added: int,
                full_alone: float | None) -> dict:
    """An incremental state built over `history` events, then `added` more read incrementally, by each of
    `commands` (label -> the ackscope command: before and after), against a full run over both and against a
    full run over `added` alone (the target: within 2x its time)."""
    base, rows = dataset(work, history)
    more = work / f"next-{history}-{added}"
    if not (more / ".rows").exists():
        shutil.rmtree(more, ignore_errors=True)
        (more / ".rows").parent.mkdir(parents=True, exist_ok=True)
        (more / ".rows").write_text(str(extend(history, added, more)))
    added_rows = int((more / ".rows").read_text())
    data, full = work / f"inc-data-{history}", work / f"inc-full-{history}"
    for d in (data, full):
        shutil.rmtree(d, ignore_errors=True)
    _linked(base, data)
    options = ["pipeline", "--data-dir", str(data), "--master", "local[2]"]
    outs = {label: work / f"inc-out-{history}-{label}" for label in commands}
    builds = {}
    for label, command in commands.items():
        shutil.rmtree(outs[label], ignore_errors=True)
        builds[label] = measure([*command, *options, "--out", str(outs[label]), "--incremental"])
    _linked(more, data)
    steps = {label: measure([*command, *options, "--out", str(outs[label]), "--incremental"])
             for label, command in commands.items()}
    whole = measure([*commands["after"], *options, "--out", str(full)])
    for m in (*builds.values(), *steps.values(), whole):
        if m.failure:
            raise SystemExit(f"ackscope pipeline failed: {m.failure}\n{m.err[-2000:]}")
    result = {"history": rows, "added": added_rows, "full_s": whole.wall, "full_peak_bytes": whole.peak,
              "full_1m_alone_s": full_alone}
    for label in commands:
        build, step = builds[label], steps[label]
        agree = "yes" if _reports(outs[label]) == _reports(full) else "NO"
        state = sum(f.stat().st_size for f in (outs[label] / "_state").rglob("*") if f.is_file())
        print(f"{rows:>12,} {f'{label}: --incremental':<22} {build.wall:8.1f} {build.peak / 2**20:8.0f} MiB  the "
              f"state built over the history: {state / 2**20:.0f} MiB on disk")
        print(f"{rows + added_rows:>12,} {f'{label}: + incremental':<22} {step.wall:8.1f} "
              f"{step.peak / 2**20:8.0f} MiB  {added_rows:,} events added"
              + (f"; {step.wall / full_alone:.1f}x a full run over 1M alone (target 2x)" if full_alone else "")
              + f"; reports equal to a full run's: {agree}")
        prefix = "" if label == "after" else f"{label}_"
        result.update({f"{prefix}incremental_build_s": build.wall, f"{prefix}incremental_s": step.wall,
                       f"{prefix}incremental_peak_bytes": step.peak, f"{prefix}state_bytes": state,
                       f"{prefix}reports_equal": agree})
    print(f"{rows + added_rows:>12,} {'spark, full run':<22} {whole.wall:8.1f} {whole.peak / 2**20:8.0f} MiB")
    sys.stdout.flush()
    return result


def chart(results: list[dict], path: Path) -> None:
    """Time and peak memory against events, Spark beside pandas (where pandas was stopped, its last point is
    marked), and the incremental run beside the full one."""
    from charts import save_png
    from plotly.subplots import make_subplots

    sizes = [r for r in results if "spark_all_s" in r]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("wall time (s)", "peak RSS (GiB)"))
    events = [r["events"] for r in sizes]
    for col, spark, pandas in ((1, "spark_all_s", "pandas_s"), (2, "spark_peak_bytes", "pandas_peak_bytes")):
        scale = 1 if col == 1 else 2**30
        fig.add_scatter(x=events, y=[r[spark] / scale for r in sizes], name="Spark local[2], all ten reports",
                        mode="lines+markers", line_color="#1f77b4", showlegend=col == 1, row=1, col=col)
        # A pandas run that failed has no time to show; its memory when it was ended is marked with an x.
        shown = [r for r in sizes if col == 2 or not r["pandas_failure"]]
        fig.add_scatter(x=[r["events"] for r in shown], y=[r[pandas] / scale for r in shown],
                        name="pandas, audit + percentiles (x: ended out of memory)", mode="lines+markers",
                        line_color="#d62728", showlegend=col == 1, row=1, col=col, marker_size=10,
                        marker_symbol=["x" if r["pandas_failure"] else "circle" for r in shown])
        added = [r for r in results if "incremental_s" in r]
        fig.add_scatter(x=[r["history"] + r["added"] for r in added], mode="markers", marker_symbol="diamond",
                        y=[(r["incremental_s"] if col == 1 else r["incremental_peak_bytes"]) / scale for r in added],
                        marker_size=12, marker_color="#2ca02c", name="--incremental, 1M events added to the history",
                        showlegend=col == 1, row=1, col=col)
    fig.update_xaxes(type="log", title_text="events")
    fig.update_layout(template="plotly_white", width=1100, height=420, legend=dict(orientation="h", y=-0.25))
    save_png(fig, path, 1100, 460)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000000,10000000,30000000,100000000")
    parser.add_argument("--incremental-histories", default="30000000",
                        help="history sizes an incremental run adds --added events to (empty: none)")
    parser.add_argument("--added", type=int, default=1_000_000)
    parser.add_argument("--before", type=Path,
                        help="a checkout of the baseline's code (git worktree add DIR COMMIT): its incremental runs "
                             "beside this one's")
    parser.add_argument("--chart", type=Path, help="draw the figures as a PNG here (e.g. docs/pipeline_scale.png)")
    parser.add_argument("--from-results", action="store_true",
                        help="only draw --chart from DIR/results.json of an earlier run")
    parser.add_argument("--workdir", default="/var/tmp/ackscope-bench-pipeline",
                        help="where the event logs are generated once and kept (outside the repository)")
    args = parser.parse_args()
    work = Path(args.workdir)
    if args.from_results:
        chart(json.loads((work / "results.json").read_text()), args.chart)
        return 0
    work.mkdir(parents=True, exist_ok=True)
    ackscope = str(Path(sys.executable).with_name("ackscope"))
    commands = {**({"before": baseline_command(args.before, work)} if args.before else {}), "after": [ackscope]}
    results = []
    print(f"{'events':>12} {'engine, work':<22} {'wall s':>8} {'peak RSS':>12}  notes")
    for size in (int(s) for s in args.sizes.split(",")):
        data, rows = dataset(work, size)
        out = work / f"out-{size}"
        shutil.rmtree(out, ignore_errors=True)
        # The command writes the audit, the lost messages and the confirm percentiles first: the time
        # until confirm_latency is done is the like-for-like figure against pandas.
        spark = measure([ackscope, "pipeline", "--data-dir", str(data), "--out", str(out), "--master", "local[2]"],
                        mark="confirm_latency")
        if spark.failure:
            raise SystemExit(f"ackscope pipeline failed at {rows:,} events: {spark.failure}\n{spark.err[-2000:]}")
        summary = json.loads((out / "summary.json").read_text())
        pandas = measure([sys.executable, "-c", PANDAS, str(data / "events")], limit=PANDAS_LIMIT)
        lost = sum(v["lost"] for v in summary["probes"].values())
        agree = "—"
        if not pandas.failure:
            pandas_audit = json.loads(pandas.out)["audit"]
            agree = "yes" if all(pandas_audit[p][k] == summary["probes"][p][k] for p in pandas_audit
                                 for k in ("lost", "duplicates", "delivered")) else "NO"
        print(f"{rows:>12,} {'spark, audit + pcts':<22} {spark.at_mark:8.1f} {'':>12}  JVM start and file checks "
              "included")
        print(f"{rows:>12,} {'spark, all 10 reports':<22} {spark.wall:8.1f} {spark.peak / 2**20:8.0f} MiB  "
              f"{lost} lost")
        print(f"{rows:>12,} {'pandas, audit + pcts':<22} {pandas.wall:8.1f} {pandas.peak / 2**20:8.0f} MiB  "
              + (pandas.failure or f"audits agree: {agree}"))
        sys.stdout.flush()
        results.append({"events": rows, "spark_audit_s": spark.at_mark, "spark_all_s": spark.wall,
                        "spark_peak_bytes": spark.peak, "pandas_s": pandas.wall, "pandas_peak_bytes": pandas.peak,
                        "pandas_failure": pandas.failure, "audits_agree": agree})
    full_1m = next((r["spark_all_s"] for r in results if r["events"] < 1_500_000), None)
    for history in (int(s) for s in args.incremental_histories.split(",") if s):
        results.append(incremental(work, commands, history, args.added, full_1m))
    (work / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(f"results: {work / 'results.json'}")
    if args.chart:
        chart(results, args.chart)
    return 0


if __name__ == "__main__":
    sys.exit(main())
