"""Exporter at scale, side by side in one run on a private node kept between sizes (a benchmark, not a test).

Builds 5,000 consuming channels (250 connections x 20, prefetch 10) and, for each size in --queues, grows the
node's durable queues to it (every tenth holding 20 persistent messages), then measures:
  - the naive full fetch: the same 7 endpoints without columns=, unpaginated (the older exporter, per scrape),
  - the broker's own /metrics/per-object,
  - ackscope's poll per source and strategy, each with the exporter's own Poller (fetch, normalise, render):
      management        the management API, lists in one answer above PAGES_UP_TO objects (issue 16),
      management pages  the same in pages of 500, 4 at a time (before issue 16; skipped above 20,000 queues:
                        minutes per poll),
      large             auto's choice on a large broker: the plugin for the queues' counts, the management API
                        for channels, consumers and connections, the queue list every 60 s in the background,
      prometheus        the Prometheus plugin alone (management statistics off),
    interleaved, --gap seconds apart, so each meets the broker in the same state; for each the wall time and
    the broker's CPU seconds (its own process counters, user + system, around the poll). The queue list the
    plugin-based polls read every QUEUE_LIST_MAX_AGE is measured alone and weighed in at its share of polls,
    and so is the channel list the large-broker reading asks for every poll (its floor);
  - `ackscope exporter` with default options (auto, interval 10 s): ackscope_up at every poll, scrape
    p50/p99 (gzip, as Prometheus asks) throughout its polls, its peak RSS and its RSS at each poll;
  - `ackscope dashboard` against it: the landing page's first view in Debian's chromium, from navigation
    until the findings and the unacked-against-prefetch table show (first load after start, and the median
    of the later ones).
Targets: poll <= 0.5x the naive fetch at every size (<= 0.35x at 5,000); ackscope_up 1 on every poll at
50,000 queues; scrape p99 < 50 ms; RSS < 500 MiB; first view < 2 s at 5,000 queues, < 4 s at 50,000.
Writes the table (--table) and a plotly chart of cost against queue count (--chart, PNG drawn by chromium).

    python bench/exporter_scale.py [--queues 5000,20000,50000] [--connections 250]
                                   [--channels-per-connection 20] [--runs 3] [--gap 15]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pika
import plotly.graph_objects as go
import psutil
import requests
from charts import save_png
from playwright.sync_api import sync_playwright
from plotly.subplots import make_subplots

from ackscope.core.processes import stop_process
from ackscope.core.quantile import sample_quantile
from ackscope.core.secret import Secret
from ackscope.exporter.poller import Poller
from ackscope.sources import ManagementSource, PrometheusPluginSource
from ackscope.sources.plugin_source import CONSUMER_LIST_MAX_AGE, QUEUE_COLUMNS, QUEUE_LIST_MAX_AGE
from ackscope.workloads.ports import free_port
from ackscope.workloads.private_broker import ADMIN_PASSWORD, ADMIN_USER, LocalBroker

ENDPOINTS = ("overview", "nodes", "vhosts", "connections", "channels", "consumers", "queues")
ACKSCOPE = str(Path(sys.executable).with_name("ackscope"))
PAGES_LARGEST = 20_000  # above it the paginated poll takes minutes: not run
EXPORTER_POLLS = 12  # polls of the default-options exporter watched per size: long enough to see RSS level off
DASHBOARD_LOADS = 4


def grow_queues(broker: LocalBroker, size: int) -> None:
    """Declare queues bench-q-00000.. up to `size` (those present stay), every tenth with 20 messages."""
    params = pika.URLParameters(broker.amqp_url())
    params.heartbeat = 0  # nobody services the socket between declarations
    setup = pika.BlockingConnection(params)
    ch = setup.channel()
    have = requests.get(broker.management_url + "/api/overview", auth=(ADMIN_USER, ADMIN_PASSWORD),
                        timeout=60).json()["object_totals"]["queues"]
    for i in range(have, size):
        ch.queue_declare(f"bench-q-{i:05d}", durable=True)
        if i % 10 == 0:
            for _ in range(20):
                ch.basic_publish("", f"bench-q-{i:05d}", b"x" * 100, pika.BasicProperties(delivery_mode=2))
        if i % 5000 == 4999:
            print(f"  {i + 1} queues", file=sys.stderr, flush=True)
    setup.close()


def hold_channels(broker: LocalBroker, connections: int, per_connection: int, queues: int) -> list:
    """Named connections, each with consuming channels (prefetch 10) on distinct queues, never acking."""
    held = []
    for c in range(connections):
        params = pika.URLParameters(broker.amqp_url())
        params.client_properties = {"connection_name": f"bench-client-{c:03d}"}
        params.heartbeat = 0
        conn = pika.BlockingConnection(params)
        for k in range(per_connection):
            chan = conn.channel()
            chan.basic_qos(prefetch_count=10)
            chan.basic_consume(f"bench-q-{(c * per_connection + k) % queues:05d}", on_message_callback=lambda *a: None)
        held.append(conn)
    print(f"  {connections} connections x {per_connection} consuming channels", file=sys.stderr, flush=True)
    return held


def broker_cpu(broker: LocalBroker) -> float:
    """CPU seconds (user + system) the node's Erlang VM has used so far, from its own process counters."""
    fields = Path(f"/proc/{broker.beam_pid()}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measured(broker: LocalBroker, fn) -> tuple[float, float]:
    """(wall seconds, broker CPU seconds) of fn()."""
    cpu, started = broker_cpu(broker), time.perf_counter()
    fn()
    return time.perf_counter() - started, broker_cpu(broker) - cpu


def timed_get(url: str, **kwargs) -> int:
    r = requests.get(url, timeout=600, **kwargs)
    r.raise_for_status()
    return len(r.content)


@dataclass
class Size:
    queues: int
    cost: dict[str, tuple[float, float]] = field(default_factory=dict)  # kind: median (wall, broker CPU) s
    full_bytes: int = 0
    per_object: tuple[float, float] = (0.0, 0.0)
    per_object_bytes: int = 0
    ups: list[float] = field(default_factory=list)
    poll_seconds: list[float] = field(default_factory=list)
    scrapes: list[float] = field(default_factory=list)
    rss: int = 0
    rss_per_poll: list[int] = field(default_factory=list)  # the exporter's RSS as each poll was seen
    first_view: float = math.nan
    later_views: list[float] = field(default_factory=list)


def poller_of(source) -> Poller:
    return Poller(source, interval=60)


def measure_polls(broker: LocalBroker, size: Size, runs: int, gap: float, stats_on: bool) -> None:
    auth = (ADMIN_USER, ADMIN_PASSWORD)
    api = broker.management_url + "/api/"
    secret = Secret(ADMIN_PASSWORD)
    common = dict(timeout=600, deadline=900)
    plugin = dict(queue_list_every=math.inf, **common)  # its list is measured apart, below
    listed = dict(consumer_list_every=math.inf, **plugin)  # so is the consumer list of the large-broker reading

    def full_fetch() -> int:
        return sum(timed_get(api + e, auth=auth) for e in (ENDPOINTS if stats_on else ("queues",)))

    pollers = {"prometheus": poller_of(PrometheusPluginSource(broker.management_url, (broker.prometheus_url,),
                                                              ADMIN_USER, secret, **plugin))}
    if stats_on:
        pollers["management"] = poller_of(ManagementSource(broker.management_url, ADMIN_USER, secret, **common))
        if size.queues <= PAGES_LARGEST:
            pollers["management pages"] = poller_of(ManagementSource(broker.management_url, ADMIN_USER, secret,
                                                                     pages_up_to=math.inf, **common))
        pollers["large"] = poller_of(PrometheusPluginSource(broker.management_url, (broker.prometheus_url,),
                                                            ADMIN_USER, secret, channels_listed=True, **listed))
    for poller in pollers.values():  # the first poll reads the queue list: not part of a steady poll
        poller.poll_once()
        assert poller.status.up, poller.status.last_error

    def poll(poller: Poller):
        def once():
            poller.poll_once()
            assert poller.status.up, poller.status.last_error
        return once

    client = pollers["prometheus"].source.management
    jobs = {"full": full_fetch, **{k: poll(p) for k, p in pollers.items()},
            "queue list": lambda: client.fetch("queues", time.monotonic() + 600, columns=QUEUE_COLUMNS,
                                               paginate=False, statistics=False),
            "consumer list": lambda: client.fetch("consumers", time.monotonic() + 600),
            # What the large-broker reading asks the management API for every poll: its floor.
            "channel list": lambda: client.fetch("channels", time.monotonic() + 600, paginate=False),
            "per-object": lambda: timed_get(broker.prometheus_url + "/metrics/per-object",
                                            headers={"Accept-Encoding": "identity"})}
    if not stats_on:
        jobs.pop("full")
        jobs.pop("consumer list")
        jobs.pop("channel list")
    runs_of: dict[str, list[tuple[float, float]]] = {k: [] for k in jobs}
    for run in range(runs):
        for kind, job in jobs.items():
            time.sleep(gap)
            runs_of[kind].append(measured(broker, job))
        print(f"  run {run + 1}: " + "; ".join(f"{k} {w * 1000:.0f}/{c * 1000:.0f} ms"
                                              for k, ((w, c), *_) in ((k, r[-1:]) for k, r in runs_of.items())),
              file=sys.stderr, flush=True)
    for poller in pollers.values():
        poller.stop()
    size.cost = {k: (statistics.median(w for w, _ in r), statistics.median(c for _, c in r))
                 for k, r in runs_of.items()}
    # Of polls after which the queue list (and, for the large-broker reading, the consumer list: it is read
    # again sooner only when the channels' consumer counts change, and nothing changes here) is read.
    share = min(1.0, gap / QUEUE_LIST_MAX_AGE)
    consumers_share = min(1.0, gap / CONSUMER_LIST_MAX_AGE)
    for kind in ("large", "prometheus"):
        if kind in size.cost:
            wall, cpu = size.cost[kind]
            extra = share * size.cost["queue list"][1]
            if kind == "large":
                extra += consumers_share * size.cost["consumer list"][1]
            size.cost[f"{kind}, list included"] = (wall, cpu + extra)
    size.full_bytes = full_fetch() if stats_on else 0
    size.per_object = size.cost.pop("per-object")
    size.per_object_bytes = timed_get(broker.prometheus_url + "/metrics/per-object")


def watch_exporter(broker: LocalBroker, size: Size) -> None:
    """`ackscope exporter` with its defaults: ups per poll, scrapes throughout, RSS; then the dashboard."""
    port, dashboard_port = free_port(), free_port()
    env = dict(os.environ, ACKSCOPE_PASSWORD=ADMIN_PASSWORD)
    # Default options but for where the plugin listens: a real broker's is on the management host's port 15692,
    # this private node's on a free port (without it auto would not find it, and read a large broker the dear way).
    exporter = subprocess.Popen([ACKSCOPE, "--log-level", "warning", "exporter", "--management-url",
                                 broker.management_url, "--prometheus-url", broker.prometheus_url, "--username",
                                 ADMIN_USER, "--listen", f"127.0.0.1:{port}"], env=env)
    dashboard = None
    url = f"http://127.0.0.1:{port}"
    try:
        session = requests.Session()
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                if "ackscope_poll_duration_seconds " in session.get(url + "/metrics", timeout=30).text:
                    break  # the first poll is done
            except requests.RequestException:
                pass
            time.sleep(1)
        process = psutil.Process(exporter.pid)
        stop = threading.Event()

        def scrape_throughout():
            scraper = requests.Session()
            while not stop.is_set():
                started = time.perf_counter()
                r = scraper.get(url + "/metrics", headers={"Accept-Encoding": "gzip"}, timeout=10, stream=True)
                r.raw.read(decode_content=False)
                size.scrapes.append(time.perf_counter() - started)
                size.rss = max(size.rss, process.memory_info().rss)
                stop.wait(0.1)
        scraper = threading.Thread(target=scrape_throughout, daemon=True)
        scraper.start()
        seen = None
        while len(size.ups) < EXPORTER_POLLS and time.monotonic() < deadline + 600:
            text = session.get(url + "/metrics", timeout=10).text
            values = {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
                      if line.startswith(("ackscope_up ", "ackscope_poll_duration_seconds "))}
            attempt = values.get("ackscope_poll_duration_seconds")  # each poll's own figure: a new one, a new poll
            if attempt is not None and attempt != seen:
                seen = attempt
                size.ups.append(values["ackscope_up"])
                size.poll_seconds.append(values["ackscope_poll_duration_seconds"])
                size.rss_per_poll.append(process.memory_info().rss)
            time.sleep(0.5)
        stop.set()
        scraper.join()
        dashboard = subprocess.Popen([ACKSCOPE, "dashboard", "--exporter-url", url, "--port", str(dashboard_port),
                                      "--address", "127.0.0.1"], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        views = first_views(f"http://127.0.0.1:{dashboard_port}/")
        size.first_view, size.later_views = views[0], views[1:]
    finally:
        if dashboard is not None:
            stop_process(dashboard)
        stop_process(exporter, timeout=30)


def first_views(url: str) -> list[float]:
    """Seconds from navigation until the landing page shows its findings and its unacked table, per load,
    each in a fresh browser context (the first after the dashboard started)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if requests.get(url + "_stcore/health", timeout=5).status_code == 200:
                break
        except requests.RequestException:
            time.sleep(0.5)
    times = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium",
                                    args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        for _ in range(DASHBOARD_LOADS):
            context = browser.new_context(viewport={"width": 1500, "height": 1300})
            page = context.new_page()
            started = time.perf_counter()
            page.goto(url)
            page.locator("[data-testid=stMarkdown] table").filter(has_text="prefetch limit").locator("td").first \
                .wait_for(timeout=120_000)
            page.locator("text=/What is wrong:|No findings at/").first.wait_for(timeout=120_000)
            times.append(time.perf_counter() - started)
            context.close()
            time.sleep(2)
        browser.close()
    return times


KINDS = (("management pages", "ackscope, management API in pages (before)"),
         ("management", "ackscope, management API, lists in one answer"),
         ("large, list included", "ackscope, auto on a large broker: plugin for queues"),
         ("prometheus, list included", "ackscope, Prometheus plugin alone"))


def table(sizes: list[Size], channels: int, gap: float) -> str:
    lines = [f"| queues ({channels:,} channels) | " + " | ".join(f"{s.queues:,}" for s in sizes) + " | target |",
             "|---|" + "---:|" * len(sizes) + "---|"]

    def row(name: str, cells, target: str = "") -> None:
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {target} |")

    def cost(kind: str, s: Size) -> str:
        if kind not in s.cost:
            return "not run"
        wall, cpu = s.cost[kind]
        full = s.cost.get("full")
        ratio = f" = **{wall / full[0]:.2f}×** / {cpu / full[1]:.2f}×" if full and kind != "full" else ""
        return f"{wall:.2f} s / {cpu:.2f} s{ratio}"

    row("naive full fetch, no `columns=`, unpaginated: wall / broker CPU", (cost("full", s) for s in sizes),
        "baseline")
    for kind, name in KINDS:
        target = "≤ 0.5× (≤ 0.35× at 5,000)" if kind.startswith("large") else ""
        row(f"{name}: wall / broker CPU, × the naive", (cost(kind, s) for s in sizes), target)
    row("the queue list alone (`disable_stats`, one answer), every 60 s", (cost("queue list", s) for s in sizes))
    row("the channel list alone, with statistics (large-broker reading: every poll)",
        (cost("channel list", s) for s in sizes))
    row("the consumer list alone (large-broker reading: when the channels' counts change, at least every 60 s)",
        (cost("consumer list", s) for s in sizes))
    row("broker's own `/metrics/per-object`", (f"{s.per_object[0]:.2f} s / {s.per_object[1]:.2f} s, "
                                               f"{s.per_object_bytes / 1e6:.0f} MB" for s in sizes))
    row("`ackscope exporter`, default options: `ackscope_up` per poll",
        (f"{' '.join(f'{u:g}' for u in s.ups)}" for s in sizes), "1 at every poll")
    row("  its polls' duration", (", ".join(f"{p:.1f}" for p in s.poll_seconds) + " s" for s in sizes))
    row("  scrape p50 / p99 during its polls (gzip)", (
        f"{sample_quantile(s.scrapes, .5) * 1000:.1f} / **{sample_quantile(s.scrapes, .99) * 1000:.1f} ms** "
        f"({len(s.scrapes)})" for s in sizes), "p99 < 50 ms")
    row("  its peak RSS", (f"**{s.rss / 2**20:.0f} MiB**" for s in sizes), "< 500 MiB")
    row("  its RSS at each poll seen (MiB)", (" ".join(f"{r / 2**20:.0f}" for r in s.rss_per_poll) for s in sizes),
        "flat")
    row("dashboard first view: first load / later loads' median", (
        f"**{s.first_view:.2f} s** / {statistics.median(s.later_views):.2f} s" for s in sizes),
        "< 2 s at 5,000, < 4 s at 50,000")
    return "\n".join(lines) + f"\n\nPolls measured {gap:g} s apart, median of the runs; broker CPU from the node's " \
                              "own process counters.\n"


COLOURS = ("#636efa", "#00cc96", "#ffa15a", "#ef553b", "#ab63fa")  # one per series, the same in both panels


def chart(sizes: list[Size], path: Path) -> None:
    fig = make_subplots(rows=1, cols=2, subplot_titles=("poll wall time, s", "broker CPU per poll, s"))
    xs = [s.queues for s in sizes]
    for (kind, name), colour in zip((("full", "naive full fetch"), *KINDS), COLOURS):
        for col, i in ((1, 0), (2, 1)):
            points = [(s.queues, s.cost[kind][i]) for s in sizes if kind in s.cost]
            fig.add_trace(go.Scatter(x=[p[0] for p in points], y=[p[1] for p in points], mode="lines+markers",
                                     name=name, legendgroup=name, showlegend=col == 1, line={"color": colour}),
                          row=1, col=col)
    for col in (1, 2):
        fig.update_xaxes(title_text="queues", tickvals=xs, row=1, col=col)
        fig.update_yaxes(type="log", row=1, col=col)
    fig.update_layout(width=1200, height=460, margin={"l": 60, "r": 20, "t": 40, "b": 50},
                      legend={"orientation": "h", "y": -0.2})
    save_png(fig, path, 1200, 480)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queues", default="5000,20000,50000", help="sizes, comma-separated, ascending")
    ap.add_argument("--connections", type=int, default=250)
    ap.add_argument("--channels-per-connection", type=int, default=20)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--gap", type=float, default=15.0, help="seconds between measured polls [15]")
    ap.add_argument("--statistics-off", action="store_true", help="run the node with management statistics off")
    ap.add_argument("--table", type=Path, default=Path("/tmp/exporter_scale.md"))
    ap.add_argument("--chart", type=Path, default=Path("docs/exporter_scale.png"))
    args = ap.parse_args()
    stats_on = not args.statistics_off
    counts = sorted(int(q) for q in args.queues.split(","))

    broker = LocalBroker(name="ackscope-bench", stats_interval_ms=5000, statistics=stats_on)  # default interval
    print(f"starting a private node in {broker.base_dir}", file=sys.stderr)
    broker.start()
    held: list = []
    sizes = []
    try:
        grow_queues(broker, counts[0])
        held = hold_channels(broker, args.connections, args.channels_per_connection, counts[0])
        for count in counts:
            grow_queues(broker, count)
            time.sleep(12)  # two statistics intervals, so every object has its stats
            size = Size(count)
            print(f"{count} queues: polls", file=sys.stderr, flush=True)
            measure_polls(broker, size, args.runs, args.gap, stats_on)
            print(f"{count} queues: exporter and dashboard", file=sys.stderr, flush=True)
            watch_exporter(broker, size)
            sizes.append(size)
            print(table(sizes, args.connections * args.channels_per_connection, args.gap), flush=True)
        args.table.write_text(table(sizes, args.connections * args.channels_per_connection, args.gap))
        chart(sizes, args.chart)
    finally:
        for conn in held:
            try:
                conn.close()
            except Exception:  # pika's close can fail on a connection the broker already dropped; the node goes next
                pass
        broker.stop()
        broker.remove()
    return 0


if __name__ == "__main__":
    sys.exit(main())
