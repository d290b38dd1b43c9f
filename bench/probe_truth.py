"""The probes' confirm latency against the wire (issue 14), on a private node (a benchmark, not a test).

Runs `ackscope probe` (its default targets) at --rate messages per second with a burst every
--burst-interval seconds, while tshark captures the node's AMQP port on loopback. Then, per target:
each basic.publish on the wire is paired with the basic.ack or basic.nack that settles it (per TCP stream
and channel, counting delivery tags from 1, `multiple` honoured), the k-th publish of a target's channel
with its k-th `published` event in the probe's event log, and ackscope's latency with the wire's:
  - counts (wire, event log), and batch sizes frame for frame;
  - ackscope minus wire per message, p50 / p99 / max, steady traffic and bursts apart (a publish is in a
    burst when more than 25 of its channel's publishes fall within half a second of it);
  - the probe's CPU and RSS over the run.
Targets (issue 14): difference p50 <= 0.3 ms and p99 <= 2 ms, bursts included; counts within 1 %; batch
sizes identical.

Needs tshark (Debian: apt install tshark) and root, for the capture.

    python bench/probe_truth.py [--seconds 60] [--rate 10] [--burst-interval 25]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import psutil
import pyarrow.dataset as ds

from ackscope.core.processes import stop_process
from ackscope.workloads.private_broker import ADMIN_PASSWORD, LocalBroker, free_port

BURST_NEIGHBOURS = 25  # publishes of one channel within ±0.5 s above which a publish counts as in a burst


def wire_confirms(capture: Path, port: int) -> dict[str, list[tuple[float, float | None, int | None]]]:
    """{routing key: [(publish time, settling frame's time, its batch size) by delivery tag]}."""
    # --no-duplicate-keys: a packet carrying many AMQP frames would otherwise repeat the "amqp" key, and a
    # JSON reader keeps only the last one (a burst's publishes went missing that way).
    out = subprocess.run(["tshark", "-r", str(capture), "-d", f"tcp.port=={port},amqp", "-Y", "amqp.method.class == 60",
                          "-T", "json", "--no-duplicate-keys", "-J", "frame tcp amqp"],
                         capture_output=True, check=True).stdout
    publishes: dict[tuple[str, str], list[tuple[float, str]]] = defaultdict(list)
    settles: dict[tuple[str, str], list[tuple[float, int, bool]]] = defaultdict(list)
    for packet in json.loads(out):
        layers = packet["_source"]["layers"]
        t, stream = float(layers["frame"]["frame.time_epoch"]), layers["tcp"]["tcp.stream"]
        to_broker = layers["tcp"]["tcp.dstport"] == str(port)
        frames = layers["amqp"] if isinstance(layers["amqp"], list) else [layers["amqp"]]
        for f in frames:
            method, args = f.get("amqp.method.method"), f.get("amqp.method.arguments", {})
            if f.get("amqp.method.class") != "60":
                continue
            if method == "40" and to_broker:
                publishes[(stream, f["amqp.channel"])].append((t, args.get("amqp.method.arguments.routing_key")))
            elif method in ("80", "120") and not to_broker:  # basic.ack, basic.nack
                settles[(stream, f["amqp.channel"])].append(
                    (t, int(args["amqp.method.arguments.delivery_tag"]), args["amqp.method.arguments.multiple"] == "1"))
    result = {}
    for key, sent in publishes.items():
        settled: dict[int, tuple[float, int]] = {}
        for t, tag, multiple in settles.get(key, []):
            tags = [x for x in (range(1, tag + 1) if multiple else (tag,)) if x not in settled]
            for x in tags:
                settled[x] = (t, len(tags))
        result[sent[0][1]] = [(p[0], *settled.get(i + 1, (None, None))) for i, p in enumerate(sent)]
    return result


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--rate", type=float, default=10.0)
    ap.add_argument("--burst-interval", type=float, default=25.0)
    args = ap.parse_args()
    if shutil.which("tshark") is None:
        print("probe_truth: tshark is not installed (Debian: apt install tshark)", file=sys.stderr)
        return 2
    workdir = Path(tempfile.mkdtemp(prefix="ackscope-truth-"))
    broker = LocalBroker(name="ackscope-truth")
    broker.start()
    try:
        port = int(broker.amqp_url().rsplit(":", 1)[1].split("/")[0])
        capture = workdir / "amqp.pcapng"
        # A 64 MiB capture buffer: a burst of 200 publishes per target must not be dropped.
        tshark = subprocess.Popen(["tshark", "-q", "-B", "64", "-i", "lo", "-f", f"tcp port {port}", "-w",
                                   str(capture)], stderr=subprocess.DEVNULL)
        time.sleep(2)  # the capture is running before the first connection
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
        time.sleep(1)
        tshark.send_signal(signal.SIGINT)
        tshark.wait(timeout=30)

        wire = wire_confirms(capture, port)
        events = ds.dataset(workdir / "data" / "events", partitioning="hive").to_table().to_pandas()
        cpu = (cpu1.user + cpu1.system - cpu0.user - cpu0.system) / elapsed
        print(f"\n{args.seconds:g} s at {args.rate:g} msg/s per target, a burst every {args.burst_interval:g} s; "
              f"probe CPU {cpu * 100:.1f} % of a core, RSS {rss / 2**20:.0f} MiB")
        print(f"{'target':26s} {'confirms wire/log':>18s} {'batches equal':>14s}  "
              f"{'ackscope - wire, ms: p50 / p99 / max':>40s}   {'wire p50/p99':>13s} {'ackscope p50/p99':>17s}")
        for key, messages in sorted(wire.items()):
            name = key.removeprefix("ackscope.probe.")
            mine = events[events.probe == name]
            published = mine[mine.kind == "published"].sort_values("seq")
            confirmed = mine[mine.kind == "confirmed"].set_index("seq")
            times = [m[0] for m in messages]
            diffs: dict[str, list[float]] = {"steady": [], "burst": []}
            wire_ms, ours_ms, equal, paired = [], [], 0, 0
            for i, (seq, (sent, settled, batch)) in enumerate(zip(published.seq, messages)):
                if settled is None or seq not in confirmed.index:
                    continue
                paired += 1
                theirs, ours = (settled - sent) * 1000, confirmed.loc[seq, "latency_s"] * 1000
                near = sum(1 for x in times[max(0, i - 100):i + 100] if abs(x - sent) <= 0.5)
                diffs["burst" if near > BURST_NEIGHBOURS else "steady"].append(ours - theirs)
                wire_ms.append(theirs)
                ours_ms.append(ours)
                equal += int(confirmed.loc[seq, "batch_size"] == batch)
            counts = f"{sum(1 for m in messages if m[1] is not None)}/{len(confirmed)}"
            for part, values in diffs.items():
                if values:
                    spread = f"{percentile(values, .5):.3f} / {percentile(values, .99):.3f} / {max(values):.3f}"
                    print(f"{name + ' ' + part:26s} {counts:>18s} {f'{equal}/{paired}':>14s}  {spread:>40s}   "
                          f"{percentile(wire_ms, .5):6.2f}/{percentile(wire_ms, .99):6.2f} "
                          f"{percentile(ours_ms, .5):8.2f}/{percentile(ours_ms, .99):8.2f}")
    finally:
        broker.stop()
        broker.remove()
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
