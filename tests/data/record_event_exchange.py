"""Record what a real node's event exchange publishes as clients come and go, on each release of the matrix, for
the event exchange parser's tests.

    python tests/data/record_event_exchange.py      # tests/data/event-exchange-<version>.json

A queue bound to amq.rabbitmq.event (connection.*, channel.*, consumer.*) sees: a connection named by its client,
a channel it opens and closes, a consumer, a channel the broker closes (a double ack), the connection's close; and
a connection that gives no name and is dropped without a close. Each message as [routing key, headers].
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pika
from record_broker_log import in_parallel

from ackscope.workloads.node_files import PLUGINS
from ackscope.workloads.private_broker import LocalBroker
from ackscope.workloads.rabbitmq_release import Release


def _plain(v):
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return v


def record(release: Release) -> Path:
    broker = LocalBroker(name="ackscope-events", release=release, plugins=PLUGINS + ("rabbitmq_event_exchange",))
    broker.start()
    try:
        watcher = pika.BlockingConnection(pika.URLParameters(broker.amqp_url()))
        ch = watcher.channel()
        queue = ch.queue_declare("", exclusive=True).method.queue
        for key in ("connection.*", "channel.*", "consumer.*"):
            ch.queue_bind(queue, "amq.rabbitmq.event", key)

        params = pika.URLParameters(broker.amqp_url())
        params.client_properties = {"connection_name": "orders-worker"}
        conn = pika.BlockingConnection(params)
        work = conn.channel()
        work.queue_declare("orders")
        work.basic_publish("", "orders", b"order")
        work.basic_consume("orders", lambda *a: None)
        conn.channel().close()
        getter = conn.channel()
        getter.queue_declare("invoices")
        getter.basic_publish("", "invoices", b"invoice")
        method = None
        while method is None:
            method, _, _ = getter.basic_get("invoices")
        getter.basic_ack(method.delivery_tag)
        getter.basic_ack(method.delivery_tag)  # the double ack: the broker closes this channel
        try:
            conn.process_data_events(1)
        except pika.exceptions.AMQPError:
            pass
        work.close()
        conn.close()
        # No name, and a process killed with its connection open: the TCP connection goes without a close.
        killed = subprocess.Popen([sys.executable, "-c", "import sys, time, pika; "
                                   "pika.BlockingConnection(pika.URLParameters(sys.argv[1])); print(flush=True); "
                                   "time.sleep(60)", broker.amqp_url()], stdout=subprocess.PIPE)
        killed.stdout.readline()
        killed.kill()
        killed.wait()
        time.sleep(2)

        messages = []
        while (got := ch.basic_get(queue, auto_ack=True))[0] is not None:
            method, props, _ = got
            messages.append([method.routing_key, _plain(props.headers or {})])
        watcher.close()
        version = broker.api("GET", "/overview").json()["rabbitmq_version"]
        out = Path(__file__).parent / f"event-exchange-{version}.json"
        out.write_text(json.dumps(messages, indent=1) + "\n")
        return out
    finally:
        broker.stop()
        broker.remove()


def main() -> int:
    return in_parallel([lambda r=r: record(r) for r in (Release.host(), Release.in_root("trixie"),
                                                        Release.in_root("sid"))])


if __name__ == "__main__":
    sys.exit(main())
