"""Exporter at scale, side by side in one run on a private node (a benchmark, not a test).

Builds 5,000 queues and 200 connections x 3 consuming channels, then measures:
  - a full fetch of the same endpoints without columns= (what the older exporter does on every scrape),
  - ackscope's poll from the management API (the exporter's own Poller: fetch, normalise, diagnose-free render),
  - ackscope's poll from the Prometheus plugin (the source for brokers with management statistics off),
    all interleaved, --gap seconds apart, so each meets the broker in the same state; for each, the wall time
    and the broker's CPU time (the node's own process counters, user + system, around the fetch);
  - prometheus_client's parse of the plugin's answer, alone;
  - the broker's own /metrics/per-object;
  - the exporter's scrape p50/p99 (gzip, as Prometheus asks) and its RSS.
Targets: poll <= 0.35x the full fetch; Prometheus-source poll: broker CPU <= 0.25x the full fetch's, whole
poll <= 0.35x; scrape p99 < 50 ms; RSS < 200 MiB. With --statistics-off the node runs as the official
container image does: the full fetch and the management poll are impossible there (400), so the
statistics-free queue list stands beside the Prometheus-source poll.

The broker's cost varies with its background statistics work, so the two are measured in turn, each
--gap seconds (default 15, a common scrape interval) after the last, rather than one after the other in
blocks. The old back-to-back figure is printed beside it for comparison.

    python bench/exporter_scale.py [--queues 5000] [--connections 200] [--channels-per-connection 3]
                                   [--statistics-off]
"""

from __future__ import annotations

import argparse
import gzip
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pika
import psutil
import requests

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from ackscope.core.processes import stop_process
from ackscope.exporter import text_format
from ackscope.exporter.cardinality import shape
from ackscope.exporter.collectors.channels import ChannelCollector
from ackscope.exporter.collectors.connections import ConnectionCollector
from ackscope.exporter.collectors.consumers import ConsumerCollector
from ackscope.exporter.collectors.nodes import NodeCollector
from ackscope.exporter.collectors.overview import OverviewCollector
from ackscope.exporter.collectors.queues import QueueCollector
from ackscope.exporter.collectors.self_metrics import SelfCollector
from ackscope.core.secret import Secret
from ackscope.exporter.poller import Poller
from ackscope.sources import ManagementSource, PrometheusPluginSource
from ackscope.sources.prometheus_plugin import normalise as plugin_normalise
from ackscope.sources.prometheus_plugin.source import QUEUE_COLUMNS, QUEUE_LIST_MAX_AGE
from ackscope.workloads.private_broker import ADMIN_PASSWORD, ADMIN_USER, LocalBroker, free_port

ENDPOINTS = ("overview", "nodes", "vhosts", "connections", "channels", "consumers", "queues")


def build_state(broker: LocalBroker, queues: int, connections: int, per_connection: int) -> list:
    setup = pika.BlockingConnection(pika.URLParameters(broker.amqp_url()))
    ch = setup.channel()
    for i in range(queues):
        ch.queue_declare(f"bench-q-{i:05d}", durable=True)
        if i % 10 == 0:
            for _ in range(20):
                ch.basic_publish("", f"bench-q-{i:05d}", b"x" * 100, pika.BasicProperties(delivery_mode=2))
        if i % 1000 == 999:
            print(f"  {i + 1} queues", file=sys.stderr, flush=True)
    setup.close()
    held = []
    for c in range(connections):
        params = pika.URLParameters(broker.amqp_url())
        params.client_properties = {"connection_name": f"bench-client-{c:03d}"}
        params.heartbeat = 0  # nobody services these sockets while the benchmark runs
        conn = pika.BlockingConnection(params)
        for k in range(per_connection):
            chan = conn.channel()
            chan.basic_qos(prefetch_count=10)
            chan.basic_consume(f"bench-q-{(c * per_connection + k) * 10 % queues:05d}",
                               on_message_callback=lambda *a: None)
        held.append(conn)
    print(f"  {connections} connections x {per_connection} consuming channels", file=sys.stderr, flush=True)
    return held


def render_collectors(poller: Poller) -> list:
    """The collectors the exposition renders for the poller's last snapshot (diagnosis aside)."""
    shaped = shape(poller.snapshot, poller.limits)
    s = poller.snapshot
    return [SelfCollector(poller.status, shaped), OverviewCollector(s), NodeCollector(s), ConnectionCollector(s),
            ChannelCollector(shaped), ConsumerCollector(shaped), QueueCollector(shaped)]


def registry_of(collectors: list) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    for c in collectors:
        registry.register(c)
    return registry


