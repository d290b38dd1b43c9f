"""Record what a real node's log says where deliveries break, on each release of the matrix, in both of its
formats (plain and JSON), for the broker log parser's tests.

    python tests/data/record_broker_log.py      # tests/data/broker-log-<version>/{plain,json}.log

Each node runs with `consumer_timeout = 15000` and logs at info (the packages' default level), and meets:
a double ack, an ack on another channel, a redeclare with other arguments, a consume from a queue that does not
exist, a declare in the reserved amq. namespace, a consume from another connection's exclusive queue, a frame
the broker cannot parse, connections opened and closed (churn), a TCP connection dropped without a close, and
two consumers that stop acknowledging (a classic and a quorum queue) until the broker times them out or the
recording's wait ends.
"""

from __future__ import annotations

import json

import socket
import struct
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pika

from ackscope.workloads.private_broker import LocalBroker
from ackscope.workloads.rabbitmq_release import Release

TIMEOUT_MS = 15000
# 3.x checks the timeout about once a minute: the close comes up to a minute after the timeout.
TIMEOUT_WAIT = 100.0


def connect(broker: LocalBroker, name: str) -> pika.BlockingConnection:
    params = pika.URLParameters(broker.amqp_url())
    params.client_properties = {"connection_name": name}
    return pika.BlockingConnection(params)


def closed_by_broker(call) -> None:
    """Run `call`, which makes the broker close its channel (or connection); wait until it has."""
    try:
        call()
    except pika.exceptions.AMQPError:
        pass


def channel_errors(broker: LocalBroker) -> None:
    conn = connect(broker, "orders-worker")
    ch = conn.channel()
    ch.queue_declare("orders", durable=True)
    for _ in range(4):
        ch.basic_publish("", "orders", b"order", pika.BasicProperties(delivery_mode=2))

    # The double ack of the acknowledgements guide: pika raises nothing; the broker closes the channel.
    method, _, _ = ch.basic_get("orders")
    ch.basic_ack(method.delivery_tag)
    ch.basic_ack(method.delivery_tag)
    closed_by_broker(lambda: conn.process_data_events(1))
    # An ack on another channel than the delivery's.
    ch, other = conn.channel(), conn.channel()
    method, _, _ = ch.basic_get("orders")
    other.basic_ack(method.delivery_tag)
    closed_by_broker(lambda: conn.process_data_events(1))
    # A redeclare with other arguments.
    closed_by_broker(lambda: conn.channel().queue_declare("orders", durable=True, arguments={"x-max-length": 10}))
    # A consume from a queue that does not exist.
    closed_by_broker(lambda: conn.channel().basic_consume("no-such-queue", lambda *a: None))
    # A declare in the namespace the broker reserves.
    closed_by_broker(lambda: conn.channel().queue_declare("amq.orders"))
    # Another connection's exclusive queue.
    owner = connect(broker, "exclusive-owner")
    owner.channel().queue_declare("owned", exclusive=True)
    closed_by_broker(lambda: conn.channel().basic_consume("owned", lambda *a: None))
    owner.close()
    conn.close()


def frame_error(broker: LocalBroker) -> None:
    """A protocol header, then a frame whose end octet is wrong: the broker closes the connection."""
    with socket.create_connection(("127.0.0.1", broker.ports.amqp), timeout=10) as s:
        s.sendall(b"AMQP\x00\x00\x09\x01")
        s.recv(4096)  # connection.start
        s.sendall(struct.pack(">BHI", 1, 0, 4) + b"\x00\x0a\x00\x0b" + b"\x00")
        try:
            while s.recv(4096):
                pass
        except OSError:
            pass


def churn(broker: LocalBroker) -> None:
    """A client opening a connection per message, then one that drops its TCP connection without a close."""
    for i in range(5):
        conn = connect(broker, f"per-message-publisher-{i}")
        conn.channel().basic_publish("", "orders", b"order")
        conn.close()
    dropped = connect(broker, "dropped-client")
    dropped.channel()
    dropped._impl._transport._sock.shutdown(socket.SHUT_RDWR)  # a crash, as a killed client leaves it


