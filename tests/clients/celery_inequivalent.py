"""A Celery producer (kombu, py-amqp) whose queue someone else declared with other arguments: its task_queues
declares `queue` plain, as Celery's documentation shows it, while the queue exists with x-max-priority and
x-message-ttl. kombu declares the queue before each send, the broker refuses the declare (406 PRECONDITION_FAILED,
inequivalent arg) and closes the channel: every send fails, and the task is never queued.
Usage: AMQP_URL=amqp://... python celery_inequivalent.py <queue> <sends> <seconds between sends>
Prints "ready" once connected, then one line per send ("sent" or the error's class), and exits."""

from __future__ import annotations

import os
import sys
import time

from celery import Celery
from kombu import Queue

queue, sends, pause = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
app = Celery("ackscope_inequivalent", broker=os.environ["AMQP_URL"])
app.conf.broker_connection_retry_on_startup = True
app.conf.broker_transport_options = {"client_properties": {"connection_name": "celery-inequivalent-producer"}}
app.conf.task_queues = (Queue(queue),)
app.conf.task_default_queue = queue

with app.connection_for_write() as conn:
    conn.ensure_connection(max_retries=3)
    print("ready", flush=True)
    for _ in range(sends):
        try:
            app.send_task("ackscope.fine", connection=conn)
            print("sent", flush=True)
        except Exception as e:  # the broker's refusal: the producer goes on, as a web app's next request would
            print(type(e).__name__, flush=True)
        time.sleep(pause)
