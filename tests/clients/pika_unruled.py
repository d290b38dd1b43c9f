"""pika clients of failures no rule named before issue 55 (K7), each on a connection named pika-<mode>, until killed.
Usage: AMQP_URL=amqp://... python pika_unruled.py <mode> <queue>
    get-storm   basic.get on an empty durable queue in a loop (a public report: 392,668 get-empty in 45 s, without a
                pause), a few milliseconds apart: a storm four times the rule's threshold that leaves the suite's
                node, beside every other case, the CPU to answer its exporter
    auto-ack    consumes the queue with automatic acknowledgement and no prefetch limit, taking a second over each
                message: what the broker sent waits in the client, counted as done (killed, it is lost)
    healthy     confirms, prefetch 20, manual acks: two persistent messages a second into a durable queue it consumes
                from; beside it an exclusive, auto-delete reply queue it consumes, empty (what an RPC client keeps)
Each prints "ready" once connected and consuming."""

from __future__ import annotations

import os
import sys
import time

import pika

mode, queue = sys.argv[1], sys.argv[2]
params = pika.URLParameters(os.environ["AMQP_URL"])
params.client_properties = {"connection_name": f"pika-{mode}"}
conn = pika.BlockingConnection(params)
ch = conn.channel()
ch.queue_declare(queue, durable=True)

if mode == "get-storm":
    print("ready", flush=True)
    while True:
        ch.basic_get(queue)
        time.sleep(0.005)
elif mode == "auto-ack":
    def slowly(channel, method, properties, body):
        time.sleep(1.0)  # the work each message takes: what arrived meanwhile waits in the client's buffer

    ch.basic_consume(queue, slowly, auto_ack=True)
    print("ready", flush=True)
    ch.start_consuming()
elif mode == "healthy":
    ch.confirm_delivery()
    ch.basic_qos(prefetch_count=20)
    ch.basic_consume(queue, lambda c, m, p, b: c.basic_ack(m.delivery_tag))
    reply = ch.queue_declare("", exclusive=True, auto_delete=True).method.queue
    ch.basic_consume(reply, lambda c, m, p, b: c.basic_ack(m.delivery_tag))
    print("ready", flush=True)
    while True:
        ch.basic_publish("", queue, b"order", pika.BasicProperties(delivery_mode=2))
        conn.process_data_events(time_limit=0.5)
else:
    sys.exit(f"unknown mode {mode}")