def stalled_consumers(broker: LocalBroker, release: Release) -> None:
    """Two consumers that take 5 deliveries each and never settle them, until the broker ends them."""
    conn = connect(broker, "stalled-worker")
    ch = conn.channel()
    ch.queue_declare("stalled-classic", durable=True)
    ch.queue_declare("stalled-quorum", durable=True, arguments={"x-queue-type": "quorum"})
    for name in ("stalled-classic", "stalled-quorum"):
        for _ in range(10):
            ch.basic_publish("", name, b"job", pika.BasicProperties(delivery_mode=2))
    cancelled = []
    for name in ("stalled-classic", "stalled-quorum"):
        consumer = conn.channel()
        consumer.basic_qos(prefetch_count=5)
        consumer.add_on_cancel_callback(lambda frame, q=name: cancelled.append(q))
        consumer.basic_consume(name, lambda *a: None, consumer_tag=f"{name}-consumer")
    deadline = time.monotonic() + TIMEOUT_WAIT
    while time.monotonic() < deadline and conn.is_open:
        try:
            conn.process_data_events(1)
        except pika.exceptions.AMQPError:
            break
    print(f"{release.version}: cancelled by the broker: {cancelled or 'none'}; connection open: {conn.is_open}")
    if conn.is_open:
        conn.close()


def logged(prefix: str, release: Release, formatter: str, config: tuple[str, ...],
           workload: Callable[[LocalBroker], None], settle_s: float = 2.0) -> Path:
    """`workload` on a node of its own logging at info in `formatter` (plain or json), its log then written to
    tests/data/<prefix>-<version>/<formatter>.log; `settle_s`: the wait for the last lines to reach the file."""
    config += ("log.file.level = info",) + (("log.file.formatter = json",) if formatter == "json" else ())
    broker = LocalBroker(name=f"ackscope-{prefix}-{formatter}", release=release, config=config)
    broker.start()
    try:
        workload(broker)
        time.sleep(settle_s)
        version = broker.api("GET", "/overview").json()["rabbitmq_version"]
        out = Path(__file__).parent / f"{prefix}-{version}"
        out.mkdir(exist_ok=True)
        (out / f"{formatter}.log").write_text(broker.log_file.read_text())
        return out / f"{formatter}.log"
    finally:
        broker.stop()
        broker.remove()


def record(release: Release, formatter: str) -> Path:
    def workload(broker: LocalBroker) -> None:
        channel_errors(broker)
        frame_error(broker)
        churn(broker)
        stalled_consumers(broker, release)
    return logged("broker-log", release, formatter, (f"consumer_timeout = {TIMEOUT_MS}",), workload)


def in_parallel(recordings: list[Callable[[], Path]]) -> int:
    """Run each recording on a thread of its own (each its own node); print what each wrote; 1 if one failed."""
    done: list[str] = []
    threads = [threading.Thread(target=lambda r=r: done.append(str(r()))) for r in recordings]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print("\n".join(sorted(done)))
    return 0 if len(done) == len(threads) else 1


def matrix() -> list[Release]:
    """The releases of the suite's matrix: the machine's own and the Debian roots'."""
    return [Release.host(), Release.in_root("trixie"), Release.in_root("sid")]


def on_the_matrix(record: Callable[[Release], Path]) -> int:
    """`record` on every release of the matrix, side by side (see in_parallel)."""
    return in_parallel([lambda r=r: record(r) for r in matrix()])


def written(prefix: str, release: Release, document: object) -> Path:
    """`document` as tests/data/<prefix>-<version>.json (the version as RabbitMQ numbers it, not Debian)."""
    out = Path(__file__).parent / f"{prefix}-{release.version.split('-')[0]}.json"
    out.write_text(json.dumps(document, indent=1) + "\n")
    return out


def main() -> int:
    releases = matrix()
    return in_parallel([lambda r=r, f=f: record(r, f) for r in releases for f in ("plain", "json")])


if __name__ == "__main__":
    sys.exit(main())
