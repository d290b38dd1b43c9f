"""What reading AMQP 1.0 sessions adds to a poll (a benchmark, not a test), side by side in one run on a private
RabbitMQ 4.3.6 node (the matrix's newest, from its Debian root).

For each size in --connections, opens that many AMQP 1.0 connections (Qpid Proton, one receiver each, credit 10,
on one quorum queue) beside as many AMQP 0-9-1 connections (pika, one consumer each, prefetch 10), then measures
the management source's poll (fetch and normalise) interleaved --runs times:
  - baseline: the same poll with the AMQP 1.0 connections' sessions not read (what ackscope did before),
  - with sessions: one GET /api/connections/{name}/sessions per AMQP 1.0 connection, in the source's pool,
each with the broker's CPU seconds around it (its own process counters). Median of the runs.
Target: the sessions' share of a poll stays under one second at 1,000 AMQP 1.0 connections (the default poll
deadline is 10 s).

    python bench/amqp10_sessions.py [--connections 100,1000] [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pika
import psutil
from proton.reactor import Container
from proton.utils import BlockingConnection

from ackscope.core.secret import Secret
from ackscope.sources.management import protocols
from ackscope.sources.management_source import ManagementSource
from ackscope.workloads.private_broker import ADMIN_PASSWORD, ADMIN_USER, LocalBroker
from ackscope.workloads.rabbitmq_release import Release


def _cpu(broker: LocalBroker) -> float:
    t = psutil.Process(broker.beam_pid()).cpu_times()
    return t.user + t.system


def _poll(broker: LocalBroker, source: ManagementSource, sessions: bool) -> tuple[float, float, int]:
    """(wall seconds, broker CPU seconds, links read) of one read."""
    saved = protocols._read
    if not sessions:  # the baseline: the same poll, no AMQP 1.0 connection asked for its sessions
        protocols._read = lambda s, asked, *rest: saved(s, [], *rest)
    try:
        cpu, started = _cpu(broker), time.perf_counter()
        s = source.read()
        return time.perf_counter() - started, _cpu(broker) - cpu, len(s.links)
    finally:
        protocols._read = saved


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--connections", default="100,1000")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    sizes = args.connections.split(",")
    if len(sizes) > 1:
        # Each size in a process of its own: Proton's blocking connections wait in select(), which takes no file
        # descriptor above 1,023, and the sizes before would use them up.
        for size in sizes:
            subprocess.run([sys.executable, __file__, "--connections", size, "--runs", str(args.runs)], check=True)
        return
    broker = LocalBroker(name="bench-amqp10", release=Release.in_root("sid"))
    broker.start()
    opened: list = []
    try:
        broker.api("PUT", "/queues/%2F/bench", json={"durable": True, "arguments": {"x-queue-type": "quorum"}})
        source = ManagementSource(broker.management_url, ADMIN_USER, Secret(ADMIN_PASSWORD), deadline=30.0)
        print(f"RabbitMQ {broker.release.version}; median of {args.runs} polls each")
        print("| AMQP 1.0 + AMQP 0-9-1 connections | poll without sessions | with sessions | broker CPU without | "
              "with | links read |")
        print("|---|---|---|---|---|---|")
        for size in (int(n) for n in args.connections.split(",")):
            with ThreadPoolExecutor(16) as pool:
                while len(opened) < 2 * size:
                    def amqp10(_):
                        c = BlockingConnection(f"amqp://127.0.0.1:{broker.ports.amqp}", user=ADMIN_USER,
                                               password=ADMIN_PASSWORD, virtual_host="vhost:/", allowed_mechs="PLAIN",
                                               container=Container())
                        c.create_receiver("/queues/bench", credit=10)
                        return c

                    def amqp091(_):
                        c = pika.BlockingConnection(pika.URLParameters(broker.amqp_url()))
                        ch = c.channel()
                        ch.basic_qos(prefetch_count=10)
                        ch.basic_consume("bench", lambda *a: None)
                        return c
                    missing = size - len(opened) // 2
                    opened += list(pool.map(amqp10, range(missing))) + list(pool.map(amqp091, range(missing)))
            time.sleep(5)  # the statistics list every new connection
            rows = {False: [], True: []}
            for _ in range(args.runs):
                for sessions in (False, True):
                    rows[sessions].append(_poll(broker, source, sessions))
            med = {k: [statistics.median(r[i] for r in v) for i in range(3)] for k, v in rows.items()}
            print(f"| {size} + {size} | {med[False][0]:.3f} s | {med[True][0]:.3f} s | {med[False][1]:.3f} s | "
                  f"{med[True][1]:.3f} s | {int(med[True][2])} |")
        source.close()
    finally:
        for c in opened:
            try:
                c.close()
            except Exception:
                pass
        broker.stop()
        broker.remove()


if __name__ == "__main__":
    main()
