"""The dashboard's pages (streamlit.testing AppTest) against a live exporter with probes, over a real broker
running failure scenarios; and what the pages show when the exporter fails."""

from __future__ import annotations

import base64
import json
import re
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import requests
from client_processes import Clients
from conftest import exporter_config
from dashboard_helpers import ARTIFACTS, CHROMIUM_ARGS, answers, dashboard, frames, page, run_page, seen
from helpers import markdown_table, only_vhost, prometheus_query, wait_for
from probe_helpers import probe_config, quick
from streamlit.testing.v1 import AppTest

from ackscope.apps.exporter import Exporter
from ackscope.core.secret import Secret
from ackscope.workloads.ports import free_port
from ackscope.workloads.private_broker import ADMIN_USER
from ackscope.workloads.scenarios import BY_NAME, PREFIX, Running
from ackscope_testkit.fault_proxy import FaultProxy

SCENARIOS = ("prefetch-saturated", "requeue-loop", "auto-ack-consumer", "prefetch-unlimited")


@pytest.fixture(scope="module")
def live(broker, tmp_path_factory):
    """An exporter with two probes, watching a vhost where four failure scenarios run."""
    vhost = f"dash-{uuid.uuid4().hex[:8]}"
    broker.api("PUT", f"/vhosts/{vhost}")
    broker.api("PUT", f"/permissions/{vhost}/{ADMIN_USER}", json={"configure": ".*", "write": ".*", "read": ".*"})
    exporter = Exporter(exporter_config(broker.management_url, interval=1.0,
                                        probes=probe_config(broker, vhost, (quick("classic-persistent"),
                                                                            quick("quorum", "quorum"))),
                                        selection=only_vhost(vhost), broker_log=str(broker.log_file)))
    exporter.start()
    running = Running([BY_NAME[n] for n in SCENARIOS], Secret(broker.amqp_url(vhost))).start()
    # pika acking twice: the broker closes its channel every 2 s, which its log (at warning) says.
    double_ack = Clients(broker.amqp_url(vhost), tmp_path_factory.mktemp("clients")).__enter__()
    double_ack.start(sys.executable, "pika_acks.py", "double-ack", "dash.double-ack")

    def ready():
        rules = {f["rule"] for f in requests.get(exporter.url + "/api/findings", timeout=5).json()["findings"]}
        probes = requests.get(exporter.url + "/api/probes", timeout=5).json()["probes"]
        # The pages draw a queue once it has redelivered (the overview's redeliveries chart among them).
        snapshot = requests.get(exporter.url + "/api/snapshot", timeout=5).json()["snapshot"]  # None before a poll
        queues = (snapshot or {}).get("queues", [])
        looping = any(q["name"] == f"{PREFIX}requeue-loop"
                      and ((q.get("message_stats") or {}).get("redeliver") or 0) > 50 for q in queues)
        # Two of the double ack's channel errors (one every 2 s): a loaded run once drew the page with one.
        double_acks = [e for e in requests.get(exporter.url + "/api/breaks", timeout=5).json()["events"]
                       if "unknown delivery tag" in (e.get("text") or "")]
        return ({"prefetch-saturated", "auto-ack-consumer", "prefetch-unlimited", "closed-on-error"} <= rules
                and len(double_acks) >= 2 and len(probes) == 2
                and all(p["counters"].get("confirmed", 0) >= 20 for p in probes) and looping)
    try:
        wait_for(ready, timeout=60, what="the scenarios' findings, the probes' first confirms, the requeue "
                 "loop's redeliveries and the double ack's channel errors")
        yield exporter
    finally:
        double_ack.__exit__(None, None, None)
        running.stop()
        exporter.stop()
        broker.api("DELETE", f"/vhosts/{vhost}")


def _charts(app: AppTest) -> int:
    return len(app.get("plotly_chart"))


