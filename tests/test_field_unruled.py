"""Failures from the field that no rule named (issue 55, K7), on real clients side by side on one node per release,
read by an exporter that follows the node's log: a basic.get storm on an empty queue (pika); a consumer that gives its
message back and cancels on a durable auto-delete queue, which the broker deletes with the message, and declares it
again (pika); auto-ack consumers (pika, kombu) killed while messages wait in them; a deprecated feature used today
(4.3 lists it; 3.10 keeps no such list). Beside them a healthy client (confirms, prefetch, manual acks) with its empty
reply queue, and a queue deleted once drained: named by nothing at warning or above."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import pika
import pytest
import requests
from client_processes import Clients
from conftest import exporter_config
from helpers import connect, matrix_release, polls_seen, private_broker, wait_for

from ackscope.apps.exporter import Exporter
from ackscope.core.secret import Secret
from ackscope.diagnosis.rules import Context, evaluate
from ackscope.diagnosis.thresholds import Thresholds
from ackscope.sources import Selection
from ackscope.sources.choice import make_source
from ackscope.workloads.private_broker import ADMIN_PASSWORD, ADMIN_USER, LocalBroker
from ackscope.workloads.rabbitmq_release import Release

WINDOW = 30.0  # the rules' window: short, so that a test sees a rate over it


class Seen:
    """Every finding the exporter showed since the clients started, each version of it: a loss read from two polls
    is shown at one poll (or for the window), and a test that looks later must still find it."""

    def __init__(self, url: str):
        self.url = url
        self.findings: list[dict] = []
        self.not_evaluated: list[dict] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        taken = None
        while not self._stop.wait(0.2):  # the exporter polls each second: no poll's findings go unseen
            try:
                doc = requests.get(self.url + "/api/findings", timeout=5).json()
            except requests.RequestException:
                continue  # the exporter is stopping: what was seen stays
            if doc["taken_at"] is None or doc["taken_at"] == taken:
                continue
            taken = doc["taken_at"]
            with self._lock:
                self.findings.extend(doc["findings"])
                self.not_evaluated = doc["not_evaluated"]

    def of(self, rule: str, obj: str) -> list[dict]:
        with self._lock:
            return [f for f in self.findings if f["rule"] == rule and f["object"] == obj]

    def all(self) -> list[dict]:
        with self._lock:
            return list(self.findings)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


@dataclass(frozen=True)
class Field:
    release: Release
    node: LocalBroker
    exporter: Exporter
    clients: Clients
    seen: Seen


@pytest.fixture(scope="module", params=["3.10", "newest"])
def release(request) -> Release:
    return matrix_release(request.param)


@pytest.fixture(scope="module")
def field(release, tmp_path_factory) -> Iterator[Field]:
    """One node of the release logging at info, an exporter following its log each second, a healthy client and a
    basic.get storm started together; on a release that lists deprecated features, a transient non-exclusive queue."""
    with private_broker(f"ackscope-k7{release.name.replace('.', '')}", release=release,
                        config=("log.file.level = info",)) as node:
        if release.at_least(3, 13):  # deprecated from 4.0 (transient_nonexcl_queues), permitted by default
            node.api("PUT", "/queues/%2F/k7.transient", json={"durable": False, "auto_delete": False})
        exporter = Exporter(exporter_config(node.management_url, interval=1.0, broker_log=str(node.log_file),
                                            prometheus_url=node.prometheus_url,
                                            thresholds=Thresholds(window_seconds=WINDOW)))
        exporter.start()
        seen = Seen(exporter.url)
        try:
            with Clients(node.amqp_url(), tmp_path_factory.mktemp("clients")) as clients:
                clients.start(sys.executable, "pika_unruled.py", "healthy", "k7.orders")
                clients.start(sys.executable, "pika_unruled.py", "get-storm", "k7.polled")
                yield Field(release, node, exporter, clients, seen)
        finally:
            seen.stop()
            exporter.stop()


def _snapshot_queue(f: Field, name: str) -> dict | None:
    doc = requests.get(f.exporter.url + "/api/snapshot", timeout=15).json()["snapshot"]
    return next((q for q in doc["queues"] if q["name"] == name), None) if doc else None


def _found(f: Field, rule: str, obj: str, match=lambda g: True, timeout: float = 60.0) -> dict:
    def found():
        f.clients.check()
        return next((g for g in reversed(f.seen.of(rule, obj)) if match(g)), None)
    return wait_for(found, timeout, lambda: f"{rule} on {obj} (RabbitMQ {f.release.version}); seen: "
                    f"{sorted({(g['rule'], g['object'], g['severity']) for g in f.seen.all()})}")


def test_a_get_storm_on_an_empty_queue_is_named_with_its_poller_and_rate(field):
    f = _found(field, "get-empty-storm", "queue k7.polled", lambda g: g["severity"] == "warning")
    assert f["connection_name"] == "pika-get-storm" and f["client"].startswith("Pika")
    assert f["evidence"]["get_empty_rate"] >= Thresholds().get_empty_rate and f["evidence"]["gets_with_a_message"] == 0
    assert "only queue polled empty" in f["evidence"]["pollers_from"] and "basic.consume" in f["remedy"]
    # No other queue is blamed for the storm.
    assert {g["object"] for g in field.seen.all() if g["rule"] == "get-empty-storm"} == {"queue k7.polled"}


@pytest.mark.parametrize("kind", ["management", "prometheus"])
def test_the_nodes_get_empty_counter_is_read_and_alone_names_no_queue(field, kind):
    """Each source reads the node's own get-empty counter; the Prometheus plugin's source, whose queues count none
    (as with statistics off), says the storm unattributed, on the node."""
    source = make_source(kind, field.node.management_url, (field.node.prometheus_url,), ADMIN_USER,
                         Secret(ADMIN_PASSWORD), timeout=5.0, deadline=10.0, verify=True, selection=Selection(),
                         announce=False)
    def counted(s) -> int:
        """What the source counts of the storm: the queue's own count, or the node's."""
        if kind == "management":
            return next((q.message_stats.get_empty or 0 for q in s.queues if q.name == "k7.polled"), 0)
        return sum(c.get_empty or 0 for c in s.protocol_counts)

    def read_past(than: int):
        # RabbitMQ 4 refreshes a queue's statistics every 5 s or so: read until the count moved.
        s = source.read()
        return s if counted(s) > than else None

    try:
        first = wait_for(lambda: read_past(0), 30, "a read counting get-empty")
        second = wait_for(lambda: read_past(counted(first)), 30, "a read counting more")
    finally:
        source.close()
    assert sum(c.get_empty or 0 for c in second.protocol_counts) > sum(c.get_empty or 0 for c in first.protocol_counts)
    found = [g for g in evaluate(Context(second, first)) if g.rule == "get-empty-storm"]
    if kind == "management":
        assert [g.object for g in found] == ["queue k7.polled"]
    else:
        [g] = found
        assert g.object == f"node {field.node.nodename}" and g.evidence["queue"] == "unattributed"
        assert g.connection_name == "" and "k7.polled" not in g.explanation


def test_a_consumer_that_gives_its_message_back_and_cancels_loses_it_with_its_auto_delete_queue(field):
    conn = connect(field.node, "/", "pika-requeue-cancel")
    again = None
    try:
        ch = conn.channel()
        ch.queue_declare("k7.autodelete", durable=True, auto_delete=True)
        ch.confirm_delivery()
        ch.basic_publish("", "k7.autodelete", b"job", pika.BasicProperties(delivery_mode=2))
        got = []
        tag = ch.basic_consume("k7.autodelete", lambda c, m, p, b: got.append(m.delivery_tag))
        wait_for(lambda: conn.process_data_events(time_limit=0.2) or got, 20, "the delivery")
        # A poll has seen the queue hold it, counted: the loss is read against that poll.
        holding = _found(field, "temporary-queue-holding", "queue k7.autodelete")
        assert holding["severity"] == "warning" and "1 persistent" in holding["explanation"]
        wait_for(lambda: ((q := _snapshot_queue(field, "k7.autodelete")) or {}).get("message_stats", {}).get(
            "deliver_get"), 20, "the queue's counters in the exporter's snapshot")
        ch.basic_nack(got[0], requeue=True)
        ch.basic_cancel(tag)  # the last consumer: the broker deletes the queue, and the message with it
        conn.close()
        again = connect(field.node, "/", "pika-requeue-cancel")
        again.channel().queue_declare("k7.autodelete", durable=True, auto_delete=True)
        lost = _found(field, "queue-deleted-holding", "queue k7.autodelete")
    finally:
        for c in (conn, again):
            if c is not None and c.is_open:
                c.close()
    assert lost["severity"] == "critical" and lost["evidence"]["messages_at_last_poll"] == 1
    assert lost["evidence"]["persistent"] == 1 and lost["connection_name"] == "pika-requeue-cancel"
    assert "deleted" in lost["explanation"] and "auto-delete" in lost["explanation"] and lost["remedy"]


def test_auto_ack_consumers_killed_with_messages_in_them_are_named_with_what_they_received(field, tmp_path):
    """pika, and kombu as Celery's event and result consumers use it (no_ack=True), each killed while what the broker
    sent waits in it."""
    queues = {"pika": "k7.events", "py-amqp": "k7.kombu-events"}
    for queue in queues.values():
        field.node.api("PUT", f"/queues/%2F/{queue}", json={"durable": True})
    with Clients(field.node.amqp_url(), tmp_path) as mine:
        consumers = [mine.start(sys.executable, "pika_unruled.py", "auto-ack", queues["pika"]),
                     mine.start(sys.executable, "kombu_auto_ack.py", queues["py-amqp"])]
        for queue in queues.values():
            for i in range(30):
                field.node.api("POST", "/exchanges/%2F/amq.default/publish",
                               json={"routing_key": queue, "payload": f"event {i}", "payload_encoding": "string",
                                     "properties": {}})
        # A poll has seen each consume with automatic ack and take deliveries.
        for queue in queues.values():
            wait_for(lambda q=queue: ((s := _snapshot_queue(field, q)) or {}).get("message_stats", {}).get(
                "deliver_no_ack"), 30, f"auto-ack deliveries from {queue} in the exporter's snapshot")
        for consumer in consumers:
            os.killpg(consumer.pid, signal.SIGKILL)  # dies with what it was sent and had not processed
            consumer.wait()

    def gone(product: str) -> list[dict]:
        return [g for g in field.seen.all() if g["rule"] == "auto-ack-consumer-gone"
                and g["client"].lower().startswith(product)]
    for product, queue in queues.items():
        found = wait_for(lambda p=product: next((g for g in gone(p) if g["severity"] == "warning"), None), 60,
                         lambda p=product: f"auto-ack-consumer-gone on {p}; seen: "
                         f"{[(g['severity'], g['evidence']) for g in gone(p)]}")
        assert found["object"].startswith("channel ") and found["evidence"]["auto_ack_queues"] == queue
        assert "dropped" in found["evidence"]["ended"] and "inferred" in found["explanation"]
    assert gone("pika")[-1]["connection_name"] == "pika-auto-ack"


def test_a_deprecated_feature_used_today_is_said_where_the_release_lists_it(field):
    if field.release.at_least(3, 13):
        f = _found(field, "deprecated-feature-used", "deprecated feature transient_nonexcl_queues", timeout=90)
        assert f["severity"] == "info" and "k7.transient" in f["evidence"]["used_by"] and f["evidence"]["doc_url"]
    else:  # 3.10 keeps no list of deprecated features in use: the rule says why it does not run, and nothing else
        polls_seen(field.exporter.url, 2)
        assert not [g for g in field.seen.all() if g["rule"] == "deprecated-feature-used"]
        [skipped] = [n for n in field.seen.not_evaluated if n["rule"] == "deprecated-feature-used"]
        assert "3.13" in skipped["why"]


def test_a_queue_deleted_once_drained_and_the_healthy_client_are_named_by_nothing(field):
    conn = connect(field.node, "/", "pika-drained")
    try:
        ch = conn.channel()
        ch.queue_declare("k7.drained", durable=True)
        ch.confirm_delivery()
        for _ in range(3):
            ch.basic_publish("", "k7.drained", b"job", pika.BasicProperties(delivery_mode=2))
        wait_for(lambda: (_snapshot_queue(field, "k7.drained") or {}).get("messages_ready") == 3, 20,
                 "the queue to hold 3 at a poll")
        while (got := ch.basic_get("k7.drained"))[0] is not None:
            ch.basic_ack(got[0].delivery_tag)
        wait_for(lambda: (q := _snapshot_queue(field, "k7.drained")) is not None and q["messages_ready"] == 0
                 and q["messages_unacked"] == 0, 20, "the queue to be seen empty")
        ch.queue_delete("k7.drained")
        wait_for(lambda: _snapshot_queue(field, "k7.drained") is None, 20, "the queue gone from a poll")
        polls_seen(field.exporter.url, 3)
    finally:
        conn.close()
    field.clients.check()
    seen = field.seen.all()
    assert not [g for g in seen if g["object"] == "queue k7.drained" and g["rule"] == "queue-deleted-holding"]
    loud = [(g["rule"], g["object"], g["severity"]) for g in seen if g["severity"] != "info" and (
        g["object"] in ("queue k7.orders", "queue k7.drained", "queue k7.transient")
        or g["object"].startswith("queue amq.gen-") or g["connection_name"] in ("pika-healthy", "pika-drained"))]
    assert not loud, loud
    assert not [g for g in seen if g["object"].startswith("queue amq.gen-")]  # its empty reply queue: nothing at all
