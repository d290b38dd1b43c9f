"""A client of the stream protocol (rstream), as an application would write it, against the broker of $AMQP_URL
(its stream port in $STREAM_PORT):

    stream_client.py producer STREAM RATE       publishes RATE messages a second, each confirmed, forever
    stream_client.py slow|keeping-up STREAM     consumes from the stream's first offset: `slow` handles 10
                                                messages a second, `keeping-up` all it is sent; both store their
                                                offset every 50 messages under the reference "<mode>-reader"
    stream_client.py amqp091 STREAM             consumes it over AMQP 0-9-1 (pika) as a stream must be: manual
                                                acks, a prefetch of 100, from its first offset

Prints "ready" once it has declared the stream or subscribed, then runs until SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from urllib.parse import unquote, urlsplit

from rstream import AMQPMessage, Consumer, ConsumerOffsetSpecification, OffsetType, Producer

url = urlsplit(os.environ["AMQP_URL"])
options = dict(host=url.hostname, port=int(os.environ["STREAM_PORT"]), vhost=unquote(url.path[1:]) or "/",
               username=url.username, password=url.password)
mode, stream = sys.argv[1:3]
signal.signal(signal.SIGTERM, lambda *_: os._exit(0))


async def produce(rate: float) -> None:
    async with Producer(**options, connection_name="stream-producer") as producer:
        await producer.create_stream(stream, exists_ok=True)
        print("ready", flush=True)
        n = 0
        while True:
            await producer.send_wait(stream, AMQPMessage(body=f"event {n}".encode()))
            n += 1
            await asyncio.sleep(1 / rate)


async def consume() -> None:
    reference = f"{mode}-reader"
    handled = 0

    async def on_message(message, context) -> None:
        nonlocal handled
        handled += 1
        if mode == "slow":
            await asyncio.sleep(0.1)
        if handled % 50 == 0:
            await consumer.store_offset(stream, reference, context.offset)

    consumer = Consumer(**options, connection_name=f"stream-{mode}")
    await consumer.start()
    await consumer.subscribe(stream, on_message, subscriber_name=reference,
                             offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST, None))
    print("ready", flush=True)
    await consumer.run()


def consume_amqp091() -> None:
    import pika

    connection = pika.BlockingConnection(pika.URLParameters(os.environ["AMQP_URL"]))
    channel = connection.channel()
    channel.basic_qos(prefetch_count=100)  # a stream refuses a consumer without one
    channel.basic_consume(stream, lambda ch, method, properties, body: ch.basic_ack(method.delivery_tag),
                          arguments={"x-stream-offset": "first"})
    print("ready", flush=True)
    channel.start_consuming()


if mode == "amqp091":
    consume_amqp091()
else:
    asyncio.run(produce(float(sys.argv[3])) if mode == "producer" else consume())