def test_overview_shows_findings_with_their_culprits_unacked_against_prefetch_and_probe_latency(monkeypatch, live):
    app = page(monkeypatch, "overview", live.url)
    cards = [m.value for m in app.markdown if "*Remedy:*" in m.value]
    # and since when each holds (as Markdown escapes it)
    assert len(cards) >= 3 and all(re.search(r" · since \d{4}\\-\d\d\\-\d\d [0-9:]+ UTC \\\(", c) for c in cards), cards
    # Every finding is one plain link away, not in an interactive table on the first view (docs/dashboard.md).
    link = next(m.value for m in app.markdown if "findings, info included" in m.value)
    findings = frames(page(monkeypatch, "findings", live.url))[0]
    assert f"All {len(findings)} findings" in link and 'href="findings"' in link
    assert findings["since"].str.endswith(" UTC").all()
    culprits = " ".join(findings["culprit"])
    for scenario in ("prefetch-saturated", "auto-ack-consumer", "prefetch-unlimited"):
        assert f"ackscope-scenario {scenario} · channel" in culprits
    prefetch = {row["client"]: row for row in markdown_table(app, "client")}
    assert prefetch["ackscope-scenario auto-ack-consumer"]["mark"] == "auto-ack"
    assert prefetch["ackscope-scenario prefetch-unlimited"]["mark"] == "prefetch 0"
    saturated = prefetch["ackscope-scenario prefetch-saturated"]
    assert saturated["unacked"] == saturated["prefetch limit"] == "10" and saturated["fill"] == "█" * 10 + " 100%"
    latency = frames(app)[-1]
    assert set(latency["target"]) == {"classic-persistent", "quorum"} and (latency["p50 (ms)"] > 0).all()
    assert _charts(app) >= 2
    assert not app.error


def test_consumers_page_searches_and_shows_the_findings_about_consumers(monkeypatch, live):
    app = AppTest.from_function(run_page, args=("consumers",), default_timeout=30)
    monkeypatch.setenv("ACKSCOPE_EXPORTER_URL", live.url)
    app.run()
    app.text_input(key="consumer-search").input("saturated").run()
    assert not app.exception
    prefetch, findings = frames(app)
    assert list(prefetch["client"]) == ["ackscope-scenario prefetch-saturated"]
    assert {"prefetch-saturated", "auto-ack-consumer", "prefetch-unlimited"} <= set(findings["rule"])


def test_findings_page_lists_every_finding_worst_first_and_searches_them(monkeypatch, live):
    app = page(monkeypatch, "findings", live.url)
    everything = frames(app)[0]
    order = {"critical": 0, "warning": 1, "info": 2}
    assert list(everything["severity"].map(order)) == sorted(everything["severity"].map(order))
    app.text_input(key="finding-search").input("REQUEUE-loop").run()
    assert not app.exception
    matched = frames(app)[0]
    assert 0 < len(matched) < len(everything) and matched["culprit"].str.contains("requeue-loop").all()
    app.text_input(key="finding-search").input("no such thing").run()
    assert not app.dataframe and "No finding matches 'no such thing'." in [s.value for s in app.success]


def test_redeliveries_page_puts_the_requeue_loop_first(monkeypatch, live):
    app = page(monkeypatch, "redeliveries", live.url)
    queues = frames(app)[0]
    assert queues.iloc[0]["queue"] == f"{PREFIX}requeue-loop" and queues.iloc[0]["share"] > 0.9
    assert _charts(app) == 1


def test_confirms_page_shows_latency_batching_and_settlement_counts(monkeypatch, live):
    app = page(monkeypatch, "confirms", live.url)
    latency, settled = frames(app)
    assert set(latency["target"]) == set(settled["target"]) == {"classic-persistent", "quorum"}
    assert (settled["confirmed"] > 0).all() and (settled["nacked"] == 0).all()
    assert _charts(app) >= 2  # latency and batch sizes
    assert any("fsync" in c.value for c in app.caption)


def test_breaks_page_draws_the_double_acks_closed_channels_on_a_timeline_with_the_finding(monkeypatch, live):
    app = page(monkeypatch, "breaks", live.url)
    events, findings = frames(app)
    errors = events[events["reason"] == "unknown_delivery_tag"]
    assert len(errors) >= 2 and set(errors["client"]) == {"pika-double-ack"}
    assert set(errors["kind"]) == {"channel error"} and "unknown delivery tag" in errors["broker said"].iloc[0]
    assert "closed-on-error" in set(findings["rule"]) and _charts(app) == 1
    # Only the log's own problems count here: under a loaded suite a poll may come back partial, which the page
    # rightly warns of too (the "Partial:" banner), and which says nothing of the log.
    unread = [w.value for w in app.warning if w.value.startswith("Not read")]
    assert not unread, f"the log is readable: {unread}"


def test_without_a_broker_log_the_breaks_page_says_what_to_give(monkeypatch, broker, start_exporter):
    exporter = start_exporter(broker.management_url)
    app = page(monkeypatch, "breaks", exporter.url)
    assert "--broker-log" in app.info[0].value and _charts(app) == 0


