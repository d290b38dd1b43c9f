"""`ackscope bench confirms` on a real broker: every strategy runs and reports, the chart is written, and the
figures saved are what the exporter's --confirm-bench reads back."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from ackscope.apps import bench
from ackscope.workloads.private_broker import ADMIN_PASSWORD


def test_bench_confirms_compares_every_strategy_on_classic_and_quorum(broker, vhost, tmp_path):
    html, saved = tmp_path / "confirms.html", tmp_path / "confirms.json"
    url = broker.amqp_url(vhost).replace(f":{ADMIN_PASSWORD}@", "@")
    done = subprocess.run([sys.executable, "-m", "ackscope", "bench", "confirms", "--amqp-url", url,
                           "--seconds", "0.5", "--html", str(html), "--save", str(saved)], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, ACKSCOPE_AMQP_PASSWORD=ADMIN_PASSWORD, COLUMNS="200"))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    for strategy in ("transaction per message", "transaction per batch of 100", "confirm and wait, per message",
                     "publish 100, then wait for their confirms", "streaming confirms, window 500",
                     "fire and forget"):
        rows = [line for line in lines if strategy in line]
        assert {("classic" in r, "quorum" in r) for r in rows} == {(True, False), (False, True)}, strategy
    # Streaming confirms publish many times faster than a transaction per message, on both queue types.
    ratios = dict(re.findall(r"(classic|quorum): streaming confirms publish (\d+)x as many messages per second as a "
                             r"transaction per message", done.stderr))
    assert set(ratios) == {"classic", "quorum"}, done.stderr
    assert all(int(r) >= 2 for r in ratios.values()), ratios
    assert html.stat().st_size > 100_000 and b"plotly" in html.read_bytes()
    assert "Traceback" not in done.stderr
    figures = bench.saved(str(saved))
    assert len(figures.rates) == 12 and figures.broker == url  # as given, with no password in it
    assert not re.search(r"//[^/@]*:[^/@]*@", saved.read_text())
    assert {r.queue_type for r in figures.rates} == {"classic", "quorum"} and all(r.rate > 0 for r in figures.rates)
