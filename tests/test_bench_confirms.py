"""`ackscope bench confirms` on a real broker: every strategy runs and reports, the chart is written."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from ackscope.workloads.private_broker import ADMIN_PASSWORD


def test_bench_confirms_compares_every_strategy_on_classic_and_quorum(broker, vhost, tmp_path):
    html = tmp_path / "confirms.html"
    url = broker.amqp_url(vhost).replace(f":{ADMIN_PASSWORD}@", "@")
    done = subprocess.run([sys.executable, "-m", "ackscope", "bench", "confirms", "--amqp-url", url,
                           "--seconds", "0.5", "--html", str(html)], capture_output=True, text=True, timeout=120,
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
