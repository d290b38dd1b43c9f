"""What reading AMQP 1.0 sessions adds to a poll (a benchmark, not a test), before and after asking only the
connections that moved (sources/management/session_reads.py), side by side in one run on a private RabbitMQ
node of the matrix's newest release (from its Debian root).

For each size in --connections, opens that many AMQP 1.0 connections (Qpid Proton, one receiver each, credit 10,
on one quorum queue, idle as most of a large broker's clients are between messages), then measures the
management source's poll (fetch and normalise), the three ways interleaved --runs times:
  - lists only: no AMQP 1.0 connection asked for its sessions (what the lists cost, the share to compare with),
  - before: every AMQP 1.0 connection asked at every poll (one GET /api/connections/{name}/sessions each),
  - after: asked again only when its octets moved beyond empty frames, or at its refresh (SessionReads),
each with the broker's CPU seconds around it (its own process counters: the management plugin runs in it).
Median of the runs. After's first poll asks every connection, as a new exporter's does: it is shown apart.
Targets (issue 43): after adds at most 0.3 s to a poll at 1,000 connections, and grows no faster than linearly
to 5,000.

    python bench/amqp10_sessions.py [--connections 500,1000,2000,5000] [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

import psutil

from ackscope.core.secret import Secret
from ackscope.sources.management.session_reads import SessionReads
from ackscope.sources.management_source import ManagementSource
from ackscope.workloads.private_broker import ADMIN_PASSWORD, ADMIN_USER, LocalBroker
from ackscope.workloads.rabbitmq_release import Release

# Proton's reactor waits in select(), which takes no file descriptor above 1,023: a process holds this many.
PER_PROCESS = 800


class _Every(SessionReads):
    """Before: every connection asked at every poll."""

    def plan(self, connections, now):
        return list(connections), []


class _None(SessionReads):
    """The lists alone: no connection asked."""

    def plan(self, connections, now):
        return [], []


def _hold(port: int, count: int) -> None:
    """A child process: `count` idle AMQP 1.0 connections with a receiver each, until killed."""
    from proton.handlers import MessagingHandler
    from proton.reactor import Container

    class Hold(MessagingHandler):
        def __init__(self):
            super().__init__(prefetch=10)
            self.opened = 0

        def on_start(self, event):
            for _ in range(count):
                connection = event.container.connect(f"amqp://127.0.0.1:{port}", user=ADMIN_USER,
                                                     password=ADMIN_PASSWORD, virtual_host="vhost:/",
                                                     allowed_mechs="PLAIN")
                event.container.create_receiver(connection, "/queues/bench")

        def on_link_opened(self, event):
            self.opened += 1
            if self.opened == count:
                print("ready", flush=True)

    Container(Hold()).run()


def _cpu(broker: LocalBroker) -> float:
    t = psutil.Process(broker.beam_pid()).cpu_times()
    return t.user + t.system


def _poll(broker: LocalBroker, source: ManagementSource) -> tuple[float, float, int]:
    """(wall seconds, broker CPU seconds, links) of one read."""
    cpu, started = _cpu(broker), time.perf_counter()
    s = source.read()
    return time.perf_counter() - started, _cpu(broker) - cpu, len(s.links)


def _listed(broker: LocalBroker) -> int:
    return sum(1 for c in broker.api("GET", "/connections?columns=protocol,recv_oct").json()
               if c.get("protocol") == "AMQP 1-0" and c.get("recv_oct") is not None)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--connections", default="500,1000,2000,5000")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--hold", type=int, help=argparse.SUPPRESS)  # a child: hold this many connections
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.hold:
        _hold(args.port, args.hold)
        return
    broker = LocalBroker(name="bench-amqp10", release=Release.in_root("sid"))
    broker.start()
    children: list[subprocess.Popen] = []
    try:
        broker.api("PUT", "/queues/%2F/bench", json={"durable": True, "arguments": {"x-queue-type": "quorum"}})
        source = ManagementSource(broker.management_url, ADMIN_USER, Secret(ADMIN_PASSWORD), deadline=60.0)
        print(f"RabbitMQ {broker.release.version}; median of {args.runs} polls each")
        print("| AMQP 1.0 connections | lists only | before: every connection | after | after's first poll | "
              "broker CPU before | after | links read after |")
        print("|---|---|---|---|---|---|---|---|")
        held = 0
        for size in (int(n) for n in args.connections.split(",")):
            while held < size:
                count = min(PER_PROCESS, size - held)
                child = subprocess.Popen([sys.executable, __file__, "--hold", str(count), "--port",
                                          str(broker.ports.amqp)], stdout=subprocess.PIPE, text=True)
                children.append(child)
                if child.stdout.readline().strip() != "ready":
                    raise SystemExit(f"a child holding {count} connections did not get ready")
                held += count
            while _listed(broker) < size:  # the statistics list every new connection, with its octets
                time.sleep(1)
            time.sleep(3)  # the octets of the last links' attach reach the statistics
            modes = {"lists": _None(), "before": _Every(), "after": SessionReads()}
            source._sessions = modes["after"]  # the bench swaps what the source asks (no option ships for it)
            first = _poll(broker, source)
            rows: dict[str, list] = {m: [] for m in modes}
            for _ in range(args.runs):
                for mode, reads in modes.items():
                    source._sessions = reads
                    rows[mode].append(_poll(broker, source))
            med = {m: [statistics.median(r[i] for r in v) for i in range(3)] for m, v in rows.items()}
            print(f"| {size} | {med['lists'][0]:.3f} s | {med['before'][0]:.3f} s | {med['after'][0]:.3f} s | "
                  f"{first[0]:.3f} s | {med['before'][1]:.3f} s | {med['after'][1]:.3f} s | "
                  f"{int(med['after'][2])} |", flush=True)
        source.close()
    finally:
        for child in children:
            child.kill()
        broker.stop()
        broker.remove()


if __name__ == "__main__":
    main()
