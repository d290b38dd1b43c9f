"""Record what a real node's log says when an AMQP 1.0 receiver holds its deliveries past a quorum queue's consumer
timeout, on each 4.x release of the matrix (3.10's AMQP 1.0 is a plugin of another design), in both log formats.

    python tests/data/record_broker_log_amqp10.py    # tests/data/broker-log-amqp10-<version>/{plain,json}.log

Each node runs with `consumer_timeout = 10000`. A Qpid Proton receiver (tests/clients/amqp10_client.py, holding:
it never settles) takes the 20 messages of quorum queue `jobs` with a credit of 10, and is left for 40 s.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pika
from record_broker_log import in_parallel, logged

from ackscope.workloads.private_broker import LocalBroker
from ackscope.workloads.rabbitmq_release import Release

TIMEOUT_MS = 10000
HELD_FOR = 40.0
CLIENT = Path(__file__).parent.parent / "clients" / "amqp10_client.py"


def held_past_the_timeout(broker: LocalBroker) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(broker.amqp_url()))
    conn.channel().queue_declare("jobs", durable=True, arguments={"x-queue-type": "quorum"})
    conn.close()
    receiver = subprocess.Popen([sys.executable, str(CLIENT), "proton", "holding", "jobs"],
                                env=dict(os.environ, AMQP_URL=broker.amqp_url(), FILL="20"),
                                stdout=subprocess.PIPE, text=True)
    assert receiver.stdout.readline().strip() == "ready"
    time.sleep(HELD_FOR)  # a recording: the timeout and what the broker logs of it, whatever it is
    receiver.terminate()
    receiver.wait(10)


def record(release: Release, formatter: str) -> Path:
    return logged("broker-log-amqp10", release, formatter, (f"consumer_timeout = {TIMEOUT_MS}",),
                  held_past_the_timeout)


def main() -> int:
    releases = [Release.in_root("trixie"), Release.in_root("sid")]
    return in_parallel([lambda r=r, f=f: record(r, f) for r in releases for f in ("plain", "json")])


if __name__ == "__main__":
    sys.exit(main())
