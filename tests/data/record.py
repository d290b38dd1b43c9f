"""Record the management API's answers, as ackscope asks for them, from a private node with a workload.

    python tests/data/record.py   # writes tests/data/rabbitmq-<version>/<endpoint>.json
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pika

from ackscope.core.secret import Secret
from ackscope.sources.management.client import ManagementClient
from ackscope.sources.management.source import LISTS
from ackscope.workloads.private_broker import ADMIN_PASSWORD, ADMIN_USER, LocalBroker


def workload(broker: LocalBroker) -> list[pika.BlockingConnection]:
    def connect(name: str, heartbeat: int | None = None) -> pika.BlockingConnection:
        params = pika.URLParameters(broker.amqp_url())
        params.client_properties = {"connection_name": name}
        if heartbeat is not None:
            params.heartbeat = heartbeat
        return pika.BlockingConnection(params)

    publisher = connect("orders-publisher")
    ch = publisher.channel()
    ch.confirm_delivery()
    for name, qtype in (("orders", "classic"), ("payments", "quorum"), ("audit", "stream")):
        ch.queue_declare(name, durable=True, arguments={"x-queue-type": qtype})
        for _ in range(30):
            ch.basic_publish("", name, b"x", pika.BasicProperties(delivery_mode=2))
    try:
        ch.basic_publish("amq.direct", "nowhere", b"x", mandatory=True)
    except pika.exceptions.UnroutableError:
        pass  # the return is the point: it shows in the channel's return_unroutable count
    worker = connect("orders-worker", heartbeat=0)
    wch = worker.channel()
    wch.basic_qos(prefetch_count=10)
    wch.basic_consume("orders", on_message_callback=lambda *a: None)
    hoarder = connect("payments-hoarder")
    hoarder.channel().basic_consume("payments", on_message_callback=lambda *a: None)
    return [publisher, worker, hoarder]


def main() -> int:
    broker = LocalBroker(name="ackscope-record")
    broker.start()
    try:
        held = workload(broker)
        time.sleep(8)  # a few statistics intervals, so every object has its stats
        client = ManagementClient(broker.management_url, ADMIN_USER, Secret(ADMIN_PASSWORD))
        overview = client.fetch("overview", time.monotonic() + 30)
        out = Path(__file__).parent / f"rabbitmq-{overview['rabbitmq_version']}"
        out.mkdir(exist_ok=True)
        for endpoint in ("overview", *LISTS):
            body = client.fetch(endpoint, time.monotonic() + 30)
            (out / f"{endpoint}.json").write_text(json.dumps(body, indent=1, sort_keys=True) + "\n")
        print(f"recorded into {out}")
        for conn in held:
            conn.close()
    finally:
        broker.stop()
        broker.remove()
    return 0


if __name__ == "__main__":
    sys.exit(main())
