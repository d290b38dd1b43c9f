"""The Prometheus alert rules: promtool's check and unit tests for every alert, and a real Prometheus that
evaluates them against the exporter while failure scenarios run (and stays quiet for a healthy workload)."""

from __future__ import annotations

import re
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

import requests
import yaml

from ackscope.diagnosis.scenarios import BY_NAME, Running
from ackscope.exporter.normalise import Selection
from ackscope.secret import Secret
from helpers import prometheus_scraping, require_binary, wait_for
from probe_helpers import probe_config, quick

DEPLOY = Path(__file__).resolve().parent.parent / "deploy" / "prometheus"
RULES = DEPLOY / "ackscope-alerts.yml"
UNIT_TESTS = DEPLOY / "tests" / "ackscope-alerts-test.yml"


def _alerts() -> dict[str, dict]:
    return {r["alert"]: r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]}


def test_promtool_accepts_the_rules_and_every_alert_has_a_severity_and_a_runbook():
    result = subprocess.run([require_binary("promtool", "prometheus"), "check", "rules", str(RULES)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    alerts = _alerts()
    assert len(alerts) >= 12
    for name, rule in alerts.items():
        assert rule["labels"]["severity"] in ("warning", "critical"), name
        assert rule["annotations"]["summary"] and "First:" in rule["annotations"]["runbook"], name


def test_promtool_unit_tests_fire_every_alert_and_pass():
    tests = yaml.safe_load(UNIT_TESTS.read_text())["tests"]
    fired = {t["alertname"] for case in tests for t in case["alert_rule_test"] if t["exp_alerts"]}
    assert fired == set(_alerts())
    result = subprocess.run([require_binary("promtool", "prometheus"), "test", "rules", str(UNIT_TESTS)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@contextmanager
def _watched(broker, vhost, start_exporter, tmp_path, *scenarios):
    """An exporter with probes over `vhost` running `scenarios`, scraped by a Prometheus evaluating the rules;
    yields a function returning the active alerts (pending or firing) by name."""
    exporter = start_exporter(broker.management_url, interval=1.0,
                              probes=probe_config(broker, vhost, (quick("classic-persistent"),)),
                              selection=Selection(include_vhosts=re.compile(re.escape(vhost))))
    running = Running([BY_NAME[n] for n in scenarios], Secret(broker.amqp_url(vhost))).start()
    try:
        with prometheus_scraping(exporter.url.removeprefix("http://"), tmp_path, rules=RULES) as prometheus:
            def active() -> dict[str, list[dict]]:
                try:
                    alerts = requests.get(f"{prometheus}/api/v1/alerts", timeout=5).json()["data"]["alerts"]
                except (requests.RequestException, ValueError, KeyError):
                    return {}
                by_name: dict[str, list[dict]] = {}
                for a in alerts:
                    by_name.setdefault(a["labels"]["alertname"], []).append(a)
                return by_name

            active.prometheus = prometheus
            wait_for(lambda: _query(prometheus, "ackscope_probe_up == 1"), timeout=60,
                     what="Prometheus to scrape the exporter and its probe")
            yield active
    finally:
        running.stop()
    assert not running.errors, running.errors


def test_alerts_go_pending_or_firing_for_real_failures(broker, vhost, start_exporter, tmp_path):
    expected = {"AckscopeFindingWarning", "AckscopeRequeueLoop", "AckscopePublisherWithoutConfirms",
                "AckscopeUnackedAtPrefetch", "AckscopeUnroutableDropped"}
    with _watched(broker, vhost, start_exporter, tmp_path, "prefetch-saturated", "requeue-loop",
                  "publisher-without-confirms", "unroutable-dropped") as active:
        found = wait_for(lambda: (a := active()) and expected <= set(a) and a, timeout=90,
                         what=lambda: f"alerts {sorted(expected)} (active: {sorted(active())})")
    saturated = [a for a in found["AckscopeUnackedAtPrefetch"]
                 if a["labels"]["connection_name"] == "ackscope-scenario prefetch-saturated"]
    assert saturated and saturated[0]["state"] in ("pending", "firing")
    assert {a["labels"]["connection_name"] for a in found["AckscopePublisherWithoutConfirms"]} >= \
        {"ackscope-scenario publisher-without-confirms"}
    assert any(a["labels"]["connection_name"] == "ackscope-scenario unroutable-dropped"
               for a in found["AckscopeUnroutableDropped"])
    assert "AckscopeProbeMessageLost" not in found and "AckscopeBrokerUnreachable" not in found


def test_alerts_stay_quiet_for_a_healthy_workload(broker, vhost, start_exporter, tmp_path):
    with _watched(broker, vhost, start_exporter, tmp_path, "healthy") as active:
        wait_for(lambda: _query(active.prometheus, 'rate(ackscope_channel_published_total'
                                                   '{connection_name="ackscope-scenario healthy"}[1m]) > 0'),
                 timeout=60, what="the healthy publisher's traffic in Prometheus")
        seen = []
        for _ in range(20):  # twenty evaluations, one a second, with the workload in full swing
            seen.append(active())
            time.sleep(1)
    assert not any(seen), [sorted(a) for a in seen if a]


def _query(prometheus: str, q: str) -> list:
    try:
        return requests.get(f"{prometheus}/api/v1/query", params={"query": q}, timeout=5).json()["data"]["result"]
    except (requests.RequestException, ValueError, KeyError):
        return []