def broker_cpu(broker: LocalBroker) -> float:
    """CPU seconds (user + system) the node's Erlang VM has used so far, from its own process counters."""
    fields = Path(f"/proc/{broker.beam_pid()}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measured(broker: LocalBroker, fn) -> tuple[float, float, object]:
    """(wall seconds, broker CPU seconds, result) of fn()."""
    cpu, started = broker_cpu(broker), time.perf_counter()
    result = fn()
    return time.perf_counter() - started, broker_cpu(broker) - cpu, result


def _timed(fn) -> tuple[float, int]:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started, 0


def timed_get(url: str, **kwargs) -> tuple[float, int]:
    started = time.perf_counter()
    r = requests.get(url, timeout=120, **kwargs)
    r.raise_for_status()
    return time.perf_counter() - started, len(r.content)


def median_of(runs: int, fn) -> tuple[float, int]:
    results = [fn() for _ in range(runs)]
    return statistics.median(t for t, _ in results), results[-1][1]


def _pct(values: list[float], pct: int) -> str:
    ordered = sorted(values)
    return f"{ordered[min(len(ordered) - 1, len(ordered) * pct // 100)] * 1000:.1f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queues", type=int, default=5000)
    ap.add_argument("--connections", type=int, default=200)
    ap.add_argument("--channels-per-connection", type=int, default=3)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--gap", type=float, default=15.0, help="seconds between measured fetches [15]")
    ap.add_argument("--scrapes", type=int, default=300)
    ap.add_argument("--statistics-off", action="store_true", help="run the node with management statistics off")
    args = ap.parse_args()
    stats_on = not args.statistics_off

    broker = LocalBroker(name="ackscope-bench", stats_interval_ms=5000,  # the broker's default interval
                         statistics=stats_on)
    print(f"starting a private node in {broker.base_dir}", file=sys.stderr)
    broker.start()
    exporter = None
    try:
        held = build_state(broker, args.queues, args.connections, args.channels_per_connection)
        time.sleep(12)  # two statistics intervals, so every object has its stats
        auth = (ADMIN_USER, ADMIN_PASSWORD)
        api = broker.management_url + "/api/"

        def full_fetch():
            sizes = 0
            for e in ENDPOINTS if stats_on else ("queues",):  # with statistics off only the list answers
                sizes += timed_get(api + e, auth=auth)[1]
            return sizes

        def poller_of(source):
            poller = Poller(source, interval=args.gap)

            def poll():
                poller.poll_once()
                assert poller.status.up, poller.status.last_error
            return poller, poll

        secret = Secret(ADMIN_PASSWORD)
        pollers = {"plugin": poller_of(PrometheusPluginSource(broker.management_url, broker.prometheus_url,
                                                              ADMIN_USER, secret, timeout=30, deadline=60,
                                                              queue_list_every=math.inf))}
        if stats_on:
            pollers["management"] = poller_of(ManagementSource(broker.management_url, ADMIN_USER, secret,
                                                               timeout=30, deadline=60))
        runs: dict[str, list[tuple[float, float]]] = {"full": [], **{k: [] for k in pollers}}
        for _ in range(args.runs):
            for kind in runs:
                time.sleep(args.gap)
                wall, cpu, _ = measured(broker, full_fetch if kind == "full" else pollers[kind][1])
                runs[kind].append((wall, cpu))
        # The plugin source reads the queue list at its first poll, for a new queue, and every
        # QUEUE_LIST_MAX_AGE in the background (the benchmark's source never: queue_list_every=inf). That
        # read is measured alone here, and weighed in at its share of polls --gap apart.
        plugin_client = pollers["plugin"][0].source.management

        def read_queue_list():
            return plugin_client.fetch("queues", time.monotonic() + 60, columns=QUEUE_COLUMNS, paginate=False,
                                       statistics=False)
        list_reads = []
        for _ in range(args.runs):
            time.sleep(args.gap)
            list_reads.append(measured(broker, read_queue_list)[:2])
        list_wall, list_cpu = (statistics.median(r[i] for r in list_reads) for i in (0, 1))
        full_bytes = full_fetch()
        med = {kind: (statistics.median(w for w, _ in r), statistics.median(c for _, c in r))
               for kind, r in runs.items()}
        for poller, _ in pollers.values():
            poller.stop()
        detailed = requests.get(broker.prometheus_url + "/metrics/detailed", timeout=60,
                                params=[("family", f) for f in plugin_normalise.FAMILIES]).text
        parse_s = median_of(3, lambda: _timed(lambda: plugin_normalise.parse(detailed, "metrics/detailed")))[0]
        library_parse_s = median_of(3, lambda: _timed(lambda: list(text_string_to_metric_families(detailed))))[0]
        collectors = render_collectors(pollers["plugin"][0])
        render_s = median_of(3, lambda: _timed(lambda: text_format.text(collectors)))[0]
        library_render_s = median_of(3, lambda: _timed(lambda: generate_latest(registry_of(collectors))))[0]
        print("runs (wall ms / broker CPU ms): " + "; ".join(
            f"{k}: {', '.join(f'{w * 1000:.0f}/{c * 1000:.0f}' for w, c in r)}" for k, r in runs.items()),
              file=sys.stderr, flush=True)
        per_object_s, per_object_bytes = median_of(args.runs, lambda: timed_get(
            broker.prometheus_url + "/metrics/per-object", headers={"Accept-Encoding": "identity"}))

        port = free_port()
        env = dict(os.environ, ACKSCOPE_PASSWORD=ADMIN_PASSWORD)
        exporter = subprocess.Popen(
            [sys.executable, "-m", "ackscope", "--log-level", "warning", "exporter",
             "--management-url", broker.management_url, "--prometheus-url", broker.prometheus_url,
             "--listen", f"127.0.0.1:{port}", "--interval", "5",
             "--timeout", "30", "--deadline", "60"], env=env)
        metrics_url = f"http://127.0.0.1:{port}/metrics"
        text = ""
        deadline = time.monotonic() + 120
        while "ackscope_up 1.0" not in text and time.monotonic() < deadline:
            time.sleep(2)
            try:
                text = requests.get(metrics_url, timeout=5).text
            except requests.ConnectionError:
                continue
        time.sleep(10)  # a few polls and renders, so the RSS is the steady one
        series = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
        # Served: until the last byte of the gzip body arrived (the exporter's part of a scrape).
        # End to end: plus this Python client's gunzip, which Prometheus does in Go, faster.
        session = requests.Session()
        served, end_to_end = [], []
        for _ in range(args.scrapes):
            started = time.perf_counter()
            response = session.get(metrics_url, headers={"Accept-Encoding": "gzip"}, timeout=10, stream=True)
            body = response.raw.read(decode_content=False)
            served.append(time.perf_counter() - started)
            gzip.decompress(body)
            end_to_end.append(time.perf_counter() - started)
        gz_bytes = len(body)
        rss = psutil.Process(exporter.pid).memory_info().rss

        print()
        print(f"broker state: {args.queues} queues, {args.connections} connections x "
              f"{args.channels_per_connection} consuming channels, management statistics "
              f"{'on' if stats_on else 'off'}; {series} ackscope series")
        full_wall, full_cpu = med["full"]

        def versus(kind: str) -> str:
            wall, cpu = med[kind]
            return f"{wall * 1000:6.0f} ms, broker CPU {cpu * 1000:5.0f} ms", \
                f"wall {wall / full_wall:.2f}x, broker CPU {cpu / full_cpu:.2f}x the baseline"

        baseline = ("full fetch of the same endpoints, no columns= (older exporter)" if stats_on else
                    "the statistics-free queue list, no columns=")
        rows = [
            (baseline, f"{full_wall * 1000:6.0f} ms, broker CPU {full_cpu * 1000:5.0f} ms",
             f"{full_bytes / 1e6:7.2f} MB, median of {args.runs}, {args.gap:g} s apart"),
            ("broker's /metrics/per-object", f"{per_object_s * 1000:6.0f} ms", f"{per_object_bytes / 1e6:7.2f} MB"),
        ]
        if stats_on:
            rows.append(("ackscope poll from the management API", *versus("management")))
        share = min(1.0, args.gap / QUEUE_LIST_MAX_AGE)  # of polls after which the queue list is read
        med["queue list"] = (list_wall, list_cpu)
        med["plugin, averaged"] = (med["plugin"][0], med["plugin"][1] + share * list_cpu)
        rows += [
            ("ackscope poll from the Prometheus plugin", *versus("plugin")),
            ("  its queue list, read in the background", *versus("queue list")),
            (f"  per poll with the list every {QUEUE_LIST_MAX_AGE:g} s, polls {args.gap:g} s apart",
             *versus("plugin, averaged")),
            ("  of which the read of /metrics/detailed: ackscope's reader", f"{parse_s * 1000:6.0f} ms",
             f"{len(detailed) / 1e6:.2f} MB"),
            ("  the same with prometheus_client's parser", f"{library_parse_s * 1000:6.0f} ms", ""),
            ("ackscope's render of the exposition / prometheus_client's generate_latest",
             f"{render_s * 1000:.0f} / {library_render_s * 1000:.0f} ms", "the same bytes"),
            ("ackscope scrape p50 / p99, served (gzip)", f"{_pct(served, 50)} / {_pct(served, 99)} ms",
             f"target p99 < 50 ms; body {gz_bytes / 1e6:.2f} MB gzip"),
            ("ackscope scrape p50 / p99, with client gunzip", f"{_pct(end_to_end, 50)} / {_pct(end_to_end, 99)} ms",
             "for comparison"),
            ("ackscope exporter RSS", f"{rss / 2**20:8.0f} MiB", "target < 200 MiB"),
        ]
        width = max(len(r[0]) for r in rows)
        for name, a, b in rows:
            print(f"{name:<{width}}  {a:>14}  {b}")
        for conn in held:
            conn.close()
    finally:
        if exporter is not None:
            stop_process(exporter, timeout=30)
        broker.stop()
        broker.remove()
    return 0


if __name__ == "__main__":
    sys.exit(main())
