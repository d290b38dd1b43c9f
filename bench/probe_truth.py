"""The probes' confirm latency against the wire (issue 14), on a private node (a benchmark, not a test).

Runs `ackscope probe` (its default targets) at --rate messages per second with a burst every
--burst-interval seconds, while tshark captures the node's AMQP port on loopback. Then, per target:
each basic.publish on the wire is paired with the basic.ack or basic.nack that settles it (per TCP stream
and channel, counting delivery tags from 1, `multiple` honoured), the k-th publish of a target's channel
with its k-th `published` event in the probe's event log, and ackscope's latency with the wire's:
  - counts (wire, event log), and batch sizes frame for frame;
  - delivery latency (publish to first delivery) the same way;
  - how far the bucket-interpolated p50 and p99 (what /metrics gives) are from the exact ones;
  - ackscope minus wire per message, p50 / p99 / max, steady traffic and bursts apart (a publish is in a
    burst when more than 25 of its channel's publishes fall within half a second of it);
  - the probe's CPU and RSS over the run.
Targets (issue 14): difference p50 <= 0.3 ms and p99 <= 2 ms, bursts included; counts within 1 %; batch
sizes identical.

Needs tshark (Debian: apt install tshark) and root, for the capture.

    python bench/probe_truth.py [--seconds 60] [--rate 10] [--burst-interval 25] [--keep DIR] [--chart PNG]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import plotly.graph_objects as go
import psutil
import pyarrow.dataset as ds
from charts import save_png
from plotly.subplots import make_subplots

from ackscope.core.processes import stop_process
from ackscope.core.quantile import histogram_quantile, sample_quantile
from ackscope.probes.statistics import LATENCY_BUCKETS, Bucketed
from ackscope.workloads.ports import free_port
from ackscope.workloads.private_broker import ADMIN_PASSWORD, LocalBroker
from ackscope_testkit.wire_capture import Capture, compare, read_capture

BUCKET_QUANTILES = (0.5, 0.99)


def bucketed(values_s: list[float]):
    """The cumulative buckets /metrics would show for these latencies (the probes' own histogram)."""
    histogram = Bucketed(LATENCY_BUCKETS)
    for v in values_s:
        histogram.observe(v)
    return histogram.frozen().buckets


def spread(values: list[float]) -> str:
    """p50 / p99 / max of per-message differences, ms."""
    return f"{sample_quantile(values, .5):.3f} / {sample_quantile(values, .99):.3f} / {max(values):.3f}"


def chart(results, path: Path) -> None:
    """Both confirm latency distributions per target (empirical CDFs, log scale), as a PNG drawn by chromium."""
    fig = make_subplots(rows=1, cols=len(results), subplot_titles=[c.target for c in results], shared_yaxes=True)
    for col, c in enumerate(results, start=1):
        for label, values, colour in (("wire (tshark)", c.confirm_wire, "#1f77b4"),
                                      ("ackscope event log", c.confirm_ours, "#d62728")):
            ordered = sorted(values)
            fig.add_trace(go.Scatter(x=ordered, y=[(i + 1) / len(ordered) for i in range(len(ordered))],
                                     mode="lines", line={"shape": "hv", "color": colour}, name=label,
                                     showlegend=col == 1), row=1, col=col)
        fig.update_xaxes(type="log", title_text="confirm latency, ms", row=1, col=col)
    fig.update_yaxes(title_text="share of messages", row=1, col=1)
    fig.update_layout(width=1200, height=420, margin={"l": 60, "r": 20, "t": 40, "b": 50},
                      legend={"orientation": "h", "y": -0.25})
    save_png(fig, path, 1240, 440)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--rate", type=float, default=10.0)
    ap.add_argument("--burst-interval", type=float, default=25.0)
    ap.add_argument("--keep", type=Path, help="keep the capture and the event log in this directory")
    ap.add_argument("--chart", type=Path, help="draw both confirm latency distributions into this PNG")
    args = ap.parse_args()
    if shutil.which("tshark") is None:
        print("probe_truth: tshark is not installed (Debian: apt install tshark)", file=sys.stderr)
        return 2
    workdir = args.keep or Path(tempfile.mkdtemp(prefix="ackscope-truth-"))
    workdir.mkdir(parents=True, exist_ok=True)
    broker = LocalBroker(name="ackscope-truth")
    broker.start()
    try:
        port = int(broker.amqp_url().rsplit(":", 1)[1].split("/")[0])
        capture = workdir / "amqp.pcapng"
        with Capture(capture, port):
            url = broker.amqp_url().replace(f":{ADMIN_PASSWORD}@", "@")
            probe = subprocess.Popen(
                [sys.executable, "-m", "ackscope", "--log-level", "warning", "probe", "--amqp-url", url, "--listen",
                 f"127.0.0.1:{free_port()}", "--rate", str(args.rate), "--burst-interval", str(args.burst_interval),
                 "--data-dir", str(workdir / "data")], env=dict(os.environ, ACKSCOPE_AMQP_PASSWORD=ADMIN_PASSWORD))
            process = psutil.Process(probe.pid)
            started, cpu0 = time.monotonic(), process.cpu_times()
            time.sleep(args.seconds)
            cpu1, rss = process.cpu_times(), process.memory_info().rss
            elapsed = time.monotonic() - started
            stop_process(probe, timeout=30)
            time.sleep(1)  # the last frames of the closing handshake

        events = ds.dataset(workdir / "data" / "events", partitioning="hive").to_table().to_pandas()
        results = compare(read_capture(capture, port), events)
        cpu = (cpu1.user + cpu1.system - cpu0.user - cpu0.system) / elapsed
        print(f"\n{args.seconds:g} s at {args.rate:g} msg/s per target, a burst every {args.burst_interval:g} s; "
              f"probe CPU {cpu * 100:.1f} % of a core, RSS {rss / 2**20:.0f} MiB")
        print("\nConfirm latency, ackscope minus wire, ms (p50 / p99 / max), per message:")
        print(f"{'target':26s} {'confirms wire/log':>18s} {'batches equal':>14s} {'p50 / p99 / max':>26s}"
              f"   {'wire p50/p99':>13s} {'ackscope p50/p99':>17s}")
        for c in results:
            for part, values in c.confirm_diff.items():
                if values:
                    print(f"{c.target + ' ' + part:26s} {f'{c.wire_confirms}/{c.logged_confirms}':>18s} "
                          f"{f'{c.batches_equal}/{c.paired}':>14s} {spread(values):>26s}   "
                          f"{sample_quantile(c.confirm_wire, .5):6.2f}/{sample_quantile(c.confirm_wire, .99):6.2f} "
                          f"{sample_quantile(c.confirm_ours, .5):8.2f}/{sample_quantile(c.confirm_ours, .99):8.2f}")
        print("\nWhen a publish left: the wire's time minus the event log's (the socket's write), ms "
              "(p50 / p99 / max):")
        for c in results:
            for part, values in c.send_diff.items():
                if values:
                    print(f"{c.target + ' ' + part:26s} {spread(values)}")
        print("\nDelivery latency (publish -> first delivery), ackscope minus wire, ms (p50 / p99 / max):")
        for c in results:
            print(f"{c.target:26s} {len(c.delivery_diff):6d} messages  {spread(c.delivery_diff)}")
        print("\nHistogram precision: the bucket-interpolated percentile against the exact one, event log latencies:")
        for kind in ("confirmed", "delivered"):
            for target, group in events[events.kind == kind].groupby("probe"):
                values = group.latency_s.tolist()
                buckets = bucketed(values)
                errors = "  ".join(f"p{q * 100:g} {sample_quantile(values, q) * 1000:7.2f} ms exact, "
                                   f"{(histogram_quantile(buckets, q) / sample_quantile(values, q) - 1) * 100:+5.1f} %"
                                   for q in BUCKET_QUANTILES)
                print(f"{kind:10s} {target:22s} {errors}")
        if args.chart:
            chart(results, args.chart)
            print(f"\nchart: {args.chart}")
    finally:
        broker.stop()
        broker.remove()
        if args.keep is None:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
