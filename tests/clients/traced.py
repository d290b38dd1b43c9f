"""Applications traced as OpenTelemetry's documentation sets them up: the instrumentation of their client library,
the SDK's batch span processor and its OTLP/HTTP exporter, sending to OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (ackscope's
/v1/traces). Each prints its own record of every message, one JSON line each, on its own clock, for the test to
hold ackscope's figures to.

    python traced.py pika-publish QUEUE COUNT          publish COUNT messages to QUEUE (default exchange), exit
    python traced.py pika-consume QUEUE SLEEP [MODE]    consume with a callback sleeping SLEEP s per message;
                                                        MODE ack (prefetch 1), auto-ack (no prefetch limit), or
                                                        requeue (the first delivery of each message nacked back)
    python traced.py aio-pika-publish QUEUE COUNT      the same with aio-pika
    python traced.py aio-pika-consume QUEUE SLEEP [MODE]  MODE ack (prefetch 1) or auto-ack (no prefetch limit)

OTEL_SERVICE_NAME names the service. A consumer prints "ready" once it consumes.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor


def tracing() -> TracerProvider:
    provider = TracerProvider(resource=Resource.create())  # service.name from OTEL_SERVICE_NAME
    # Half a second between batches (the SDK's default is 5 s): the test waits on figures, not on the batching.
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(), schedule_delay_millis=500))
    trace.set_tracer_provider(provider)
    return provider


def say(**record) -> None:
    print(json.dumps(record), flush=True)


def pika_publish(queue: str, count: int) -> None:
    import pika
    from opentelemetry.instrumentation.pika import PikaInstrumentor

    PikaInstrumentor().instrument()
    connection = pika.BlockingConnection(pika.URLParameters(os.environ["AMQP_URL"]))
    channel = connection.channel()
    channel.confirm_delivery()
    for n in range(count):
        say(published=n, at=time.time())
        channel.basic_publish("", queue, f"message {n}".encode(), pika.BasicProperties(delivery_mode=2))
    connection.close()


def pika_consume(queue: str, sleep: float, mode: str) -> None:
    import pika
    from opentelemetry.instrumentation.pika import PikaInstrumentor

    PikaInstrumentor().instrument()
    connection = pika.BlockingConnection(pika.URLParameters(os.environ["AMQP_URL"]))
    channel = connection.channel()
    if mode != "auto-ack":
        channel.basic_qos(prefetch_count=1)
    seen: set[bytes] = set()

    def on_message(ch, method, properties, body):
        say(received=body.decode(), at=time.time(), redelivered=method.redelivered)
        time.sleep(sleep)
        if mode == "requeue" and body not in seen:
            seen.add(body)
            ch.basic_nack(method.delivery_tag, requeue=True)
        elif mode != "auto-ack":
            ch.basic_ack(method.delivery_tag)
        say(processed=body.decode(), at=time.time())

    channel.basic_consume(queue, on_message, auto_ack=mode == "auto-ack")
    print("ready", flush=True)
    channel.start_consuming()


async def aio_pika_publish(queue: str, count: int) -> None:
    import aio_pika
    from opentelemetry.instrumentation.aio_pika import AioPikaInstrumentor

    AioPikaInstrumentor().instrument()
    connection = await aio_pika.connect_robust(os.environ["AMQP_URL"])
    async with connection:
        channel = await connection.channel()
        for n in range(count):
            say(published=n, at=time.time())
            await channel.default_exchange.publish(aio_pika.Message(f"message {n}".encode(), delivery_mode=2), queue)


async def aio_pika_consume(queue: str, sleep: float, mode: str) -> None:
    import aio_pika
    from opentelemetry.instrumentation.aio_pika import AioPikaInstrumentor

    AioPikaInstrumentor().instrument()
    connection = await aio_pika.connect_robust(os.environ["AMQP_URL"])
    channel = await connection.channel()
    if mode != "auto-ack":
        await channel.set_qos(prefetch_count=1)
    q = await channel.get_queue(queue)
    one_at_a_time = asyncio.Lock()  # aio-pika runs callbacks side by side; this application takes one at a time

    seen: set[bytes] = set()

    async def on_message(message):
        async with one_at_a_time:
            say(received=message.body.decode(), at=time.time(), redelivered=message.redelivered)
            await asyncio.sleep(sleep)
            if mode == "requeue" and message.body not in seen:
                seen.add(message.body)
                await message.nack(requeue=True)
            elif mode != "auto-ack":
                await message.ack()

    await q.consume(on_message, no_ack=mode == "auto-ack")
    print("ready", flush=True)
    await asyncio.Future()


def main() -> None:
    provider = tracing()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # stopped by the test: the last batch still goes out
    command, args = sys.argv[1], sys.argv[2:]
    try:
        if command == "pika-publish":
            pika_publish(args[0], int(args[1]))
        elif command == "pika-consume":
            pika_consume(args[0], float(args[1]), args[2] if len(args) > 2 else "ack")
        elif command == "aio-pika-publish":
            asyncio.run(aio_pika_publish(args[0], int(args[1])))
        elif command == "aio-pika-consume":
            asyncio.run(aio_pika_consume(args[0], float(args[1]), args[2] if len(args) > 2 else "ack"))
        else:
            raise SystemExit(f"unknown command {command!r}")
    finally:
        provider.shutdown()  # the last batch goes out before the process ends


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        pass
