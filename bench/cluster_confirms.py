"""Confirm latency through a cluster's nodes (issue 17), on three private nodes joined into one cluster (a
benchmark, not a test).

A quorum queue and a classic queue are declared through node 1, so both live there: the quorum queue's leader,
the classic queue's home. The probe then publishes (persistent, confirms on, --rate a second, no bursts) and
consumes through one node at a time:
  - quorum, through the leader's node (node 1) and through a follower's (node 2);
  - classic, through its own node (node 1) and through another (node 2).
The cases take turns for --rounds rounds of --seconds each, so a slow minute of the machine falls on all of
them. Per case: confirms, and the exact p50 / p90 / p99 of confirm latency from the probe's event log, side by
side in one table. `--chart PNG` draws them.

    python bench/cluster_confirms.py [--seconds 20] [--rounds 3] [--rate 50] [--chart docs/cluster_confirms.png]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pika
import plotly.graph_objects as go
import pyarrow.dataset as ds
from charts import save_png

from ackscope.core.amqp import Endpoint
from ackscope.core.quantile import sample_quantile
from ackscope.core.secret import Secret
from ackscope.probes.config import ProbeConfig
from ackscope.probes.runner import ProbeSettings
from ackscope.probes.service import Probes
from ackscope.probes.targets import Target
from ackscope_testkit.cluster import LocalCluster

QUANTILES = (0.5, 0.9, 0.99)


@dataclass(frozen=True)
class Case:
    label: str
    queue_type: str
    through: int  # index of the node the probe connects to; the queue lives on node 0


CASES = (Case("quorum via leader's node", "quorum", 0), Case("quorum via a follower's node", "quorum", 1),
         Case("classic via its own node", "classic", 0), Case("classic via another node", "classic", 1))


def target(queue_type: str, rate: float) -> Target:
    return Target(f"bench-{queue_type}", queue_type, True, rate=rate, burst_size=0, requeue_share=0.0).validate()


def run_case(cluster: LocalCluster, case: Case, rate: float, seconds: float, data_dir: Path) -> list[float]:
    """The confirm latencies (s) of one case's run of `seconds`."""
    node = cluster.nodes[case.through]
    url = node.amqp_url()
    cfg = ProbeConfig(entries=(Endpoint(Secret(url), f"amqp://127.0.0.1:{node.ports.amqp}/%2F"),),
                      targets=(target(case.queue_type, rate),), settings=ProbeSettings(), data_dir=str(data_dir))
    probes = Probes(cfg)
    probes.start()
    time.sleep(seconds)
    probes.stop()
    table = ds.dataset(data_dir / "events", partitioning="hive").to_table(
        columns=["kind", "latency_s"], filter=ds.field("kind") == "confirmed")
    return [v for v in table.column("latency_s").to_pylist() if v is not None]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--chart", type=Path)
    args = parser.parse_args()

    cluster = LocalCluster(3, name="ackscope-bench-cluster")
    latencies: dict[str, list[float]] = {c.label: [] for c in CASES}
    try:
        started = time.monotonic()
        cluster.start()
        print(f"three nodes joined in {time.monotonic() - started:.0f} s", file=sys.stderr)
        first = cluster.nodes[0]
        conn = pika.BlockingConnection(pika.URLParameters(first.amqp_url()))
        channel = conn.channel()
        for queue_type in ("quorum", "classic"):  # declared through node 1: led, or homed, there
            t = target(queue_type, args.rate)
            channel.queue_declare(t.queue, durable=True, arguments=t.arguments())
        conn.close()
        with tempfile.TemporaryDirectory(prefix="ackscope-cluster-bench-") as tmp:
            for r in range(args.rounds):
                for i, case in enumerate(CASES):
                    got = run_case(cluster, case, args.rate, args.seconds, Path(tmp) / f"{r}-{i}")
                    latencies[case.label].extend(got)
                    print(f"round {r + 1}: {case.label}: {len(got)} confirms", file=sys.stderr)
    finally:
        cluster.stop()
        cluster.remove()

    print(f"\nconfirm latency, persistent messages at {args.rate:g}/s, {args.rounds} x {args.seconds:g} s per case "
          "(exact, from the probe's event log)\n")
    print("| publishing | confirms | p50 ms | p90 ms | p99 ms |")
    print("|---|---:|---:|---:|---:|")
    for case in CASES:
        v = latencies[case.label]
        q = [sample_quantile(v, p) * 1000 if v else float("nan") for p in QUANTILES]
        print(f"| {case.label} | {len(v)} | " + " | ".join(f"{x:.2f}" for x in q) + " |")
    if args.chart:
        fig = go.Figure()
        for p in QUANTILES:
            fig.add_bar(name=f"p{round(p * 100)}", x=[c.label for c in CASES],
                        y=[sample_quantile(latencies[c.label], p) * 1000 if latencies[c.label] else None
                           for c in CASES])
        fig.update_layout(title="Confirm latency by the node published through (three-node cluster)",
                          yaxis_title="ms", barmode="group")
        save_png(fig, args.chart, 900, 450)
    return 0


if __name__ == "__main__":
    sys.exit(main())
