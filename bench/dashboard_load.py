"""The dashboard's landing page at scale, in Debian's chromium (a benchmark, not a test), on a private node.

Builds --queues queues (every tenth with 20 messages) and --connections connections x 3 consuming channels
(prefetch 10, never acking). Then, for this checkout (and with --before, a baseline's checkout first), runs
`ackscope exporter` against the node and `ackscope dashboard` against it, then three exporters (named as three
brokers) and the dashboard against the three, and opens the landing page --loads times, each in a fresh browser
context, then --loads times again in one context that has loaded it once (a browser that has been there before:
Streamlit's scripts come from its cache), timing from navigation until it shows:
  - one broker: the findings and the unacked-against-prefetch view (its cells, each fill drawn as a bar);
  - three brokers: every broker's line and the table of their findings.
The exporters poll every --exporter-interval seconds (their default, 10); only the phase's own exporters run. With
--apart, the node, its clients and the exporters run on one core and the dashboard and chromium on the other (it
measured slower than sharing both: no model of two machines). The first load after the dashboard starts is
reported apart. Beside each, what the dashboard's server fetched from the exporters for one load: the documents it
asked for (seen by one more load through the suite's proxy, untimed), at their size when the exporter has polled
since the last fetch.
Beside the one broker's landing page, Streamlit's own floor: a page of a title and one line, served by the
dashboard's own server with its settings and loaded the same way, then again with Streamlit's default of watching
the sources (which the dashboard turns off); and, for each page, where a fresh load's time goes (until the
document's scripts have run, the websocket opens, the server's last message before the page shows).
Target (issue 43): the landing page under 1.5 s at 5,000 queues.

    python bench/dashboard_load.py [--queues 5000] [--connections 200] [--loads 5] [--exporter-interval 10]
                                   [--apart] [--before DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import requests
from baseline import baseline_command
from exporter_scale import grow_queues, hold_channels
from playwright.sync_api import sync_playwright

from ackscope.core.processes import stop_process
from ackscope.dashboard.launch import APP, streamlit_command
from ackscope.workloads.ports import free_port
from ackscope.workloads.private_broker import ADMIN_PASSWORD, ADMIN_USER, LocalBroker
from ackscope_testkit.fault_proxy import FaultProxy

ACKSCOPE = [str(Path(sys.executable).with_name("ackscope"))]
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]
# With --apart: the cores of the node's side (the node, its clients, the exporters) and of the dashboard's (its
# server and chromium). A process started from a thread takes that thread's cores.
BROKER_SIDE, DASHBOARD_SIDE = {1}, {0}

FLOOR = "Streamlit's floor: a title and one line"
FLOOR_WATCHING = "Streamlit's floor, watching its sources (Streamlit's default)"


@dataclass(frozen=True)
class Load:
    """One load's seconds from navigation: until `shown`; until the document's scripts had run
    (DOMContentLoaded); until the page opened its websocket to the server, and until the last message from the
    server before `shown`."""
    shown: float
    scripts_run: float
    websocket: float
    last_message: float


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


def _listed_consumers(broker: LocalBroker) -> int:
    try:
        return requests.get(broker.management_url + "/api/overview", auth=(ADMIN_USER, ADMIN_PASSWORD),
                            timeout=30).json()["object_totals"]["consumers"]
    except (requests.RequestException, ValueError, KeyError):
        return 0


def _exporter(command: list[str], broker: LocalBroker, queues: int, interval: float) -> tuple[str, subprocess.Popen]:
    port = free_port()
    proc = subprocess.Popen([*command, "--log-level", "warning", "exporter", "--management-url",
                             broker.management_url, "--prometheus-url", broker.prometheus_url, "--username",
                             ADMIN_USER, "--listen", f"127.0.0.1:{port}", "--interval", str(interval)],
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


def _dashboard(command: list[str], given: list[str], loads: int, shown,
               again: bool = True) -> tuple[list[Load], list[Load]]:
    """`ackscope dashboard` (of `command`, given `given`) loaded `loads` times until `shown(page)` returns: each
    in a fresh context, then (with `again`) as many in one context that has loaded the page once (a browser that
    has been there before)."""
    port = free_port()
    return _served([*command, "dashboard", *given, "--port", str(port), "--address", "127.0.0.1"], port, loads,
                   shown, again)


def _floor(work: Path, loads: int, watching: bool) -> tuple[list[Load], list[Load]]:
    """Streamlit's own floor: a page of a title and one line, served as the dashboard is (its server, which has
    imported the pages' libraries, and its settings), loaded as the landing page is. With `watching`, Streamlit
    watches the sources for edits, its default, which the dashboard turns off (dashboard/launch.py)."""
    app = work / "floor.py"
    app.write_text('import streamlit as st\nst.title("floor")\nst.markdown("one line of the floor")\n')
    port = free_port()
    server = streamlit_command(port, "127.0.0.1")
    server[server.index(str(APP))] = str(app)
    if watching:
        at = server.index("--server.fileWatcherType")
        del server[at:at + 2]
    return _served(server, port, loads, lambda page: page.get_by_text("one line of the floor").wait_for(
        timeout=120_000), again=True)


def _served(server: list[str], port: int, loads: int, shown, again: bool) -> tuple[list[Load], list[Load]]:
    cores = os.sched_getaffinity(0)
    if cores == BROKER_SIDE:  # --apart: the dashboard, playwright's driver and its chromium on the other side
        os.sched_setaffinity(0, DASHBOARD_SIDE)
    try:
        return _loads(server, port, loads, shown, again)
    finally:
        os.sched_setaffinity(0, cores)


def _loads(server: list[str], port: int, loads: int, shown, again: bool) -> tuple[list[Load], list[Load]]:
    process = subprocess.Popen(server, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/"
    try:
        _until(lambda: _answers(url + "_stcore/health"), 120, "the dashboard")
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)

            def timed(page) -> Load:
                opened_at: list[float] = []
                messages: list[float] = []

                def opened(ws) -> None:
                    opened_at.append(time.perf_counter() - started)
                    ws.on("framereceived", lambda _: messages.append(time.perf_counter() - started))
                page.on("websocket", opened)
                started = time.perf_counter()
                page.goto(url)
                shown(page)
                took = time.perf_counter() - started
                ran = page.evaluate("performance.getEntriesByType('navigation')[0].domContentLoadedEventEnd")
                page.remove_listener("websocket", opened)
                time.sleep(2)
                return Load(took, ran / 1000, min(opened_at, default=took),
                            max((t for t in messages if t <= took), default=took))
            fresh = []
            for _ in range(loads):
                context = browser.new_context(viewport={"width": 1500, "height": 1300})
                fresh.append(timed(context.new_page()))
                context.close()
            # Streamlit's scripts are named by their content and cached for a year: a browser that has loaded the
            # page once compiles none of them again.
            reloads = []
            if again:
                page = browser.new_context(viewport={"width": 1500, "height": 1300}).new_page()
                timed(page)
                reloads = [timed(page) for _ in range(loads)]
            browser.close()
        return fresh, reloads
    finally:
        stop_process(process)


def _fetched(command: list[str], urls: list[str], named: bool, shown) -> int:
    """The bytes of the documents one load of the landing page asks each exporter for."""
    proxies = [FaultProxy(u) for u in urls]  # no fault set: it passes every answer on, noting what was asked
    given = [arg for name, p in zip("abc", proxies) for arg in ("--exporter-url", f"{name}={p.url}" if named
                                                                 else p.url)]
    try:
        _dashboard(command, given, 1, shown, again=False)
        return sum(len(requests.get(f"{u}/api/{endpoint}", timeout=30).content) for u, p in zip(urls, proxies)
                   for endpoint in set(p.requests))
    finally:
        for p in proxies:
            p.close()


def _one_broker(page) -> None:
    page.locator("text=/What is wrong:|No findings at/").first.wait_for(timeout=120_000)
    page.locator("[data-testid=stMarkdown] table").filter(has_text="prefetch limit").locator("td").first \
        .wait_for(timeout=120_000)


def _three_brokers(page) -> None:
    page.locator("text=/Every broker's findings|No findings at warning or above on any broker/").first \
        .wait_for(timeout=120_000)
    page.get_by_role("link", name="Open c").wait_for(timeout=120_000)


def _measure(label: str, command: list[str], broker: LocalBroker, queues: int, loads: int,
             interval: float, floor: Path | None) -> list[tuple]:
    """(label, page, loads in fresh contexts, again in one, bytes fetched per load) for one broker, then three;
    with `floor` (a directory for its page), Streamlit's own floor beside the one broker's."""
    procs: list[subprocess.Popen] = []
    try:
        urls = []
        rows = []
        for count, page, shown in ((1, "one broker: findings and unacked against prefetch", _one_broker),
                                   (3, "three brokers: each broker and their findings", _three_brokers)):
            while len(urls) < count:
                url, proc = _exporter(command, broker, queues, interval)
                urls.append(url)
                procs.append(proc)
            named = count > 1
            given = [arg for name, u in zip("abc", urls) for arg in ("--exporter-url", f"{name}={u}" if named else u)]
            fresh, again = _dashboard(command, given, loads, shown)
            rows.append((label, page, fresh, again, _fetched(command, urls, named, shown)))
            if floor is not None and count == 1:  # beside the same exporter's polls as the page
                for floor_page, watching in ((FLOOR, False), (FLOOR_WATCHING, True)):
                    rows.append((label, floor_page, *_floor(floor, loads, watching), None))
        return rows
    finally:
        for proc in procs:
            stop_process(proc, timeout=30)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queues", type=int, default=5000)
    ap.add_argument("--connections", type=int, default=200)
    ap.add_argument("--loads", type=int, default=5)
    ap.add_argument("--exporter-interval", type=float, default=10.0,
                    help="the exporters' --interval (their default, 10 s): a longer one keeps their polls of the "
                         "broker, which in production run beside it and not on the dashboard's machine, out of the "
                         "timed loads' way on this one")
    ap.add_argument("--apart", action="store_true",
                    help="the node, its clients and the exporters on one core, the dashboard and chromium on the "
                         "other, as two machines would hold them (measured slower than sharing both cores: "
                         "docs/benchmarks.md, run 3)")
    ap.add_argument("--before", type=Path, help="a checkout of the baseline's code (git worktree add DIR COMMIT): "
                    "its exporters and dashboard measured first, the same way")
    args = ap.parse_args()
    if args.apart:
        os.sched_setaffinity(0, BROKER_SIDE)  # the node, the clients' threads and the exporters started from here on
    broker = LocalBroker(name="ackscope-bench-dash")
    broker.start()
    work = Path(tempfile.mkdtemp(prefix="ackscope-bench-dash-"))
    try:
        grow_queues(broker, args.queues)
        held = hold_channels(broker, args.connections, 3, args.queues)
        # Until the broker lists every consumer: before, it is still taking in the channels' statistics (a load on
        # the cores the timed loads share), and an exporter's first poll would see a few of them.
        _until(lambda: _listed_consumers(broker) >= args.connections * 3, 600, "the broker to list every consumer")
        commands = {**({"before": baseline_command(args.before, work)} if args.before else {}), "after": ACKSCOPE}
        rows = [row for label, command in commands.items()
                for row in _measure(label, command, broker, args.queues, args.loads, args.exporter_interval,
                                    work if label == "after" else None)]
        print(f"{args.queues:,} queues, {args.connections * 3} consuming channels; {args.loads} loads each; "
              f"the exporters poll every {args.exporter_interval:g} s"
              + ("; the node's side and the dashboard's on a core each" if args.apart else ""))
        print("| landing page | code | first load | later loads, median | later, max | again in one browser, "
              "median | again, max | fetched from the exporters per load | target |")
        print("|---|---|---:|---:|---:|---:|---:|---:|---|")
        # Each page's rows together, before and after; the floors beside the one broker, before the three.
        for page in sorted(dict.fromkeys(r[1] for r in rows), key=lambda p: p.startswith("three")):
            for label, _, fresh, again, fetched in (r for r in rows if r[1] == page):
                rest, again = [load.shown for load in fresh[1:] or fresh], [load.shown for load in again]
                print(f"| {page} | {label} | {fresh[0].shown:.2f} s | {statistics.median(rest):.2f} s | "
                      f"{max(rest):.2f} s | {statistics.median(again):.2f} s | {max(again):.2f} s | "
                      + (f"{fetched / 2**20:.3f} MiB | < 1.5 s |" if fetched is not None else "— | — |"))
        print("\nWhere a fresh context's load goes (medians of the later loads, seconds from navigation):")
        print("| landing page | code | the document's scripts run | websocket open | last message before shown "
              "| shown |")
        print("|---|---|---:|---:|---:|---:|")
        for label, page, fresh, _, _ in rows:
            later = fresh[1:] or fresh
            print(f"| {page} | {label} | " + " | ".join(
                f"{statistics.median(getattr(load, part) for load in later):.2f} s"
                for part in ("scripts_run", "websocket", "last_message", "shown")) + " |")
        del held
    finally:
        broker.stop()
        broker.remove()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