def test_probe_audit_page_says_nothing_was_lost(monkeypatch, live):
    app = page(monkeypatch, "audit", live.url)
    audit = frames(app)[0]
    assert (audit["lost"] == 0).all() and (audit["delivered"] > 0).all() and audit["up"].all()
    assert app.success and "Every confirmed message was delivered" in app.success[0].value


def test_broker_page_shows_nodes_and_no_blocked_connections(monkeypatch, live):
    app = page(monkeypatch, "broker", live.url)
    nodes = frames(app)[0]
    assert len(nodes) == 1 and nodes.iloc[0]["running"] and nodes.iloc[0]["alarms"] == ""
    assert "No connection is blocked." in [s.value for s in app.success]


def test_history_page_reads_the_pipeline_reports_and_names_an_unreadable_one(monkeypatch, live, tmp_path):
    reports = tmp_path / "reports"
    window = pa.array([1_795_300_000_000_000, 1_795_300_060_000_000], pa.timestamp("us", tz="UTC"))
    latency = pa.table({"window_start": window, "probe": ["quorum", "quorum"], "p50_s": [0.002, 0.003],
                        "p99_s": [0.01, 0.02]})
    (reports / "confirm_latency" / "date=2026-11-22").mkdir(parents=True)
    pq.write_table(latency, reports / "confirm_latency" / "date=2026-11-22" / "part-0.parquet")
    (reports / "delivery_audit").mkdir()
    pq.write_table(pa.table({"run_id": ["r1"], "probe": ["quorum"], "lost": [2]}),
                   reports / "delivery_audit" / "part-0.parquet")
    (reports / "lost_messages").mkdir()
    (reports / "lost_messages" / "part-0.parquet").write_bytes(b"PAR1 cut short")
    (reports / "summary.json").write_text(json.dumps({"data_dir": "/data", "files_read": 3, "files_skipped": 0,
                                                      "rows": 1234}))
    app = page(monkeypatch, "history", live.url, ACKSCOPE_REPORTS=str(reports))
    assert any("lost_messages cannot be read" in w.value for w in app.warning)
    assert frames(app)[0]["lost"].tolist() == [2]
    assert _charts(app) == 1
    assert "1,234 rows" in " ".join(c.value for c in app.caption)


def test_unreachable_exporter_is_a_banner_not_a_traceback(monkeypatch):
    app = page(monkeypatch, "overview", "http://127.0.0.1:9")
    assert "cannot be reached" in app.error[0].value and "stale" in app.error[0].value


def _cards(app: AppTest) -> list[str]:
    """Each finding card's severity, rule and culprit (not how long it has held, which grows between runs)."""
    return [m.value.split(" · since ")[0] for m in app.markdown if "*Remedy:*" in m.value]


def test_when_the_exporter_fails_the_last_good_data_stays_marked_stale(monkeypatch, live):
    proxy = FaultProxy(live.url)
    try:
        # Refreshed every second: the landing page shows what the background fetches (ExporterSource.latest).
        app = page(monkeypatch, "overview", proxy.url, ACKSCOPE_REFRESH="1")
        before = _cards(app)
        assert not app.error and len(before) > 0
        # The landing page fetches what it shows and no more: not the megabytes of /api/snapshot and /api/findings.
        assert set(proxy.requests) == {"overview", "probes"}, proxy.requests
        proxy.faults["overview"] = "malformed"
        # The banner comes with the background's first fetch after it.
        wait_for(lambda: app.run().error, timeout=10, what="the dashboard to fetch again and fail")
        assert not app.exception
        assert "malformed JSON" in app.error[0].value and "stale" in app.error[0].value
        assert _cards(app) == before  # the last good findings, still shown
    finally:
        proxy.close()


