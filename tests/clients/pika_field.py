"""pika clients of failures reported from the field (issue 55), each on connections named pika-<mode>, until killed.
Usage: AMQP_URL=amqp://... python pika_field.py <mode> <queue or exchange>
    nacked      confirm mode: 50 persistent publishes, a quarter of a second apart, into a queue of x-max-length 1
                with x-overflow reject-publish (49 nacked: pika raises NackError, caught); then connected and idle
    returned    confirm mode: 5 mandatory publishes to an exchange with no binding (each returned, then acked:
                pika raises UnroutableError, caught); then connected and idle
    poison      a supervisor (as systemd's Restart=always, RestartSec=1.5) of poison-worker processes, one at a time
    poison-worker  consumes the queue with manual acks, prefetch 1, and exits at once on the message "poison"
                without acking it (a worker that dies on it); acks anything else
    healthy     confirms, prefetch 20, manual acks: two persistent messages a second into a durable queue it
                consumes from
Each prints "ready" once connected (the supervisor once it started its first worker)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pika
from pika.exceptions import NackError, UnroutableError

mode, target = sys.argv[1], sys.argv[2]
PERSISTENT = pika.BasicProperties(delivery_mode=2)


def connect(name: str) -> pika.BlockingConnection:
    params = pika.URLParameters(os.environ["AMQP_URL"])
    params.client_properties = {"connection_name": f"pika-{name}"}
    return pika.BlockingConnection(params)


def idle(conn: pika.BlockingConnection) -> None:
    while True:
        conn.sleep(1.0)  # serves the connection: heartbeats answered, nothing published


if mode == "poison":
    print("ready", flush=True)
    while True:
        subprocess.run([sys.executable, __file__, "poison-worker", target], check=False)
        time.sleep(1.5)

conn = connect(mode)
ch = conn.channel()
if mode == "nacked":
    ch.queue_declare(target, durable=True, arguments={"x-max-length": 1, "x-overflow": "reject-publish",
                                                      "x-expires": 600_000})
    ch.confirm_delivery()
    print("ready", flush=True)
    for i in range(50):
        try:
            ch.basic_publish("", target, f"order {i}".encode(), PERSISTENT)
        except NackError:
            pass  # the broker refused it: the queue is full
        conn.sleep(0.25)
    idle(conn)
elif mode == "returned":
    ch.exchange_declare(target, "direct", durable=True)
    ch.confirm_delivery()
    print("ready", flush=True)
    for i in range(5):
        try:
            ch.basic_publish(target, "nobody-binds-this", f"order {i}".encode(), PERSISTENT, mandatory=True)
        except UnroutableError:
            pass  # returned, then acked: the client goes on as most do
        conn.sleep(0.5)
    idle(conn)
elif mode == "poison-worker":
    ch.basic_qos(prefetch_count=1)

    def handle(channel, method, _properties, body):
        if body == b"poison":
            os._exit(1)  # dies holding it: the broker requeues what the dead connection held
        channel.basic_ack(method.delivery_tag)
    ch.basic_consume(target, handle)
    ch.start_consuming()
elif mode == "healthy":
    ch.queue_declare(target, durable=True, arguments={"x-expires": 600_000})
    ch.confirm_delivery()
    consuming = conn.channel()
    consuming.basic_qos(prefetch_count=20)
    consuming.basic_consume(target, lambda c, m, _p, _b: c.basic_ack(m.delivery_tag))
    print("ready", flush=True)
    while True:
        ch.basic_publish("", target, b"order", PERSISTENT)
        conn.sleep(0.5)
else:
    sys.exit(f"unknown mode {mode!r}")
