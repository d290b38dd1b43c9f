"""pika's BlockingChannel in confirm mode, as pika's documentation shows it: each basic_publish returns once the
broker confirms it. Persistent messages without pause, until killed; the connection is named pika-confirm-each.
Usage: AMQP_URL=amqp://... python pika_confirms.py <queue>"""

from __future__ import annotations

import os
import sys

import pika

queue = sys.argv[1]
params = pika.URLParameters(os.environ["AMQP_URL"])
params.client_properties = {"connection_name": "pika-confirm-each"}
conn = pika.BlockingConnection(params)
ch = conn.channel()
# Bounded: a publisher as fast as it can go fills no disk.
ch.queue_declare(queue, durable=True, arguments={"x-expires": 600_000, "x-max-length": 10_000})
ch.confirm_delivery()
print("ready", flush=True)
while True:
    ch.basic_publish("", queue, b"order", pika.BasicProperties(delivery_mode=2))