def test_landing_page_in_a_real_browser_names_the_culprits_and_draws_the_charts(live, chromium):
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    # The product's refresh (10 s): each redraws the charts, and at 5 s a loaded browser once drew none within a
    # minute.
    with dashboard(live.url, refresh=10) as url, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            tab = browser.new_page(viewport={"width": 1500, "height": 2600})
            script_errors: list[str] = []
            tab.on("pageerror", lambda e: script_errors.append(str(e)))
            tab.goto(url)
            seen(tab, tab.get_by_text("What is wrong:"), "the findings")
            tables = tab.locator("[data-testid=stMarkdown] table")
            cells = tables.filter(has=tab.locator("th", has_text="prefetch limit")).locator("td")
            seen(tab, cells.first, "the prefetch table")
            seen(tab, tab.locator(".js-plotly-plot").first, "a chart")
            text = tab.inner_text("body")
            prefetch = " ".join(cells.all_text_contents())
            for scenario in ("prefetch-saturated", "auto-ack-consumer", "prefetch-unlimited"):
                assert f"ackscope-scenario {scenario}" in prefetch  # the prefetch table names the client
            assert "ackscope-scenario prefetch-saturated" in text  # and so does a finding card
            assert "Remedy:" in text
            _evidence_reads_as_words_with_units(tab, tables.filter(has=tab.locator("th", has_text="evidence")))
            # The charts are drawn one after another: wait for the second, do not count at the first.
            seen(tab, tab.locator(".js-plotly-plot").nth(1), "the second chart")
            assert "Traceback" not in text
            tab.screenshot(path=str(ARTIFACTS / "dashboard-landing.png"), full_page=True)
            # The refresh redraws the data in place: the tab is not reloaded.
            tab.evaluate("window.ackscopeMarker = 42")
            updated = tab.get_by_text("Updated ").first.inner_text()
            wait_for(lambda: tab.get_by_text("Updated ").first.inner_text() != updated, timeout=60,
                     what="the live data to refresh")
            assert tab.evaluate("window.ackscopeMarker") == 42
            # Every finding, a plain link away, in the same tab: the Findings page's interactive table.
            tab.get_by_text(re.compile(r"^All \d+ findings, info included")).click()
            seen(tab, tab.locator("[data-testid=stDataFrame]").first, "the Findings page's table")
            assert tab.url.split("?")[0].endswith("/findings") and len(browser.contexts[0].pages) == 1
            assert not script_errors, script_errors
        finally:
            browser.close()
    assert (ARTIFACTS / "dashboard-landing.png").stat().st_size > 10_000


# Labels whose values are durations, and how a duration is shown: "95 s", "1.8 ms", "1,800 s (30 min)".
DURATION_LABELS = ("window", "held for at least", "timeout", "over", "oldest message age", "last poll", "last seen")
DURATION = re.compile(r"^[0-9][0-9,.]* (ms|s)( \(.+\))?( ago)?$")


def _evidence_reads_as_words_with_units(tab, evidence) -> None:
    """The finding cards' evidence, as the browser shows it: a table of label and value, no repr (no dict or
    list brackets, no quoted keys), and a unit on every duration and rate (issue 57)."""
    seen(tab, evidence.first, "a finding card's evidence")
    rows = [[c.inner_text().strip() for c in row.locator("td").all()]
            for table in evidence.all() for row in table.locator("tbody tr").all()]
    assert rows and all(len(r) == 2 for r in rows), rows
    shown = "\n".join(" | ".join(r) for r in rows)
    assert not re.search(r"[{}\[\]]|': |='|\b[a-z]+_[a-z_]+=", shown), shown
    with_units = [(label, value) for label, value in rows if re.match(r"^[0-9]", value)
                  and (label in DURATION_LABELS or label.endswith("rate"))]
    assert with_units, f"no duration or rate among the cards' evidence:\n{shown}"
    for label, value in with_units:
        if label.endswith("rate"):
            assert value.endswith((" a second", " a minute")), (label, value)
        else:
            assert DURATION.match(value), (label, value)


