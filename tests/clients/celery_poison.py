"""A supervisor (as systemd's Restart=always, RestartSec=1.5) of a Celery worker (celery_app.py, CELERY_MODE=poison,
the solo pool) that a poison task kills each time it is delivered: the field case of issue 55's K5. Restarts the
worker whenever it exits, until killed (SIGTERM ends the worker with it).
Usage: AMQP_URL=amqp://... python celery_poison.py
Prints "ready" once it started the first worker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

worker: subprocess.Popen | None = None


def stop(*_):
    if worker is not None and worker.poll() is None:
        worker.kill()
    sys.exit(0)


signal.signal(signal.SIGTERM, stop)
first = True
while True:
    worker = subprocess.Popen([sys.executable, "-m", "celery", "-A", "celery_app", "worker", "--pool=solo",
                               "--loglevel=ERROR"], env={**os.environ, "CELERY_MODE": "poison"})
    if first:
        print("ready", flush=True)
        first = False
    worker.wait()
    time.sleep(1.5)
