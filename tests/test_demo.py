"""The README's first command: `ackscope demo` brings a private broker and the exporter up, and Ctrl-C
takes both down, leaving no node and no data directory behind."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import requests

from ackscope.local_broker import free_port
from helpers import parse, value, wait_for


DEMO_TARGETS = ("classic-persistent", "classic-transient", "quorum", "reject-publish")


def test_demo_serves_metrics_of_its_own_broker_and_probes_and_stops_cleanly_on_ctrl_c():
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "ackscope.cli", "demo", "--listen", f"127.0.0.1:{port}",
                             "--interval", "1"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    try:
        wait_for(lambda: _read_until(proc, lines, "Ctrl-C stops everything."), timeout=120, what="the demo's URLs")
        assert f"metrics    http://127.0.0.1:{port}/metrics" in lines
        base_dir = Path(re.search(r"private RabbitMQ node in (\S+) \.\.\.", "\n".join(lines)).group(1))
        assert base_dir.is_dir()

        def up():
            s = parse(requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text)
            return (value(s, "ackscope_up") == 1 and value(s, "ackscope_broker_info", rabbitmq_version="3.10.8")
                    and all(value(s, "ackscope_probe_up", target=t) == 1 for t in DEMO_TARGETS))
        wait_for(up, what="the demo exporter to see its broker, and its probes to run")
        beam_pid = int((base_dir / "beam.pid").read_text())
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=90)
    assert proc.returncode == 0, out
    assert "Traceback" not in out
    assert not base_dir.exists()
    assert not Path(f"/proc/{beam_pid}").exists(), "the demo's RabbitMQ node still runs"


def _read_until(proc: subprocess.Popen, lines: list[str], marker: str) -> bool:
    line = proc.stdout.readline()
    if not line:
        raise AssertionError("demo exited early:\n" + "".join(lines))
    lines.append(line.rstrip("\n"))
    return line.strip() == marker
