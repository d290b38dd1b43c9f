"""An AMQP 1.0 client of RabbitMQ's own Python library (rabbitmq-amqp-python-client) or of Qpid Proton's
(python-qpid-proton), as an application would write it, against the broker of $AMQP_URL:

    amqp10_client.py rabbitmq|proton settling|holding|presettled-receiver|presettled-sender QUEUE
    amqp10_client.py rabbitmq releasing|rejecting QUEUE

The receivers take what QUEUE holds (filled first with 300 messages, or $FILL, published unsettled: each
outcome awaited), with a link credit of 10: `settling` accepts each message, `holding` never settles one,
`presettled-receiver` takes them pre-settled, `releasing` gives each back (outcome released), `rejecting` rejects each.
`presettled-sender` publishes 5 messages a second pre-settled (snd-settle-mode settled). Prints "ready" once
its links are attached, then runs until SIGTERM."""

from __future__ import annotations

import os
import signal
import sys
import uuid
from urllib.parse import unquote, urlsplit

FILL, CREDIT = int(os.environ.get("FILL", "300")), 10
url = urlsplit(os.environ["AMQP_URL"])
vhost = unquote(url.path[1:]) or "/"
library, mode, queue = sys.argv[1:4]
address = f"/queues/{queue}"
signal.signal(signal.SIGTERM, lambda *_: os._exit(0))


def ready() -> None:
    print("ready", flush=True)


def pause(blocking, seconds: float) -> None:
    """Let a blocking connection's event loop run for `seconds`: a pre-settled transfer is settled as it is queued,
    so nothing else makes the library write it to the socket."""
    try:
        blocking.wait(lambda: False, timeout=seconds)
    except Exception as e:
        if type(e).__name__ != "Timeout":
            raise


def rabbitmq() -> None:
    from rabbitmq_amqp_python_client import (
        AMQPMessagingHandler,
        ConsumerOptions,
        ConsumerSettleStrategy,
        Environment,
        Message,
        QuorumQueueSpecification,
    )
    from rabbitmq_amqp_python_client.options import SenderOption
    from rabbitmq_amqp_python_client.publisher import Publisher

    # The library takes the vhost from the URI's path.
    env = Environment(f"amqp://{url.username}:{url.password}@{url.hostname}:{url.port}/{vhost}")
    connection = env.connection()
    connection.dial()
    connection.management().declare_queue(QuorumQueueSpecification(name=queue))
    if mode == "presettled-sender":
        class PreSettled(Publisher):
            # The library's Publisher always awaits outcomes; its own SenderOption attaches a pre-settled sender.
            def _create_sender(self, addr):
                return self._conn.create_sender(addr, options=SenderOption(addr))
        sender = PreSettled(connection._conn, address)
        ready()
        while True:
            sender.publish(Message(body=b"reading"))
            pause(connection._conn, 0.2)
    publisher = connection.publisher(address)
    for i in range(FILL):
        publisher.publish(Message(body=f"job {i}".encode()))

    class Handler(AMQPMessagingHandler):
        def on_amqp_message(self, event):
            if mode == "settling":
                self.delivery_context.accept(event)
            elif mode == "releasing":  # every delivery back to the queue: a consumer failing every message
                self.delivery_context.requeue(event)
            elif mode == "rejecting":
                self.delivery_context.discard(event)

    options = (ConsumerOptions(settle_strategy=ConsumerSettleStrategy.PreSettled) if mode == "presettled-receiver"
               else None)
    consumer = connection.consumer(address, message_handler=Handler(), credit=CREDIT, consumer_options=options)
    ready()
    consumer.run()


def proton() -> None:
    from proton import Message
    from proton.reactor import AtMostOnce, Container
    from proton.utils import BlockingConnection

    # RabbitMQ takes the vhost from the open frame's hostname, "vhost:NAME".
    connection = BlockingConnection(f"amqp://{url.hostname}:{url.port}", user=url.username, password=url.password,
                                    virtual_host=f"vhost:{vhost}", allowed_mechs="PLAIN",
                                    container=Container(container_id=f"proton-{mode}-{uuid.uuid4().hex[:6]}"))
    if mode == "presettled-sender":
        sender = connection.create_sender(address, options=AtMostOnce())
        ready()
        while True:
            sender.send(Message(body="reading"))
            pause(connection, 0.2)
    sender = connection.create_sender(address)
    for i in range(FILL):
        sender.send(Message(body=f"job {i}"))  # blocks until the outcome is known
    receiver = connection.create_receiver(address, credit=CREDIT,
                                          options=AtMostOnce() if mode == "presettled-receiver" else None)
    ready()
    while True:
        try:
            receiver.receive(timeout=1.0)
        except Exception as e:  # proton's Timeout: nothing waiting
            if type(e).__name__ != "Timeout":
                raise
            continue
        if mode == "settling":
            receiver.accept()


{"rabbitmq": rabbitmq, "proton": proton}[library]()
