"""pika acknowledging wrongly, the mistakes of the acknowledgements guide, once every 2 s until killed; its
connection is named pika-<mode>. Usage: AMQP_URL=amqp://... python pika_acks.py <mode> <queue>
    double-ack         basic_get, then basic_ack of the same delivery tag twice
    ack-other-channel  basic_get on one channel, basic_ack of its delivery tag on another
Each closes the channel the wrong ack went to (PRECONDITION_FAILED - unknown delivery tag); pika raises
nothing at the ack: the close comes after, and a new channel is opened for the next round."""

from __future__ import annotations

import os
import sys

import pika

mode, queue = sys.argv[1], sys.argv[2]
params = pika.URLParameters(os.environ["AMQP_URL"])
params.client_properties = {"connection_name": f"pika-{mode}"}
conn = pika.BlockingConnection(params)
conn.channel().queue_declare(queue, durable=True, arguments={"x-expires": 600_000})
print("ready", flush=True)
while True:
    got_on, ack_on = conn.channel(), conn.channel()
    got_on.basic_publish("", queue, b"job")
    method, _, _ = got_on.basic_get(queue)
    if method is not None:
        if mode == "double-ack":
            got_on.basic_ack(method.delivery_tag)
            got_on.basic_ack(method.delivery_tag)
        else:
            ack_on.basic_ack(method.delivery_tag)
    conn.sleep(2.0)  # serves the connection: the broker's channel.close arrives and is answered meanwhile
    for ch in (got_on, ack_on):
        if ch.is_open:
            ch.close()
