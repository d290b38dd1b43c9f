"""The dashboard's landing page at scale, in Debian's chromium (a benchmark, not a test), on a private node.

Builds --queues queues (every tenth with 20 messages) and --connections connections x 3 consuming channels
(prefetch 10, never acking), runs `ackscope exporter` against the node (three exporters, named as three brokers,
for the landing page of several), then `ackscope dashboard` against one, then against the three, and opens the
landing page --loads times, each in a fresh browser context, timing from navigation until it shows:
  - one broker: the findings and the unacked-against-prefetch view (its cells, each fill drawn as a bar);
  - three brokers: every broker's line and the table of their findings.
The first load after the dashboard starts is reported apart. Beside each, what the dashboard's server fetched
from the exporters for one load (its documents, as the exporter sends them).
Target (issue 43): the landing page under 1.5 s at 5,000 queues.

    python bench/dashboard_load.py [--queues 5000] [--connections 200] [--loads 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import requests
from exporter_scale import grow_queues, hold_channels
from playwright.sync_api import sync_playwright

from ackscope.core.processes import stop_process
from ackscope.dashboard.source import DOCUMENTS
from ackscope.workloads.ports import free_port
from ackscope.workloads.private_broker import ADMIN_PASSWORD, ADMIN_USER, LocalBroker

ACKSCOPE = str(Path(sys.executable).with_name("ackscope"))
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]


def _answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=30).status_code == 200
    except requests.RequestException:
        return False


def _until(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"{what}: not within {timeout:.0f} s")
        time.sleep(0.5)


def _exporter(broker: LocalBroker, queues: int) -> tuple[str, subprocess.Popen]:
    port = free_port()
    proc = subprocess.Popen([ACKSCOPE, "--log-level", "warning", "exporter", "--management-url",
                             broker.management_url, "--prometheus-url", broker.prometheus_url, "--username",
                             ADMIN_USER, "--listen", f"127.0.0.1:{port}"],
                            env=dict(os.environ, ACKSCOPE_PASSWORD=ADMIN_PASSWORD))
    url = f"http://127.0.0.1:{port}"

    def polled() -> bool:
        try:
            doc = requests.get(url + "/api/snapshot", timeout=30).json()
            return bool(doc["snapshot"]) and len(doc["snapshot"]["queues"]) >= queues
        except (requests.RequestException, ValueError, KeyError):
            return False
    _until(polled, 600, f"the exporter at {url} to poll {queues} queues")
    return url, proc


def _loads(exporters: list[str], loads: int, shown) -> list[float]:
    """Seconds from navigation until `shown(page)` returns, per load, each in a fresh context."""
    port = free_port()
    given = [arg for url in exporters for arg in ("--exporter-url", url)]
    dashboard = subprocess.Popen([ACKSCOPE, "dashboard", *given, "--port", str(port), "--address", "127.0.0.1"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/"
    try:
        _until(lambda: _answers(url + "_stcore/health"), 120, "the dashboard")
        times = []
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
            for _ in range(loads):
                context = browser.new_context(viewport={"width": 1500, "height": 1300})
                page = context.new_page()
                started = time.perf_counter()
                page.goto(url)
                shown(page)
                times.append(time.perf_counter() - started)
                context.close()
                time.sleep(2)
            browser.close()
        return times
    finally:
        stop_process(dashboard)


def _one_broker(page) -> None:
    page.locator("text=/What is wrong:|No findings at/").first.wait_for(timeout=120_000)
    page.locator("[data-testid=stMarkdown] table").filter(has_text="prefetch limit").locator("td").first \
        .wait_for(timeout=120_000)


def _three_brokers(page) -> None:
    page.locator("text=/Every broker's findings|No findings at warning or above on any broker/").first \
        .wait_for(timeout=120_000)
    page.get_by_role("link", name="Open c").wait_for(timeout=120_000)


def _fetched(url: str, documents: tuple[str, ...]) -> int:
    return sum(len(requests.get(f"{url}/api/{d}", timeout=30).content) for d in documents)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queues", type=int, default=5000)
    ap.add_argument("--connections", type=int, default=200)
    ap.add_argument("--loads", type=int, default=5)
    args = ap.parse_args()
    broker = LocalBroker(name="ackscope-bench-dash")
    broker.start()
    procs: list[subprocess.Popen] = []
    try:
        grow_queues(broker, args.queues)
        held = hold_channels(broker, args.connections, 3, args.queues)
        urls = []
        for _ in range(3):
            url, proc = _exporter(broker, args.queues)
            urls.append(url)
            procs.append(proc)
        one = _loads(urls[:1], args.loads, _one_broker)
        three = _loads([f"{name}={url}" for name, url in zip("abc", urls)], args.loads, _three_brokers)
        print(f"{args.queues:,} queues, {args.connections * 3} consuming channels; {args.loads} loads each")
        print("| landing page | first load | later loads, median | later, max | fetched from the exporters "
              "per load | target |")
        print("|---|---:|---:|---:|---:|---|")
        for name, times, fetched in (
                ("one broker: findings and unacked against prefetch", one, _fetched(urls[0], DOCUMENTS)),
                ("three brokers: each broker and their findings", three,
                 sum(_fetched(u, ("findings",)) for u in urls))):
            rest = times[1:] or times
            print(f"| {name} | {times[0]:.2f} s | {statistics.median(rest):.2f} s | {max(rest):.2f} s | "
                  f"{fetched / 2**20:.2f} MiB | < 1.5 s |")
        del held
    finally:
        for proc in procs:
            stop_process(proc, timeout=30)
        broker.stop()
        broker.remove()
    return 0


if __name__ == "__main__":
    sys.exit(main())
