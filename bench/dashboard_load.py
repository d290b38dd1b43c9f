"""Dashboard load time at scale, on a private node (a benchmark, not a test).

Builds 5,000 queues and 200 connections x 3 consuming channels (600 channels), runs `ackscope exporter`
against the node and `ackscope dashboard` against the exporter, then opens the landing page in Debian's
chromium (Playwright) --loads times, each in a fresh browser context, and measures the time from navigation
until the page shows its data: the findings heading and the unacked-against-prefetch chart. The first load
after the dashboard starts (imports, first script run) is reported apart from the rest.
Target: under 5 s.

    python bench/dashboard_load.py [--queues 5000] [--connections 200] [--loads 6]
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
from exporter_scale import build_state
from playwright.sync_api import sync_playwright

from ackscope.core.processes import stop_process
from ackscope.workloads.private_broker import ADMIN_PASSWORD, ADMIN_USER, LocalBroker, free_port

ACKSCOPE = str(Path(sys.executable).with_name("ackscope"))


def wait_http(url: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if requests.get(url, timeout=5).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.5)
    raise SystemExit(f"{url} did not answer within {timeout:.0f} s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queues", type=int, default=5000)
    ap.add_argument("--connections", type=int, default=200)
    ap.add_argument("--channels-per-connection", type=int, default=3)
    ap.add_argument("--loads", type=int, default=6)
    args = ap.parse_args()

    broker = LocalBroker(name="ackscope-bench-dash")
    print(f"starting a private node in {broker.base_dir}", file=sys.stderr)
    broker.start()
    procs: list[subprocess.Popen] = []
    try:
        held = build_state(broker, args.queues, args.connections, args.channels_per_connection)
        exporter_port, dashboard_port = free_port(), free_port()
        env = dict(os.environ, ACKSCOPE_PASSWORD=ADMIN_PASSWORD)
        procs.append(subprocess.Popen([ACKSCOPE, "exporter", "--management-url", broker.management_url,
                                       "--username", ADMIN_USER, "--listen", f"127.0.0.1:{exporter_port}",
                                       "--interval", "10", "--timeout", "30", "--deadline", "30"],
                                      env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        exporter = f"http://127.0.0.1:{exporter_port}"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                snap = requests.get(exporter + "/api/snapshot", timeout=30).json()
                if snap["snapshot"] and len(snap["snapshot"]["queues"]) >= args.queues:
                    break
            except (requests.RequestException, ValueError, KeyError):
                pass
            time.sleep(1)
        size = len(requests.get(exporter + "/api/snapshot", timeout=30).content)
        print(f"exporter has {len(snap['snapshot']['queues'])} queues, {len(snap['snapshot']['channels'])} "
              f"channels; /api/snapshot is {size / 2**20:.1f} MiB", file=sys.stderr)
        procs.append(subprocess.Popen([ACKSCOPE, "dashboard", "--exporter-url", exporter, "--port",
                                       str(dashboard_port), "--address", "127.0.0.1"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        url = f"http://127.0.0.1:{dashboard_port}/"
        wait_http(url + "_stcore/health")
        times = []
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium",
                                        args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
            for _ in range(args.loads):
                context = browser.new_context(viewport={"width": 1500, "height": 1300})
                page = context.new_page()
                started = time.perf_counter()
                page.goto(url)
                page.get_by_text("Unacked against prefetch, per consuming channel").first.wait_for(timeout=60_000)
                page.locator("text=/What is wrong:|No findings at/").first.wait_for(timeout=60_000)
                times.append(time.perf_counter() - started)
                context.close()
                time.sleep(2)
            browser.close()
        rest = times[1:]
        print(f"{'queues':>7} {'channels':>8}  {'first load':>10}  {'later loads median / max':>26}  target")
        print(f"{args.queues:>7} {args.connections * args.channels_per_connection:>8}  {times[0]:9.2f}s  "
              f"{statistics.median(rest):11.2f}s / {max(rest):.2f}s{'':>9}  < 5 s "
              f"{'✓' if max(times) < 5 else '✗'}")
        del held
    finally:
        for proc in procs:
            stop_process(proc)
        broker.stop()
        broker.remove()
    return 0


if __name__ == "__main__":
    sys.exit(main())
