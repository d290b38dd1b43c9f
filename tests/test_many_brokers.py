"""Several brokers in one view: three nodes of three releases at once (3.10, 4.0, the newest), an exporter each,
`ackscope diagnose --brokers` and the dashboard's landing page of several in Debian's chromium; the newest node
stopped midway, which neither may let hide the others."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from dashboard_helpers import ARTIFACTS, CHROMIUM_ARGS, dashboard, seen
from helpers import MATRIX, only_vhost, own_vhost, private_broker, scenarios_running, wait_for

from ackscope.diagnosis.thresholds import Thresholds
from ackscope.workloads.private_broker import ADMIN_PASSWORD, ADMIN_USER, LocalBroker
from ackscope.workloads.rabbitmq_release import Release

# Three nodes, three exporters polling every second, scenarios on the session's node, a dashboard and a browser:
# beside the parallel workers they slowed the polls of the tests sharing that node past their deadlines (the
# clean-clone run of 731a73f). Alone, it costs the run about 40 s.
pytestmark = pytest.mark.alone

# What each broker runs: a critical on 3.10 (a manual-ack consumer without prefetch holding 50, critical from 40
# here), a warning on 4.0 (a backlog nobody consumes); nothing on the newest, which has nothing wrong.
RUNS = {"3.10": "prefetch-unlimited", "4.0": "no-consumers-backlog"}
THRESHOLDS = Thresholds(unlimited_prefetch_unacked_critical=40)


@pytest.fixture(scope="module")
def nodes(broker: LocalBroker) -> Iterator[dict[str, LocalBroker]]:
    """The session's 3.10 node beside a 4.0 and a newest node of this module's own (the newest is stopped by the
    test)."""
    with private_broker("ackscope-many40", release=Release.in_root(MATRIX["4.0"])) as four, \
            private_broker("ackscope-manyNN", release=Release.in_root(MATRIX["newest"])) as newest:
        yield {"3.10": broker, "4.0": four, "newest": newest}


def _brokers_file(tmp_path: Path, nodes: dict[str, LocalBroker], vhosts: dict[str, str]) -> Path:
    """--brokers' file: a table each, with its own password file (the same admin here, each read from its file)."""
    lines = []
    for name, node in nodes.items():
        secret = tmp_path / f"{name}.password"
        secret.write_text(ADMIN_PASSWORD + "\n")
        lines += [f'[brokers."{name}"]', f'management_url = "{node.management_url}"', f'username = "{ADMIN_USER}"',
                  f'password_file = "{secret}"', f'include_vhosts = "^{vhosts[name]}$"', ""]
    path = tmp_path / "brokers.toml"
    path.write_text("\n".join(lines))
    return path


def _diagnose(path: Path, *options: str) -> subprocess.CompletedProcess:
    thresholds = path.with_name("thresholds.toml")
    thresholds.write_text(f"[diagnosis]\nunlimited_prefetch_unacked_critical = "
                          f"{THRESHOLDS.unlimited_prefetch_unacked_critical}\n")
    return subprocess.run([str(Path(sys.executable).with_name("ackscope")), "diagnose", "--brokers", str(path),
                           "--config", str(thresholds), "--window", "1s", *options], capture_output=True, text=True,
                          timeout=120)


def test_three_releases_at_once_are_reported_worst_first_and_a_stopped_one_hides_none(nodes, start_exporter,
                                                                                      tmp_path, chromium):
    from playwright.sync_api import sync_playwright

    # The session's node is shared: a vhost of this test's own there; the other two are this module's alone.
    with own_vhost(nodes["3.10"]) as v310:
        vhosts = {"3.10": v310, "4.0": "/", "newest": "/"}
        exporters = {name: start_exporter(node.management_url, interval=1.0, selection=only_vhost(vhosts[name]),
                                          thresholds=THRESHOLDS) for name, node in nodes.items()}
        with scenarios_running(nodes["3.10"], v310, RUNS["3.10"]), scenarios_running(nodes["4.0"], "/", RUNS["4.0"]):
            # At the severity each report must show: the consumer holds its 50 a moment after it is listed (the
            # clean-clone run of f02d63c read it at 0 unacked, info, when the rule alone was awaited).
            for name, severity in (("3.10", "critical"), ("4.0", "warning")):
                rule = RUNS[name]
                wait_for(lambda: (rule, severity) in {(f["rule"], f["severity"]) for f in requests.get(
                    exporters[name].url + "/api/findings", timeout=5).json()["findings"]}, 60,
                    f"{rule} ({severity}) on {name}")
            brokers = _brokers_file(tmp_path, nodes, vhosts)
            done = _diagnose(brokers)
            assert done.returncode == 2, done.stdout + done.stderr  # the worst broker's: 3.10's critical
            summary = done.stdout.splitlines()[1:4]
            assert [line.split()[:2] for line in summary] == [["CRITICAL", "3.10"], ["WARNING", "4.0"],
                                                              ["OK", "newest"]], done.stdout
            assert "prefetch-unlimited" in done.stdout and "no-consumers-backlog" in done.stdout
            assert "Traceback" not in done.stdout + done.stderr

            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            with dashboard(*(f"{name}={e.url}" for name, e in exporters.items())) as url, \
                    sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
                try:
                    tab = browser.new_page(viewport={"width": 1500, "height": 1600})
                    script_errors: list[str] = []
                    tab.on("pageerror", lambda e: script_errors.append(str(e)))
                    tab.goto(url)
                    seen(tab, tab.get_by_text("every broker, worst first"), "the title")
                    seen(tab, tab.get_by_text("Every broker's findings"), "the findings")
                    states = _states(tab)
                    assert states[:3] == [("critical", "3.10"), ("warning", "4.0"), ("ok", "newest")], states

                    nodes["newest"].stop()  # midway: its exporter cannot poll it any more
                    wait_for(lambda: ("unreadable", "newest") in _states(tab), 60, lambda: f"newest unreadable: "
                             f"{_states(tab)}")
                    states = _states(tab)
                    assert states == [("critical", "3.10"), ("unreadable", "newest"), ("warning", "4.0")], states
                    text = tab.inner_text("body")
                    assert "prefetch-unlimited" in text and "no-consumers-backlog" in text and "Traceback" not in text
                    tab.screenshot(path=str(ARTIFACTS / "dashboard-brokers.png"), full_page=True)
                    # A click on a broker opens its own pages.
                    tab.get_by_role("link", name="Open 4.0").click()
                    seen(tab, tab.get_by_text("broker 4.0 · Updated"), "4.0's page")
                    assert "What is wrong:" in tab.inner_text("body")
                    assert not script_errors, script_errors
                finally:
                    browser.close()

            done = _diagnose(brokers, "--format", "json")
            assert done.returncode == 2, done.stdout + done.stderr
            report = json.loads(done.stdout)
            assert [(b["name"], b["exit_code"]) for b in report["brokers"]] == [("3.10", 2), ("newest", 3),
                                                                               ("4.0", 1)]
            assert "cannot read" in report["brokers"][1]["error"]
            assert {f["rule"] for f in report["brokers"][2]["findings"]} >= {"no-consumers-backlog"}


def _states(tab) -> list[tuple[str, str]]:
    """The landing page's brokers as it lists them: (state, name), in its order."""
    lines = [line for line in tab.inner_text("body").splitlines() if " · " in line and " — " in line]
    return [(line.split(" · ")[0].strip(), line.split(" · ")[1].split(" — ")[0].strip()) for line in lines]
