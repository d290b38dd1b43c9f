"""pika publishing without confirms through the default exchange until killed, as a web app's request handler
or an RPC server does; the connection is named pika-<mode>.
Usage: AMQP_URL=amqp://... python pika_publishers.py <mode> <queue>
    plain     a persistent message a second into <queue> (durable; declared with no arguments, as Celery
              declares its own)
    replies   two replies a second into a queue of its own, exclusive and server-named (<queue> is ignored)"""

from __future__ import annotations

import os
import sys

import pika

mode, queue = sys.argv[1], sys.argv[2]
params = pika.URLParameters(os.environ["AMQP_URL"])
params.client_properties = {"connection_name": f"pika-{mode}"}
conn = pika.BlockingConnection(params)
ch = conn.channel()
if mode == "replies":
    queue = ch.queue_declare("", exclusive=True).method.queue
else:
    ch.queue_declare(queue, durable=True)
print("ready", flush=True)
while True:
    ch.basic_publish("", queue, b"result", pika.BasicProperties(delivery_mode=2 if mode == "plain" else 1))
    conn.sleep(0.5 if mode == "replies" else 1.0)
