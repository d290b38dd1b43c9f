"""aio-pika as its documentation shows it, with no connection name: one behaviour per run, until killed.
With CONNECTION_NAME set, the connection is named as aio-pika's documentation names one: the URL's `name`.

    AMQP_URL=amqp://... python aio_pika_client.py <mode> <queue>
      process-requeue      a prefetch-10 consumer whose handler fails inside message.process(requeue=True)
      confirming-publisher 5 a second through the default (confirming) channel, and a prefetch-50
                           consumer that processes them
      process-reject       5 a second through the default channel into <queue>, declared by the caller (of any
                           type), and a prefetch-10 consumer whose handler fails inside message.process()
                           (rejected without requeue: dead-lettered)
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys

import aio_pika
import yarl


async def main(mode: str, queue_name: str) -> None:
    url = yarl.URL(os.environ["AMQP_URL"])
    if "CONNECTION_NAME" in os.environ:
        url = url.update_query(name=os.environ["CONNECTION_NAME"])
    connection = await aio_pika.connect_robust(url)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with connection:
        channel = await connection.channel()
        await channel.set_qos(prefetch_count=10 if mode == "process-requeue" else 50)
        if mode == "process-reject":
            queue = await channel.get_queue(queue_name)  # passive: the caller declared it

            async def rejects(message: aio_pika.abc.AbstractIncomingMessage) -> None:
                async with message.process():
                    raise ValueError("the handler fails on every message")
            await queue.consume(rejects)

            async def publish_jobs() -> None:
                while True:
                    await channel.default_exchange.publish(aio_pika.Message(b"job"), routing_key=queue_name)
                    await asyncio.sleep(0.2)
            asyncio.get_running_loop().create_task(publish_jobs())
            print("ready", flush=True)
            await stop.wait()
            return
        # Shared with other clients, which declare it as a plain classic queue.
        queue = await channel.declare_queue(queue_name, durable=True, arguments={"x-expires": 600_000})
        if mode == "process-requeue":
            async def fails(message: aio_pika.abc.AbstractIncomingMessage) -> None:
                async with message.process(requeue=True):
                    raise ValueError("the handler fails on every message")
            for i in range(5):
                await channel.default_exchange.publish(aio_pika.Message(f"job {i}".encode()), routing_key=queue_name)
            await queue.consume(fails)
        elif mode == "confirming-publisher":
            async def handles(message: aio_pika.abc.AbstractIncomingMessage) -> None:
                async with message.process():
                    pass
            await queue.consume(handles)

            async def publish() -> None:
                while True:
                    await channel.default_exchange.publish(
                        aio_pika.Message(b"order", delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                        routing_key=queue_name)
                    await asyncio.sleep(0.2)
            asyncio.get_running_loop().create_task(publish())
        else:
            raise SystemExit(f"unknown mode {mode}")
        print("ready", flush=True)
        await stop.wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
