"""The README's first command: `ackscope demo` brings a private broker, the exporter with its probes,
failure scenarios, the dashboard and Prometheus up, and Ctrl-C takes them all down, leaving no node, no
process and no broker directory behind (the data dir stays, for the pipeline)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import psutil
import requests
from helpers import parse, value, wait_for

from ackscope.workloads.ports import free_port

DEMO_TARGETS = ("classic-persistent", "classic-transient", "quorum", "reject-publish")
# The demo's own node takes the kernel's ports, not the worker's range: from that range it once took the port the
# test had picked for the demo's --listen, free until the demo bound it after starting the node.
DEMO_ENV = {k: v for k, v in os.environ.items() if k != "ACKSCOPE_PORT_RANGE"}


def test_demo_brings_everything_up_and_ctrl_c_takes_it_all_down(rabbitmq_server, prometheus):
    port, dashboard_port, prometheus_port = free_port(), free_port(), free_port()
    proc = subprocess.Popen([sys.executable, "-m", "ackscope", "demo", "--listen", f"127.0.0.1:{port}",
                             "--interval", "1", "--dashboard-port", str(dashboard_port), "--prometheus-port",
                             str(prometheus_port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=DEMO_ENV)
    lines: list[str] = []
    # A reader thread, so that waiting for the demo's lines times out even when it prints nothing.
    reader = threading.Thread(target=lambda: lines.extend(line.rstrip("\n") for line in proc.stdout), daemon=True)
    reader.start()
    try:
        wait_for(lambda: _printed(proc, lines, "Ctrl-C stops everything."), timeout=120, what="the demo's URLs")
        assert f"metrics    http://127.0.0.1:{port}/metrics" in lines
        assert f"dashboard  http://127.0.0.1:{dashboard_port}/" in lines
        # The alerts page as the Prometheus it started serves it (Debian's keeps its UI under /classic/).
        alerts = next(line.split()[1] for line in lines if line.startswith("prometheus "))
        assert alerts.startswith(f"http://127.0.0.1:{prometheus_port}/") and alerts.endswith("alerts")
        page = requests.get(alerts, timeout=5)
        assert page.status_code == 200 and "Alerts" in page.text, alerts
        base_dir = Path(re.search(r"private RabbitMQ node in (\S+) \.\.\.", "\n".join(lines)).group(1))
        data_dir = Path(next(line.split()[1] for line in lines if line.startswith("data ")))
        assert base_dir.is_dir()

        def up():
            s = parse(requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text)
            return (value(s, "ackscope_up") == 1 and value(s, "ackscope_broker_info", rabbitmq_version="3.10.8")
                    and all(value(s, "ackscope_probe_up", target=t) == 1 for t in DEMO_TARGETS))
        wait_for(up, what="the demo exporter to see its broker, and its probes to run")
        wait_for(lambda: {"prefetch-saturated", "auto-ack-consumer"} <= {
            f["rule"] for f in requests.get(f"http://127.0.0.1:{port}/api/findings", timeout=5).json()["findings"]},
            timeout=30, what="the scenarios' findings")
        wait_for(lambda: _answers(f"http://127.0.0.1:{dashboard_port}/_stcore/health"), timeout=60,
                 what="the dashboard")
        wait_for(lambda: _alerting_rules(prometheus_port) >= 12, timeout=60, what="Prometheus with the alert rules")
        beam_pid = int((base_dir / "beam.pid").read_text())
        children = psutil.Process(proc.pid).children(recursive=True)
        assert {"prometheus", "python"} <= {Path(c.exe()).name.rstrip("0123456789.") for c in children}
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=90)
        reader.join(timeout=10)
    out = "\n".join(lines)
    assert proc.returncode == 0, out
    assert "Traceback" not in out
    assert not base_dir.exists()
    assert not Path(f"/proc/{beam_pid}").exists(), "the demo's RabbitMQ node still runs"
    assert not [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
    assert list((data_dir / "events").rglob("*.parquet")), "the probes' events stay for the pipeline"
    shutil.rmtree(data_dir)


def test_demo_with_statistics_off_reads_the_plugin_finds_the_culprits_and_stops_clean(rabbitmq_server,
                                                                                     prometheus):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "ackscope", "demo", "--stats-off", "--listen", f"127.0.0.1:{port}",
                             "--interval", "1", "--scenarios", "prefetch-saturated,requeue-loop",
                             "--dashboard-port", str(free_port()), "--prometheus-port", str(free_port())],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=DEMO_ENV)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(line.rstrip("\n") for line in proc.stdout), daemon=True)
    reader.start()
    try:
        wait_for(lambda: _printed(proc, lines, "Ctrl-C stops everything."), timeout=120, what="the demo's URLs")
        base_dir = Path(re.search(r"private RabbitMQ node in (\S+) \.\.\.", "\n".join(lines)).group(1))
        data_dir = Path(next(line.split()[1] for line in lines if line.startswith("data ")))
        wait_for(lambda: value(parse(requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text),
                               "ackscope_source_info", source="prometheus") == 1, what="the plugin as the source")
        wait_for(lambda: {"prefetch-saturated", "requeue-loop"} <= {
            f["rule"] for f in requests.get(f"http://127.0.0.1:{port}/api/findings", timeout=5).json()["findings"]},
            timeout=60, what="the scenarios' findings, from the plugin")
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=90)
        reader.join(timeout=10)
    out = "\n".join(lines)
    assert proc.returncode == 0 and "Traceback" not in out, out
    assert not base_dir.exists()
    shutil.rmtree(data_dir)


def _answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=2).status_code == 200
    except requests.RequestException:
        return False


def _alerting_rules(port: int) -> int:
    try:
        groups = requests.get(f"http://127.0.0.1:{port}/api/v1/rules", timeout=2).json()["data"]["groups"]
    except (requests.RequestException, ValueError, KeyError):
        return 0
    return sum(1 for g in groups for r in g["rules"] if r["type"] == "alerting")


def _printed(proc: subprocess.Popen, lines: list[str], marker: str) -> bool:
    if marker in lines:
        return True
    if proc.poll() is not None:
        raise AssertionError("demo exited early:\n" + "\n".join(lines))
    return False
