"""kombu (Celery's messaging library, on py-amqp) consuming with no_ack=True, as Celery's own event and result
consumers do, taking a second over each message until killed: what the broker sent waits in the client, counted as
done. Usage: AMQP_URL=amqp://... python kombu_auto_ack.py <queue> (the queue exists: declared by the test).
Prints "ready" once consuming."""

from __future__ import annotations

import os
import sys
import time

from kombu import Connection, Consumer, Queue

with Connection(os.environ["AMQP_URL"]) as conn:
    def slowly(body, message):
        time.sleep(1.0)  # the work each message takes: what arrived meanwhile waits in the client

    with Consumer(conn, [Queue(sys.argv[1], no_declare=True)], callbacks=[slowly], no_ack=True):
        print("ready", flush=True)
        while True:
            conn.drain_events()
