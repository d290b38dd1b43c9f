"""A Celery application as Celery's documentation sets one up, for the real-client tests; its broker URL
comes from AMQP_URL. CELERY_MODE=acks-late takes the docs' advice for long tasks (task_acks_late=True,
worker_prefetch_multiplier=1); CELERY_MODE=consumer-timeout adds a queue `reports` declared with
x-consumer-timeout, as the docs' task_queues declares one (both consumed on one channel); CELERY_MODE=poison is
acks-late on a queue of its own, celery.poison, where the task `dies` kills the worker (celery_poison.py restarts it).

    AMQP_URL=amqp://... celery -A celery_app worker --pool=solo     the worker
    AMQP_URL=amqp://... python celery_app.py <task> <count>          send <count> tasks and exit
    AMQP_URL=amqp://... python celery_app.py <task> 0                a web app's producer: one task every
                                                                     3.3 s (0.3 a second) until killed
"""

from __future__ import annotations

import os
import sys
import time

from celery import Celery
from celery.exceptions import Reject

app = Celery("ackscope_clients", broker=os.environ["AMQP_URL"])
app.conf.broker_connection_retry_on_startup = True
if os.environ.get("CELERY_MODE") == "acks-late":
    app.conf.task_acks_late = True
    app.conf.worker_prefetch_multiplier = 1
elif os.environ.get("CELERY_MODE") == "poison":  # acks_late on a queue of its own, where a task kills the worker
    app.conf.task_acks_late = True
    app.conf.worker_prefetch_multiplier = 1
    app.conf.task_default_queue = "celery.poison"
elif os.environ.get("CELERY_MODE") == "consumer-timeout":  # a queue of its own that sets its consumer timeout
    from kombu import Queue
    app.conf.task_queues = (Queue("celery"), Queue("reports", queue_arguments={"x-consumer-timeout": 3_600_000}))


@app.task(name="ackscope.fine")
def fine() -> None:
    pass


@app.task(name="ackscope.slow")
def slow() -> None:
    time.sleep(1.0)


@app.task(name="ackscope.hangs")
def hangs() -> None:
    """A task that never ends (a call that hangs): with acks_late its message stays unacked."""
    time.sleep(24 * 3600)


@app.task(name="ackscope.dies")
def dies() -> None:
    """A poison message: the worker handling it exits at once (a native crash, an out-of-memory kill), acking
    nothing; its supervisor starts it again and the broker delivers the message again."""
    os._exit(1)


@app.task(name="ackscope.rejects", acks_late=True)
def rejects() -> None:
    raise Reject("cannot handle it now", requeue=True)


if __name__ == "__main__":
    task, count = sys.argv[1], int(sys.argv[2])
    for _ in range(count):
        app.send_task(f"ackscope.{task}")
    if count == 0:
        app.send_task(f"ackscope.{task}")
        print("ready", flush=True)
        while True:
            time.sleep(3.3)
            app.send_task(f"ackscope.{task}")
