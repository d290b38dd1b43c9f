"""What shovels add to a poll (a benchmark, not a test): a private node with the shovel plugin and its management,
--queues pairs of durable queues; polled --polls times with no shovel, then with a dynamic shovel between each pair
(every third no-ack, the rest on-confirm, each moving a few persistent messages), in one run. Reported: the whole
poll (the management source's read) both ways, and the shovel and federation part alone (sources.management.transfers)
with the shovels. Target: 200 dynamic shovels add under 0.2 s to a poll.

    python bench/shovels.py [--shovels 200] [--polls 20] [--release sid]
"""

from __future__ import annotations

import argparse
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import pika

from ackscope.core.secret import Secret
from ackscope.sources import Selection
from ackscope.sources.management import transfers
from ackscope.sources.management_source import ManagementSource
from ackscope.workloads.node_files import PLUGINS
from ackscope.workloads.private_broker import ADMIN_PASSWORD, ADMIN_USER, LocalBroker
from ackscope.workloads.rabbitmq_release import Release

PLUGINS_WITH_SHOVELS = PLUGINS + ("rabbitmq_shovel", "rabbitmq_shovel_management")


def declare(broker: LocalBroker, count: int) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(broker.amqp_url()))
    ch = conn.channel()
    for i in range(count):
        ch.queue_declare(f"src-{i}", durable=True)
        ch.queue_declare(f"dst-{i}", durable=True)
        for _ in range(5):
            ch.basic_publish("", f"src-{i}", b"m", pika.BasicProperties(delivery_mode=2))
    conn.close()


def shovel(broker: LocalBroker, count: int) -> None:
    for i in range(count):
        broker.api("PUT", f"/parameters/shovel/%2F/move-{i}", json={"value": {
            "src-uri": "amqp://", "src-queue": f"src-{i}", "dest-uri": "amqp://", "dest-queue": f"dst-{i}",
            "ack-mode": "no-ack" if i % 3 == 0 else "on-confirm"}})
    deadline = time.monotonic() + 120
    while sum(s.get("state") == "running" for s in broker.api("GET", "/shovels").json()) < count:
        if time.monotonic() > deadline:
            raise SystemExit(f"the {count} shovels did not all run within 120 s")
        time.sleep(0.5)


def polls(source: ManagementSource, count: int) -> list[float]:
    times = []
    for _ in range(count):
        started = time.monotonic()
        snapshot = source.read()
        times.append(time.monotonic() - started)
        if snapshot.unread:
            raise SystemExit(f"a poll was partial: {snapshot.unread}")
    return times


def transfer_reads(source: ManagementSource, count: int) -> tuple[list[float], int]:
    base = source.read()
    pool = ThreadPoolExecutor(max_workers=3)
    times, found = [], 0
    for _ in range(count):
        started = time.monotonic()
        read, failed = transfers.read(base, source.client, time.monotonic() + 10, pool, Selection())
        times.append(time.monotonic() - started)
        found = len(read.shovels)
        if failed:
            raise SystemExit(f"the shovels were not read: {failed}")
    pool.shutdown()
    return times, found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shovels", type=int, default=200)
    parser.add_argument("--polls", type=int, default=20)
    parser.add_argument("--release", default=None, help="a Debian root's suite (trixie, sid); the machine's own by "
                        "default")
    args = parser.parse_args()
    release = Release.in_root(args.release) if args.release else Release.host()
    broker = LocalBroker(name="ackscope-bench-shovels", release=release, plugins=PLUGINS_WITH_SHOVELS)
    broker.start()
    try:
        declare(broker, args.shovels)
        source = ManagementSource(broker.management_url, ADMIN_USER, Secret(ADMIN_PASSWORD), deadline=30.0)
        polls(source, 3)  # warm: connections kept alive, the broker's first listing
        rows = {"poll, no shovel (baseline)": polls(source, args.polls)}
        shovel(broker, args.shovels)
        polls(source, 3)
        rows[f"poll, {args.shovels} dynamic shovels"] = polls(source, args.polls)
        rows["of which the shovels and federation links"], found = transfer_reads(source, args.polls)
        source.close()
    finally:
        broker.stop()
        broker.remove()
    print(f"RabbitMQ {release.version}, {args.shovels} pairs of queues, {args.polls} polls each way; the poll read "
          f"{found} shovels\n")
    print("| poll | median s | max s |\n|---|---:|---:|")
    for name, times in rows.items():
        print(f"| {name} | {statistics.median(times):.3f} | {max(times):.3f} |")
    added = statistics.median(rows[f"poll, {args.shovels} dynamic shovels"]) - statistics.median(
        rows["poll, no shovel (baseline)"])
    print(f"\nAdded by the shovels (medians): {added:.3f} s; target < 0.2 s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
