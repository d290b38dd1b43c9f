"""Record the warnings and errors a real node logs about its clients that ackscope must read (issue 55, K4), on each
release of the matrix, in both of its formats (plain and JSON), for the broker log parser's tests.

    python tests/data/record_broker_log_drops.py     # tests/data/broker-log-drops-<version>/{plain,json}.log

Each node logs at info (the packages' default level) and meets:
- a dead-letter cycle: two queues dead-lettering into each other through two exchanges, the retry queue with
  x-message-ttl; a confirmed message expires in the work queue, expires again in the retry queue, and is dropped
  when it comes back (no reason 'rejected' on its way);
- a pika client that stops serving its heartbeats (a blocking connection busy elsewhere): closed for missed
  heartbeats;
- a Celery producer whose every send fails with 406 PRECONDITION_FAILED (its queue declared elsewhere with
  x-max-priority and x-message-ttl), 5 times;
- connection exceptions: a TCP connection that never completes its handshake (handshake_timeout), a wrong
  password, a vhost that does not exist, a second channel.open on an open channel;
- a quorum queue dead-lettering at-least-once into an exchange that does not exist, a transient non-exclusive queue
  and a global prefetch (deprecated in 4.x), and a memory alarm set and cleared.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pika
from record_broker_log import in_parallel, logged

from ackscope.workloads.private_broker import LocalBroker
from ackscope.workloads.rabbitmq_release import Release

CLIENTS = Path(__file__).resolve().parent.parent / "clients"
HANDSHAKE_TIMEOUT_MS = 2000
MATRIX = {"3.10": None, "4.0": "trixie", "newest": "sid"}  # tests/helpers.py's


def client(broker: LocalBroker, *argv: str) -> None:
    """One of tests/clients' programs, run to its end (the broker suite's own clients: one implementation)."""
    subprocess.run([sys.executable, *argv], cwd=CLIENTS, env={**os.environ, "AMQP_URL": broker.amqp_url()},
                   check=True, timeout=120)


def dead_letter_cycle(broker: LocalBroker) -> None:
    client(broker, "pika_drops.py", "dead-letter-cycle", "cycle")


def missed_heartbeats(broker: LocalBroker) -> None:
    client(broker, "pika_drops.py", "heartbeat-sleeper", "heartbeat-sleeper")


def celery_inequivalent(broker: LocalBroker) -> None:
    broker.api("PUT", "/queues/%2F/celery.priority", json={"durable": True, "arguments": {
        "x-max-priority": 10, "x-message-ttl": 60000}})
    client(broker, "celery_inequivalent.py", "celery.priority", "5", "0.5")


def connection_exceptions(broker: LocalBroker) -> None:
    # A TCP connection that sends nothing: closed at the handshake timeout.
    with socket.create_connection(("127.0.0.1", broker.ports.amqp), timeout=30) as s:
        try:
            while s.recv(4096):
                pass
        except OSError:
            pass
    for url in (broker.amqp_url(password="wrong"), broker.amqp_url(vhost="no-such-vhost")):
        try:
            pika.BlockingConnection(pika.URLParameters(url)).close()
        except pika.exceptions.AMQPError:
            pass
    # A second channel.open on a channel already open: a connection exception (command_invalid or channel_error).
    params = pika.URLParameters(broker.amqp_url())
    params.client_properties = {"connection_name": "reopening-client"}
    conn = pika.BlockingConnection(params)
    ch = conn.channel()
    ch._impl._send_method(pika.spec.Channel.Open())
    try:
        conn.process_data_events(2)
        conn.process_data_events(2)
    except pika.exceptions.AMQPError:
        pass


def queues_and_node(broker: LocalBroker) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(broker.amqp_url()))
    ch = conn.channel()
    ch.queue_declare("stuck", durable=True, arguments={
        "x-queue-type": "quorum", "x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish",
        "x-dead-letter-exchange": "no-such-exchange", "x-message-ttl": 200})
    ch.confirm_delivery()
    ch.basic_publish("", "stuck", b"job", pika.BasicProperties(delivery_mode=2))
    ch.queue_declare("transient", durable=False)
    ch.basic_qos(prefetch_count=5, global_qos=True)
    conn.close()
    broker.ctl("set_vm_memory_high_watermark", "0.0000001")
    time.sleep(3)  # the alarm is raised at the node's next memory check
    broker.ctl("set_vm_memory_high_watermark", "0.4")


def record(release: Release, formatter: str) -> Path:
    def workload(broker: LocalBroker) -> None:
        dead_letter_cycle(broker)
        missed_heartbeats(broker)
        celery_inequivalent(broker)
        connection_exceptions(broker)
        queues_and_node(broker)
    # 4 s: the cycle's drop (two TTLs) and the last lines reach the file.
    return logged("broker-log-drops", release, formatter, (f"handshake_timeout = {HANDSHAKE_TIMEOUT_MS}",),
                  workload, settle_s=4.0)


def main() -> int:
    """With slots named ("3.10", "4.0", "newest"), only those."""
    slots = sys.argv[1:] or list(MATRIX)
    releases = [Release.host() if MATRIX[s] is None else Release.in_root(MATRIX[s]) for s in slots]
    return in_parallel([lambda r=r, f=f: record(r, f) for r in releases for f in ("plain", "json")])


if __name__ == "__main__":
    sys.exit(main())
