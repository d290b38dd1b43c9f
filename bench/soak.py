"""The soak (issue 18): `ackscope exporter` with probes and --data-dir over a private node running failure
scenarios and a healthy client, a fault every --fault-every seconds (kill -9 and restart, memory alarm, the
management API hanging then answering HTML then truncated JSON, --loss % packet loss on the exporter's path to
the broker (the exporter on a test host in a network namespace; root), graceful restart, --latency-ms added each
way on that path, disk alarm, in turn). See ackscope/workloads/soak.py for what is sampled.

Prints a row per fault and the run's figures against the targets: 0 confirmed persistent messages lost;
recovery within two intervals after the broker answers; RSS and fds within 10 % from 5 minutes on; scrape p99
under 50 ms; at most two log lines per fault. `--chart PNG` draws RSS, fds, scrape time and ackscope_up.

    python bench/soak.py [--minutes 30] [--interval 3] [--fault-every 120] [--loss 20] [--latency-ms 50]
                         [--chart docs/soak.png]
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path

from charts import save_png
from plotly.subplots import make_subplots

from ackscope_testkit.soak import PROBE_COUNTERS, Soak


def table(soak: Soak) -> str:
    head = ["fault", "at_s", "down_after_s", "recovered_s", "log_lines", "confirm_ms", *PROBE_COUNTERS,
            "packets_dropped", "findings", "not_cleared"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in soak.rows():
        lines.append("| " + " | ".join("" if row.get(k) is None else str(row.get(k)) for k in head) + " |")
    return "\n".join(lines)


def chart(soak: Soak, path: Path) -> None:
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.06,
                        subplot_titles=("exporter RSS (MiB) and open files", "scrape time (ms)", "ackscope_up"))
    at = [s.at / 60 for s in soak.samples]
    fig.add_scatter(x=at, y=[s.rss_mib for s in soak.samples], name="RSS MiB", row=1, col=1)
    fig.add_scatter(x=at, y=[s.fds for s in soak.samples], name="open files", row=1, col=1)
    fig.add_scatter(x=at, y=[s.scrape_ms for s in soak.samples], name="scrape ms", mode="markers",
                    marker={"size": 3}, row=2, col=1)
    fig.add_scatter(x=at, y=[s.up for s in soak.samples], name="ackscope_up", line={"shape": "hv"}, row=3, col=1)
    for f in soak.faults:
        fig.add_vline(x=f.started / 60, line={"dash": "dot", "color": "gray"})
    fig.update_xaxes(title_text="minutes", row=3, col=1)
    fig.update_layout(title=f"Soak: {soak.minutes:g} minutes, a fault every {soak.fault_every:g} s", height=700)
    save_png(fig, path, 1000, 700)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--interval", type=float, default=3.0)
    parser.add_argument("--fault-every", type=float, default=120.0)
    parser.add_argument("--loss", type=int, default=20, help="%% of packets lost in the packet-loss fault (0: none)")
    parser.add_argument("--latency-ms", type=int, default=50, help="added each way in the latency fault (0: none)")
    parser.add_argument("--chart", type=Path)
    args = parser.parse_args()
    # A SIGTERM (timeout(1), a CI runner) unwinds like Ctrl-C, so the soak removes its node and test host.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("ackscope.soak").setLevel(logging.INFO)
    # The scenarios' clients lose their connections with the broker by design; pika logs each with its stack.
    # What the soak measures is the exporter's own log, read from its process.
    logging.getLogger("pika").setLevel(logging.CRITICAL)
    soak = Soak(args.minutes, args.interval, args.fault_every, loss_percent=args.loss,
                latency_ms=args.latency_ms).run()
    print(table(soak))
    print(f"\nthe probes' mean confirm latency before the first fault: {soak.baseline_confirm_ms():.1f} ms")
    rss5, rss_end, fds5, fds_end = soak.growth()
    print(f"\nlost (confirmed persistent) {soak.lost():.0f}; scrape p99 {soak.scrape_p99_ms():.1f} ms; "
          f"RSS {rss5:.0f} MiB at 5 min -> {rss_end:.0f} MiB at the end ({(rss_end / rss5 - 1) * 100:+.0f} %); "
          f"fds {fds5} -> {fds_end}; log lines {len(soak.log_lines)} in all")
    for f in soak.faults:
        for line in f.log_lines:
            print(f"  [{f.name}] {line}")
    if args.chart:
        chart(soak, args.chart)
    return 0


if __name__ == "__main__":
    sys.exit(main())