def test_the_browser_is_sent_none_of_the_credentials_the_dashboard_and_the_exporter_hold(broker, start_exporter,
                                                                                          chromium):
    from playwright.sync_api import sync_playwright

    from ackscope.core.http_server import WebSecurity

    web_password, broker_password = "ui-" + uuid.uuid4().hex, "mon-" + uuid.uuid4().hex
    monitor = f"monitor-{uuid.uuid4().hex[:8]}"
    broker.api("PUT", f"/users/{monitor}", json={"password": broker_password, "tags": "monitoring"})
    guarded = start_exporter(broker.management_url, username=monitor, password=broker_password, interval=1.0,
                             web=WebSecurity("ui", Secret(web_password)))
    # What the browser must never see: the exporter's web password (the dashboard holds it), the Authorization
    # header made of it, and the broker password the exporter polls with.
    secrets = [web_password, base64.b64encode(f"ui:{web_password}".encode()).decode(), broker_password]
    carried: list[bytes] = []
    with dashboard(guarded.url, ACKSCOPE_WEB_USERNAME="ui", ACKSCOPE_WEB_PASSWORD=web_password) as url, \
            sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            tab = browser.new_page()
            responses = []
            tab.on("request", lambda r: carried.append(repr(sorted(r.headers.items())).encode() + r.url.encode()))
            tab.on("response", lambda r: responses.append(r))
            tab.on("websocket", lambda ws: (
                ws.on("framereceived", lambda f: carried.append(f if isinstance(f, bytes) else f.encode())),
                ws.on("framesent", lambda f: carried.append(f if isinstance(f, bytes) else f.encode()))))
            tab.goto(url)
            seen(tab, tab.get_by_text("Updated ").first, "the data")  # it came through the basic auth
            assert "refused" not in tab.inner_text("body")
            carried.append(tab.content().encode())
            tab.goto(url + "/broker")
            tab.get_by_text(broker.nodename).first.wait_for(state="attached", timeout=30_000)  # a table cell
            carried.append(tab.content().encode())
            for response in responses:
                try:
                    carried.append(response.body())
                except Exception:  # a redirect or an evicted body: its headers were still checked
                    carried.append(repr(sorted(response.headers.items())).encode())
        finally:
            browser.close()
            broker.api("DELETE", f"/users/{monitor}")
    assert len(carried) > 20 and any(broker.nodename.encode() in c for c in carried), "the traffic was seen"
    for secret in secrets:
        assert not [c[:120] for c in carried if secret.encode() in c], "a credential reached the browser"


def test_exporter_credentials_a_hanging_exporter_and_a_wrong_url_each_get_one_line(broker, start_exporter):
    from ackscope.core.http_server import WebSecurity
    from ackscope.dashboard.source import ExporterSource

    guarded = start_exporter(broker.management_url, web=WebSecurity("ui", Secret("ui-secret")))
    wait_for(lambda: ExporterSource(guarded.url, ("ui", "ui-secret")).fetch().snapshot, timeout=20,
             what="a snapshot through basic auth")
    refused = ExporterSource(guarded.url, ("ui", "wrong")).fetch()
    assert refused.error == f"the exporter at {guarded.url} refused the dashboard's credentials (HTTP 401)"
    assert "wrong" not in repr(refused)

    proxy = FaultProxy(guarded.url)
    try:
        proxy.faults["snapshot"] = "hang"
        hung = ExporterSource(proxy.url, timeout=1.0).fetch()
        assert hung.error == f"the exporter at {proxy.url} did not answer within 1 s" and hung.stale
    finally:
        proxy.close()
    assert ExporterSource(broker.management_url).fetch().error.startswith(f"{broker.management_url}/api/snapshot")


def test_history_page_draws_the_probes_p99_from_a_real_prometheus(monkeypatch, live, tmp_path, prometheus):
    with prometheus(live.url.removeprefix("http://"), tmp_path) as url:
        wait_for(lambda: prometheus_query(url, "histogram_quantile(0.99, sum by (le, target) "
                                                      "(rate(ackscope_probe_confirm_latency_seconds_bucket[5m])))"),
                 timeout=40, what="the probes' p99 in Prometheus")
        app = page(monkeypatch, "history", live.url, ACKSCOPE_PROMETHEUS_URL=url)
        assert not app.warning and _charts(app) == 1
        app.select_slider[0].set_value(1).run()
        assert not app.exception and _charts(app) == 1
    stopped = page(monkeypatch, "history", live.url, ACKSCOPE_PROMETHEUS_URL=url)
    assert stopped.warning[0].value == f"Prometheus at {url} cannot be reached"


@pytest.mark.thorough
def test_killing_the_dashboard_command_leaves_no_server_holding_its_port():
    # `ackscope dashboard` is the server (exec): a child it started once kept answering after the command was
    # killed, and the next start failed on the port.
    port = free_port()
    health = f"http://127.0.0.1:{port}/_stcore/health"
    proc = subprocess.Popen([str(Path(sys.executable).with_name("ackscope")), "dashboard", "--exporter-url",
                             "http://127.0.0.1:9", "--port", str(port), "--address", "127.0.0.1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: answers(health) or proc.poll() is not None, timeout=60, what="the dashboard's health")
        assert proc.poll() is None, proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()
    wait_for(lambda: not answers(health), timeout=10, what="nothing answering on the killed dashboard's port")
    with socket.socket() as s:  # and the port is free for the next start
        s.bind(("127.0.0.1", port))
