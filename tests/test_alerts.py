"""The Prometheus alert rules: promtool's check and unit tests for every alert, and a real Prometheus that
evaluates them against the exporter while failure scenarios run (and stays quiet for a healthy workload)."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import requests
import yaml
from conftest import exporter_config
from helpers import only_vhost, wait_for
from probe_helpers import probe_config, quick

from ackscope.apps.exporter import Exporter
from ackscope.core.secret import Secret
from ackscope.workloads.private_broker import ADMIN_USER
from ackscope.workloads.scenarios import BY_NAME, Running

DEPLOY = Path(__file__).resolve().parent.parent / "deploy" / "prometheus"
RULES = DEPLOY / "ackscope-alerts.yml"
UNIT_TESTS = DEPLOY / "tests" / "ackscope-alerts-test.yml"


def _alerts() -> dict[str, dict]:
    return {r["alert"]: r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]}


def test_promtool_accepts_the_rules_and_every_alert_has_a_severity_and_a_runbook(promtool):
    result = subprocess.run([promtool, "check", "rules", str(RULES)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    alerts = _alerts()
    assert len(alerts) >= 12
    for name, rule in alerts.items():
        assert rule["labels"]["severity"] in ("warning", "critical"), name
        assert rule["annotations"]["summary"] and "First:" in rule["annotations"]["runbook"], name


def test_promtool_unit_tests_fire_every_alert_and_pass(promtool):
    tests = yaml.safe_load(UNIT_TESTS.read_text())["tests"]
    fired = {t["alertname"] for case in tests for t in case["alert_rule_test"] if t["exp_alerts"]}
    assert fired == set(_alerts())
    result = subprocess.run([promtool, "test", "rules", str(UNIT_TESTS)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


class Watched:
    """A Prometheus evaluating the rules against an exporter (with a probe) over a vhost running scenarios."""

    def __init__(self, prometheus: str):
        self.prometheus = prometheus

    def query(self, q: str) -> list:
        try:
            return requests.get(f"{self.prometheus}/api/v1/query", params={"query": q},
                                timeout=5).json()["data"]["result"]
        except (requests.RequestException, ValueError, KeyError):
            return []

    def active(self) -> dict[str, list[dict]]:
        """Pending and firing alerts by name."""
        try:
            alerts = requests.get(f"{self.prometheus}/api/v1/alerts", timeout=5).json()["data"]["alerts"]
        except (requests.RequestException, ValueError, KeyError):
            return {}
        by_name: dict[str, list[dict]] = {}
        for a in alerts:
            by_name.setdefault(a["labels"]["alertname"], []).append(a)
        return by_name


@contextmanager
def watched(prometheus, broker, vhost: str, workdir: Path, *scenarios: str) -> Iterator[Watched]:
    # A transient probe: its confirms wait for no fsync, so a loaded test machine's disk cannot raise the probe's
    # latency alert beside the workloads these tests judge (a persistent one's p99 passed 0.5 s on a slow day).
    exporter = Exporter(exporter_config(broker.management_url, interval=1.0,
                                        probes=probe_config(broker, vhost,
                                                            (quick("classic-transient", persistent=False),)),
                                        selection=only_vhost(vhost)))
    exporter.start()
    running = Running([BY_NAME[n] for n in scenarios], Secret(broker.amqp_url(vhost))).start()
    try:
        with prometheus(exporter.url.removeprefix("http://"), workdir, rules=RULES) as url:
            w = Watched(url)
            wait_for(lambda: w.query("ackscope_probe_up == 1"), timeout=60,
                     what="Prometheus to scrape the exporter and its probe")
            yield w
    finally:
        running.stop()
        exporter.stop()
    assert not running.errors, running.errors


@pytest.fixture(scope="module")
def failing(prometheus, broker, tmp_path_factory) -> Iterator[Watched]:
    """Four failure scenarios under one Prometheus, shared by the alert and the Grafana tests."""
    vhost = f"alerts-{uuid.uuid4().hex[:8]}"
    broker.api("PUT", f"/vhosts/{vhost}")
    broker.api("PUT", f"/permissions/{vhost}/{ADMIN_USER}", json={"configure": ".*", "write": ".*", "read": ".*"})
    try:
        with watched(prometheus, broker, vhost, tmp_path_factory.mktemp("prometheus"), "prefetch-saturated",
                     "requeue-loop", "publisher-without-confirms", "unroutable-dropped") as w:
            yield w
    finally:
        broker.api("DELETE", f"/vhosts/{vhost}")


def test_alerts_go_pending_or_firing_for_real_failures(failing):
    expected = {"AckscopeFindingWarning", "AckscopeRequeueLoop", "AckscopePublisherWithoutConfirms",
                "AckscopeUnackedAtPrefetch", "AckscopeUnroutableDropped"}
    def unsafe(active: dict) -> set[str]:
        return {a["labels"].get("connection_name", "") for a in active.get("AckscopePublisherWithoutConfirms", ())}
    found = wait_for(lambda: (a := failing.active()) and expected <= set(a)
                     and "ackscope-scenario publisher-without-confirms" in unsafe(a) and a, timeout=90,
                     what=lambda: f"alerts {sorted(expected)} (active: {sorted(failing.active())})")
    saturated = [a for a in found["AckscopeUnackedAtPrefetch"]
                 if a["labels"]["connection_name"] == "ackscope-scenario prefetch-saturated"]
    assert saturated and saturated[0]["state"] in ("pending", "firing")
    assert any(a["labels"]["connection_name"] == "ackscope-scenario unroutable-dropped"
               for a in found["AckscopeUnroutableDropped"])
    assert "AckscopeProbeMessageLost" not in found and "AckscopeBrokerUnreachable" not in found


GRAFANA = Path(__file__).resolve().parent.parent / "deploy" / "grafana" / "ackscope.json"
# What Grafana puts in for its variables: every vhost, queue and target, and a rate window.
VARIABLES = {"$__rate_interval": "1m", "$vhost": ".*", "$queue": ".*", "$target": ".*"}


def _panel_queries() -> list[tuple[str, str]]:
    dashboard = json.loads(GRAFANA.read_text())
    return [(p["title"], t["expr"]) for p in dashboard["panels"] for t in p["targets"]]


def test_grafana_dashboard_has_datasource_vhost_and_queue_variables_and_uses_them():
    dashboard = json.loads(GRAFANA.read_text())
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    assert {"vhost", "queue"} <= set(variables)
    for panel in dashboard["panels"]:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
    titles = " ".join(p["title"] for p in dashboard["panels"]).lower()
    for subject in ("heatmap", "p50 / p99", "batch", "unacked against prefetch", "redelivery", "nacks", "audit",
                    "findings"):
        assert subject in titles, subject


def test_every_grafana_panel_query_evaluates_and_most_return_data(failing):
    wait_for(lambda: failing.active().get("AckscopeRequeueLoop"), timeout=90, what="the failures to show")
    results = {}
    for title, expr in _panel_queries():
        q = expr
        for name, value in VARIABLES.items():
            q = q.replace(name, value)
        response = requests.get(f"{failing.prometheus}/api/v1/query", params={"query": q}, timeout=10).json()
        assert response["status"] == "success", (title, expr, response.get("error"))
        results[(title, expr)] = len(response["data"]["result"])
    empty = [k for k, n in results.items() if n == 0]
    assert len(empty) <= len(results) // 4, empty  # nacks, timeouts and the like may rightly be empty


def test_alerts_stay_quiet_for_a_healthy_workload(prometheus, broker, vhost, tmp_path):
    with watched(prometheus, broker, vhost, tmp_path, "healthy") as w:
        wait_for(lambda: w.query('rate(ackscope_channel_published_total{connection_name="ackscope-scenario healthy"}'
                                 '[1m]) > 0'), timeout=60, what="the healthy publisher's traffic in Prometheus")
        seen = []
        for _ in range(20):  # twenty evaluations, one a second, with the workload in full swing
            seen.append(w.active())
            time.sleep(1)
    # Each alert with its labels (the finding's rule and object), so a failure says which rule spoke.
    assert not any(seen), [{name: [a["labels"] for a in alerts] for name, alerts in active.items()}
                           for active in seen if active]


def test_the_example_prometheus_config_is_valid(promtool):
    result = subprocess.run([promtool, "check", "config",
                             str(DEPLOY / "prometheus.yml")], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
