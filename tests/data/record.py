"""Record a real node's answers, as ackscope's sources ask for them, from a private node with a workload.

    python tests/data/record.py                    # tests/data/rabbitmq-<version>/<endpoint>.json
    python tests/data/record.py --statistics-off   # tests/data/rabbitmq-<version>-stats-off/: the management
                                                   # API's lists, /metrics/detailed and /metrics of the plugin,
                                                   # rabbitmqctl list_channels and list_connections
    python tests/data/record.py --routes           # tests/data/routes-<version>/: what the management source
                                                   # reads where channels publish without confirms (the lists,
                                                   # and the vhost's exchanges and bindings)
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pika

from ackscope.core.secret import Secret
from ackscope.sources.cli import CHANNEL_ITEMS, CONNECTION_ITEMS
from ackscope.sources.http import HttpReader
from ackscope.sources.management.client import ManagementClient
from ackscope.sources.management_source import LISTS, ManagementSource
from ackscope.sources.plugin_source import LISTS as PLUGIN_LISTS
from ackscope.sources.plugin_source import QUEUE_COLUMNS, PrometheusPluginSource
from ackscope.sources.prometheus_plugin.normalise import FAMILIES
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


def statistics_off_workload(broker: LocalBroker) -> list[pika.BlockingConnection]:
    def connect(name: str) -> pika.BlockingConnection:
        params = pika.URLParameters(broker.amqp_url())
        params.client_properties = {"connection_name": name}
        return pika.BlockingConnection(params)

    conns = [connect(name) for name in ("invoice-worker", "audit-reader", "invoice-publisher")]
    saturated, hoarder, publisher = (c.channel() for c in conns)
    saturated.queue_declare("invoices", durable=True)
    saturated.queue_declare("audit", durable=True)
    for _ in range(30):
        saturated.basic_publish("", "invoices", b"invoice", pika.BasicProperties(delivery_mode=2))
        saturated.basic_publish("", "audit", b"audit", pika.BasicProperties(delivery_mode=2))
    saturated.basic_qos(prefetch_count=10)
    saturated.basic_consume("invoices", lambda *a: None)  # manual ack, never acks: 10 of 10 held
    hoarder.basic_consume("audit", lambda *a: None, auto_ack=True)
    publisher.confirm_delivery()
    for _ in range(5):
        publisher.basic_publish("", "invoices", b"confirmed", pika.BasicProperties(delivery_mode=2))
    conns[1].channel().basic_publish("amq.direct", "nowhere", b"dropped")  # no confirms, unroutable
    for c in conns:
        c.process_data_events(1)
    return conns


def routes_workload(broker: LocalBroker) -> list[pika.BlockingConnection]:
    """Two publishers without confirms, as Celery's producer and a worker's event dispatcher publish: 6 persistent
    tasks through a direct exchange into a durable queue, 10 transient events through a topic exchange into an
    auto-delete queue."""
    producer, worker = (pika.BlockingConnection(pika.URLParameters(broker.amqp_url())) for _ in range(2))
    tasks, events = producer.channel(), worker.channel()
    tasks.exchange_declare("tasks", "direct", durable=True)
    tasks.queue_declare("tasks", durable=True)
    tasks.queue_bind("tasks", "tasks", "tasks")
    events.exchange_declare("events", "topic", durable=True)
    events.queue_declare("events.gossip", auto_delete=True)
    events.queue_bind("events.gossip", "events", "worker.#")
    for _ in range(6):
        tasks.basic_publish("tasks", "tasks", b"task", pika.BasicProperties(delivery_mode=2))
    for _ in range(10):
        events.basic_publish("events", "worker.heartbeat", b"event", pika.BasicProperties(delivery_mode=1))
    return [producer, worker]


def main() -> int:
    statistics = "--statistics-off" not in sys.argv[1:]
    routes = "--routes" in sys.argv[1:]
    broker = LocalBroker(name="ackscope-record", statistics=statistics)
    broker.start()
    try:
        held = routes_workload(broker) if routes else workload(broker) if statistics else \
            statistics_off_workload(broker)
        time.sleep(8)  # a few statistics intervals (and plugin collections), so every object has its figures
        out = record_routes(broker) if routes else record(broker) if statistics else record_statistics_off(broker)
        print(f"recorded into {out}")
        for conn in held:
            conn.close()
    finally:
        broker.stop()
        broker.remove()
    return 0


def record(broker: LocalBroker) -> Path:
    client = ManagementClient(broker.management_url, ADMIN_USER, Secret(ADMIN_PASSWORD))
    overview = client.fetch("overview", time.monotonic() + 30)
    out = Path(__file__).parent / f"rabbitmq-{overview['rabbitmq_version']}"
    out.mkdir(exist_ok=True)
    for endpoint in ("overview", *LISTS):
        body = client.fetch(endpoint, time.monotonic() + 30)
        (out / f"{endpoint}.json").write_text(json.dumps(body, indent=1, sort_keys=True) + "\n")
    return out


def record_routes(broker: LocalBroker) -> Path:
    source = ManagementSource(broker.management_url, ADMIN_USER, Secret(ADMIN_PASSWORD), deadline=30)
    raw, errors = source.fetch()
    assert not errors, errors
    out = Path(__file__).parent / f"routes-{raw['overview']['rabbitmq_version']}"
    out.mkdir(exist_ok=True)
    for endpoint in ("channels", "queues", "exchanges", "bindings"):
        (out / f"{endpoint}.json").write_text(json.dumps(raw[endpoint], indent=1, sort_keys=True) + "\n")
    source.close()
    return out


def record_statistics_off(broker: LocalBroker) -> Path:
    """The management API's lists and the plugin's answers, as the Prometheus-plugin source asks for them."""
    source = PrometheusPluginSource(broker.management_url, (broker.prometheus_url,), ADMIN_USER, Secret(ADMIN_PASSWORD),
                                    timeout=10, deadline=30)
    deadline = time.monotonic() + 30
    version = source.management.fetch("overview", deadline)["rabbitmq_version"]
    out = Path(__file__).parent / f"rabbitmq-{version}-stats-off"
    out.mkdir(exist_ok=True)
    for name in ("overview", *PLUGIN_LISTS):
        (out / f"{name}.json").write_text(json.dumps(source.management.fetch(name, deadline), indent=1) + "\n")
    queues = source.management.fetch("queues", deadline, columns=QUEUE_COLUMNS, paginate=False, statistics=False)
    (out / "queues.json").write_text(json.dumps(queues, indent=1) + "\n")
    plugin = HttpReader(broker.prometheus_url, ADMIN_USER, Secret(ADMIN_PASSWORD), timeout=10, verify=True,
                        what="Prometheus plugin")
    (out / "detailed.prom").write_bytes(plugin.get("detailed", "/metrics/detailed",
                                                          [("family", f) for f in FAMILIES], deadline, "text/plain"))
    (out / "metrics.prom").write_bytes(plugin.get("metrics", "/metrics", {}, deadline, "text/plain"))
    # What --cli adds: the broker's CLI, which knows names and flags with statistics off.
    for name, items in (("list_channels", CHANNEL_ITEMS), ("list_connections", CONNECTION_ITEMS)):
        (out / f"cli_{name}.json").write_text(broker.ctl("-q", name, *items, "--formatter", "json"))
    source.close()
    return out


if __name__ == "__main__":
    sys.exit(main())
