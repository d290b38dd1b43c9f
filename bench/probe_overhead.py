"""Probe overhead and timing accuracy, on a private node (a benchmark, not a test).

Runs `ackscope probe` with its default targets and rates (5 msg/s each plus a burst of 200 every 60 s) for
--seconds, and measures:
  - its CPU (share of one core) and RSS;
  - its confirm latency for the classic persistent target, against a minimal independent measurement in
    the same run: a second client that publishes one persistent message at a time into the same queue
    (the probe's consumer acks and ignores messages that are not its own) and times basic_publish until
    the broker's basic.ack (pika, blocking, confirm mode). Same queue, same consumer, same moment: what
    differs is how each side takes its timestamps. The probe's figure comes from its event log,
    single-message confirm frames only (burst frames settle many messages at once: batching, not the
    round trip).
Targets: CPU < 5% of one core; RSS < 150 MiB; |p50 difference| <= 0.3 ms.

    python bench/probe_overhead.py [--seconds 150]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import pika
import psutil
import pyarrow.dataset as ds

from ackscope.core.processes import stop_process
from ackscope.probes.targets import DEFAULT_TARGETS, EXCHANGE
from ackscope.workloads.ports import free_port
from ackscope.workloads.private_broker import ADMIN_PASSWORD, LocalBroker

QUEUE = DEFAULT_TARGETS[0].queue  # classic-persistent


def independent_latencies(url: str, stop: threading.Event, rate: float = 5.0) -> list[float]:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    ch.confirm_delivery()
    props = pika.BasicProperties(delivery_mode=2)
    out = []
    while not stop.is_set():
        started = time.perf_counter()
        ch.basic_publish(EXCHANGE, QUEUE, b"not a probe message".ljust(128), props)  # returns on basic.ack
        out.append(time.perf_counter() - started)
        time.sleep(max(0.0, 1 / rate - (time.perf_counter() - started)))
    conn.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=150.0, help="how long the probe runs [150: two bursts]")
    args = ap.parse_args()
    broker = LocalBroker(name="ackscope-probebench", stats_interval_ms=5000)
    broker.start()
    data_dir = tempfile.mkdtemp(prefix="ackscope-probebench-")
    port = free_port()
    env = dict(os.environ, ACKSCOPE_AMQP_PASSWORD=ADMIN_PASSWORD)
    probe = subprocess.Popen([sys.executable, "-m", "ackscope", "--log-level", "warning", "probe",
                              "--amqp-url", broker.amqp_url().replace(f":{ADMIN_PASSWORD}@", "@"),
                              "--listen", f"127.0.0.1:{port}", "--data-dir", data_dir], env=env)
    try:
        proc = psutil.Process(probe.pid)
        time.sleep(5)  # connected and declared: measure the steady state from here
        stop = threading.Event()
        result: list[float] = []
        thread = threading.Thread(target=lambda: result.extend(independent_latencies(broker.amqp_url(), stop)))
        thread.start()
        cpu0, wall0 = proc.cpu_times(), time.monotonic()
        time.sleep(args.seconds)
        cpu1, wall1 = proc.cpu_times(), time.monotonic()
        rss = proc.memory_info().rss
        stop.set()
        thread.join()
    finally:
        stop_process(probe, timeout=30)
        broker.stop()
        broker.remove()
    cpu_share = ((cpu1.user + cpu1.system) - (cpu0.user + cpu0.system)) / (wall1 - wall0)
    table = ds.dataset(os.path.join(data_dir, "events"), format="parquet", partitioning="hive").to_table()
    rows = [r for r in table.to_pylist() if r["kind"] == "confirmed" and r["probe"] == "classic-persistent"]
    singles = [r["latency_s"] for r in rows if r["batch_size"] == 1]
    probe_p50, independent_p50 = statistics.median(singles), statistics.median(result)
    published = sum(1 for r in table.to_pylist() if r["kind"] == "published")
    print()
    print(f"ackscope probe, default targets and rates, {args.seconds:.0f} s ({published} messages published)")
    print(f"  CPU                {cpu_share * 100:6.2f} % of one core    target < 5 %")
    print(f"  RSS                {rss / 2**20:6.0f} MiB              target < 150 MiB")
    print(f"  confirm p50, classic persistent: probe {probe_p50 * 1000:.3f} ms ({len(singles)} single-message "
          f"frames), independent client {independent_p50 * 1000:.3f} ms ({len(result)} publishes)")
    print(f"  difference         {abs(probe_p50 - independent_p50) * 1000:6.3f} ms             target <= 0.3 ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
