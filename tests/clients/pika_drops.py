"""pika clients whose messages or connections the broker drops, each run to its end (issue 55, K4):

    AMQP_URL=amqp://... python pika_drops.py dead-letter-cycle <prefix>
        Two queues dead-lettering into each other through two exchanges, <prefix>.work and <prefix>.retry (the
        retry queue with x-message-ttl); one persistent message, confirmed, that expires in the work queue (its own
        TTL), then in the retry queue, and is dropped when it is dead-lettered back into the work queue.
    AMQP_URL=amqp://... python pika_drops.py heartbeat-sleeper <connection name>
        A blocking connection with a 2 s heartbeat whose thread is busy elsewhere (a long task in a callback): it
        serves no heartbeat, and the broker closes it. Exits 0 once it has, 1 if it is still open.
"""

from __future__ import annotations

import os
import sys
import time

import pika

HEARTBEAT = 2  # seconds; the broker closes the connection after two missed


def connect(name: str, **settings) -> pika.BlockingConnection:
    params = pika.URLParameters(os.environ["AMQP_URL"])
    params.client_properties = {"connection_name": name}
    for key, value in settings.items():
        setattr(params, key, value)
    return pika.BlockingConnection(params)


def dead_letter_cycle(prefix: str) -> None:
    conn = connect(f"{prefix}-publisher")
    ch = conn.channel()
    for name in ("work", "retry"):
        ch.exchange_declare(f"{prefix}.{name}-x", "direct", durable=True)
    ch.queue_declare(f"{prefix}.work", durable=True, arguments={
        "x-dead-letter-exchange": f"{prefix}.retry-x", "x-dead-letter-routing-key": f"{prefix}.retry"})
    ch.queue_declare(f"{prefix}.retry", durable=True, arguments={
        "x-dead-letter-exchange": f"{prefix}.work-x", "x-dead-letter-routing-key": f"{prefix}.work",
        "x-message-ttl": 1000})
    ch.queue_bind(f"{prefix}.work", f"{prefix}.work-x", f"{prefix}.work")
    ch.queue_bind(f"{prefix}.retry", f"{prefix}.retry-x", f"{prefix}.retry")
    ch.confirm_delivery()  # basic_publish returns once the broker has confirmed the message
    ch.basic_publish(f"{prefix}.work-x", f"{prefix}.work", b"job",
                     pika.BasicProperties(delivery_mode=2, expiration="500"), mandatory=True)
    conn.close()


def heartbeat_sleeper(name: str) -> int:
    conn = connect(name, heartbeat=HEARTBEAT)
    conn.channel()
    time.sleep(4 * HEARTBEAT + 2)  # busy: nothing reads or writes the connection meanwhile
    try:
        conn.process_data_events(1)
        conn.process_data_events(1)
    except pika.exceptions.AMQPError:
        return 0  # closed by the broker, as expected
    print("the broker did not close the connection", file=sys.stderr)
    return 1


if __name__ == "__main__":
    mode, argument = sys.argv[1], sys.argv[2]
    if mode == "dead-letter-cycle":
        dead_letter_cycle(argument)
    elif mode == "heartbeat-sleeper":
        sys.exit(heartbeat_sleeper(argument))
    else:
        sys.exit(f"unknown mode {mode}")
