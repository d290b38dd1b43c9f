"""History for the dashboard: the pipeline's reports (`--reports`), Prometheus (`--prometheus-url`), and
percentiles between the probe samples the dashboard itself has seen."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import requests

from ackscope.core.quantile import histogram_quantile
from ackscope.model.schemas import REPORTS

MAX_ROWS = 100_000  # a report larger than this is read in part: the page shows aggregates, not raw rows


@dataclass
class Loaded:
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    summary: dict | None = None
    problems: list[str] = field(default_factory=list)


def load(root: str) -> Loaded:
    """The reports under `root`; a missing or unreadable one is a problem line, not an error."""
    loaded = Loaded()
    base = Path(root)
    if not base.is_dir():
        loaded.problems.append(f"no pipeline reports at {root} (run `ackscope pipeline --out {root}`)")
        return loaded
    try:
        loaded.summary = json.loads((base / "summary.json").read_text())
    except (OSError, ValueError):
        loaded.problems.append(f"{root}/summary.json is missing or not JSON")
    for name in REPORTS:
        path = base / name
        if not path.exists():
            continue
        try:
            table = ds.dataset(path, format="parquet", partitioning="hive").head(MAX_ROWS)
            loaded.tables[name] = table.to_pandas()
        except (OSError, pa.ArrowException) as e:
            loaded.problems.append(f"report {name} cannot be read: {str(e).splitlines()[0]}")
    return loaded


def between(df: pd.DataFrame, column: str, start: date, end: date) -> pd.DataFrame:
    """Rows whose `column` falls on the dates start … end (inclusive, UTC)."""
    days = pd.to_datetime(df[column], utc=True).dt.date
    return df[(days >= start) & (days <= end)]


def percentiles_over_time(samples: list[tuple[float, list[dict]]]) -> pd.DataFrame:
    """Confirm latency p50/p99 per target between consecutive samples of /api/probes (bucket increments)."""
    rows = []
    for (_, before), (t, after) in zip(samples, samples[1:]):
        old = {p["target"]: p["histograms"].get("confirm_latency_seconds", []) for p in before}
        for p in after:
            now = p["histograms"].get("confirm_latency_seconds", [])
            prev = dict((str(le), c) for le, c in old.get(p["target"], []))
            delta = [[le, c - prev.get(str(le), 0)] for le, c in now]
            if not delta or delta[-1][1] <= 0:
                continue
            p50, p99 = histogram_quantile(delta, 0.5), histogram_quantile(delta, 0.99)
            rows.append({"time": datetime.fromtimestamp(t), "target": p["target"],
                         "p50_ms": None if p50 is None else p50 * 1000, "p99_ms": None if p99 is None else p99 * 1000})
    return pd.DataFrame(rows, columns=["time", "target", "p50_ms", "p99_ms"])


def prometheus_confirm_p99(url: str, hours: int) -> pd.DataFrame | str:
    """The probes' confirm latency p99 per target over the last `hours` from Prometheus, or why not."""
    end = datetime.now().timestamp()
    step = max(15, int(hours * 3600 / 500))
    start = end - (hours * 3600 // step) * step  # so that the last evaluation falls at `end`, on fresh data
    query = ("histogram_quantile(0.99, sum by (le, target) "
             "(rate(ackscope_probe_confirm_latency_seconds_bucket[5m])))")
    try:
        r = requests.get(f"{url.rstrip('/')}/api/v1/query_range", timeout=10,
                         params={"query": query, "start": start, "end": end, "step": step})
        body = r.json()
    except requests.RequestException:
        return f"Prometheus at {url} cannot be reached"
    except ValueError:
        return f"Prometheus at {url} sent malformed JSON"
    if body.get("status") != "success":
        return f"Prometheus at {url}: {body.get('error', 'query failed')}"
    rows = [{"time": datetime.fromtimestamp(float(t)), "target": series["metric"].get("target", ""),
             "p99_ms": float(v) * 1000}
            for series in body["data"]["result"] for t, v in series["values"] if not math.isnan(float(v))]
    return pd.DataFrame(rows, columns=["time", "target", "p99_ms"])
