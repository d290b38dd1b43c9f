"""Record what the shovel and federation plugins' management answers on each release of the matrix, for the
parser's tests.

    python tests/data/record_transfers.py      # tests/data/transfers-<version>.json

Two nodes: one with the shovel and federation plugins and their management, one with neither. On the first, a
dynamic shovel of each ack mode into a queue of the second (its URI with the password, as users declare it), one
to a host that does not resolve, a federation upstream that does not resolve and one on the second node.
Recorded: /api/shovels, /api/parameters/shovel and /api/federation-links of each node, with their HTTP status.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pika
import requests
from record_broker_log import on_the_matrix, written

from ackscope.workloads.node_files import PLUGINS
from ackscope.workloads.private_broker import ADMIN_PASSWORD, ADMIN_USER, LocalBroker
from ackscope.workloads.rabbitmq_release import Release

TRANSFER_PLUGINS = ("rabbitmq_shovel", "rabbitmq_shovel_management", "rabbitmq_federation",
                    "rabbitmq_federation_management")
ENDPOINTS = ("/shovels", "/parameters/shovel", "/federation-links")


def _declare(broker: LocalBroker, exchange: str | None = None, publish: int = 0) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(broker.amqp_url()))
    ch = conn.channel()
    ch.queue_declare("src", durable=True)
    ch.queue_declare("dst", durable=True)
    if exchange:
        ch.exchange_declare(exchange, "topic", durable=True)
    for _ in range(publish):
        ch.basic_publish("", "src", b"m", pika.BasicProperties(delivery_mode=2))
    conn.close()


def record(release: Release) -> Path:
    a = LocalBroker(name="ackscope-transfers", release=release, plugins=PLUGINS + TRANSFER_PLUGINS)
    b = LocalBroker(name="ackscope-transfers-plain", release=release)
    a.start()
    b.start()
    try:
        _declare(b, "fedx")
        _declare(a, "fedx", publish=100)
        dest = f"amqp://{ADMIN_USER}:{ADMIN_PASSWORD}@127.0.0.1:{b.ports.amqp}/%2F"
        for mode in ("no-ack", "on-publish", "on-confirm"):
            a.api("PUT", f"/parameters/shovel/%2F/to-b-{mode}", json={"value": {
                "src-uri": "amqp://", "src-queue": "src", "dest-uri": dest, "dest-queue": "dst", "ack-mode": mode}})
        a.api("PUT", "/parameters/shovel/%2F/to-nowhere", json={"value": {
            "src-uri": "amqp://", "src-queue": "src", "dest-uri": "amqp://u:secretpw@no-such-host.invalid:5672",
            "dest-queue": "dst"}})
        a.api("PUT", "/parameters/federation-upstream/%2F/nowhere",
              json={"value": {"uri": "amqp://u:secretpw@no-such-host.invalid"}})
        a.api("PUT", "/parameters/federation-upstream/%2F/plain", json={"value": {"uri": dest}})
        a.api("PUT", "/policies/%2F/federate", json={"pattern": "^fedx$", "apply-to": "exchanges",
                                                    "definition": {"federation-upstream-set": "all"}})

        def answers(node: LocalBroker) -> dict:
            out = {}
            for path in ENDPOINTS:
                r = requests.get(f"{node.management_url}/api{path}", auth=(ADMIN_USER, ADMIN_PASSWORD), timeout=30)
                out[path] = {"status": r.status_code, "body": r.json()}
            return out
        # Until every link and shovel has said how it went (running, or its error).
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            got = answers(a)
            if (len(got["/federation-links"]["body"]) == 2
                    and all(k["status"] != "starting" for k in got["/federation-links"]["body"])
                    and sum(s.get("state") == "running" for s in got["/shovels"]["body"]) == 3):
                break
            time.sleep(0.5)
        document = {"recorded_from": f"RabbitMQ {release.version}, tests/data/record_transfers.py",
                    "with_plugins": got, "without_plugins": answers(b)}
    finally:
        for node in (a, b):
            node.stop()
            node.remove()
    return written("transfers", release, document)


def main() -> int:
    return on_the_matrix(record)


if __name__ == "__main__":
    sys.exit(main())
