"""A Celery application traced as opentelemetry-instrumentation-celery's documentation sets it up, sending its spans
through the SDK's OTLP/HTTP exporter to OTEL_EXPORTER_OTLP_TRACES_ENDPOINT; its broker URL from AMQP_URL.

    AMQP_URL=... celery -A traced_celery worker --pool=solo     the worker (its tasks' run/{task} spans)
    AMQP_URL=... python traced_celery.py COUNT                   send COUNT tasks (apply_async/{task} spans), exit

The solo pool forks no worker process, so the instrumentation is set up here, at import, rather than at
worker_process_init as the documentation does for the prefork pool.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import time

from celery import Celery
from opentelemetry.instrumentation.celery import CeleryInstrumentor
from traced import tracing

provider = tracing()
atexit.register(provider.shutdown)
CeleryInstrumentor().instrument()

app = Celery("ackscope_traced", broker=os.environ["AMQP_URL"])
app.conf.broker_connection_retry_on_startup = True
app.conf.worker_redirect_stdouts = False  # the task's own records on standard output, for the test


@app.task(name="ackscope.charge")
def charge(n: int) -> None:
    print(json.dumps({"ran": n, "at": time.time()}), flush=True)


if __name__ == "__main__":
    for n in range(int(sys.argv[1])):
        print(json.dumps({"sent": n, "at": time.time()}), flush=True)
        charge.delay(n)
