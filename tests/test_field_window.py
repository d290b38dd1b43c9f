"""Failures reported from the field (issue 55) whose findings must hold for the window, on real pika clients side
by side on one node per release (3.10 and the newest 4.x), read by an exporter with a short window:
- a confirming publisher nacked 49 times by a full reject-publish queue, then connected and idle: publisher-nacked
  names it for the whole window after it went idle, and no longer once the window has passed (K3);
- a poison message that kills its consumer every time (the worker exits on it, its supervisor restarts it), at
  under one delivery a second: a critical requeue-loop that says its consumers die holding it (K5);
- a confirming publisher whose mandatory publishes are returned as unroutable, then acked: critical (K6);
- beside them a healthy client (confirms, prefetch, manual acks), named by nothing at warning or above."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import requests
from client_processes import Clients
from conftest import exporter_config
from helpers import DOCUMENT_TIMEOUT, matrix_release, private_broker, wait_for

from ackscope.apps.exporter import Exporter
from ackscope.diagnosis.thresholds import Thresholds
from ackscope.diagnosis.window import KEPT
from ackscope.workloads.private_broker import LocalBroker
from ackscope.workloads.rabbitmq_release import Release

WINDOW = 25.0  # the rules' window: short, so that a test sees a finding outlive its cause and then the window
INTERVAL = 1.0
# RabbitMQ 4 refreshes a channel's figures every 5 s or so: the poll that shows a channel's last count may come
# that much after the client stopped; and the window's start is known to a tenth of the window.
REFRESH = 5.0
HEALTHY = "pika-healthy"


class Polls:
    """Every poll's findings document the exporter served since the clients started, by the time it was taken:
    a test that comes after another must still see what each poll said."""

    def __init__(self, url: str):
        self.url = url
        self.docs: dict[float, dict] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.wait(0.3):
            try:
                doc = requests.get(self.url + "/api/findings", timeout=DOCUMENT_TIMEOUT).json()
            except requests.RequestException:
                continue  # the exporter is stopping: what was seen stays
            if doc["taken_at"] is not None:
                self.docs.setdefault(doc["taken_at"], doc)

    def between(self, since: float, until: float = float("inf")) -> list[dict]:
        return [d for t, d in sorted(self.docs.items()) if since <= t <= until]

    def latest(self) -> float:
        return max(self.docs, default=0.0)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


@dataclass(frozen=True)
class Field:
    release: Release
    node: LocalBroker
    exporter: Exporter
    clients: Clients
    polls: Polls


@pytest.fixture(scope="module", params=["3.10", "newest"])
def release(request) -> Release:
    return matrix_release(request.param)


@pytest.fixture(scope="module")
def field(release, tmp_path_factory) -> Iterator[Field]:
    """One node of the release, an exporter polling it every second with a 25 s window, and the clients side by
    side: the healthy one first, then the poison loop, the nacked publisher and the returned one."""
    with private_broker(f"ackscope-k3k5-{release.name.replace('.', '')}", release=release) as node:
        node.api("PUT", "/queues/%2F/field.poison", json={"durable": True, "arguments": {"x-expires": 600_000}})
        exporter = Exporter(exporter_config(node.management_url, interval=INTERVAL,
                                            thresholds=Thresholds(window_seconds=WINDOW)))
        exporter.start()
        polls = Polls(exporter.url)
        try:
            with Clients(node.amqp_url(), tmp_path_factory.mktemp("clients")) as clients:
                clients.start(sys.executable, "pika_field.py", "healthy", "field.healthy")
                clients.start(sys.executable, "pika_field.py", "poison", "field.poison")
                node.api("POST", "/exchanges/%2F/amq.default/publish",
                         json={"routing_key": "field.poison", "payload": "poison", "payload_encoding": "string",
                               "properties": {"delivery_mode": 2}})
                clients.start(sys.executable, "pika_field.py", "nacked", "field.full")
                clients.start(sys.executable, "pika_field.py", "returned", "field.nowhere")
                yield Field(release, node, exporter, clients, polls)
        finally:
            polls.stop()
            exporter.stop()


def _named(doc: dict, rule: str, connection_name: str) -> dict | None:
    return next((f for f in doc["findings"] if f["rule"] == rule and f["connection_name"] == connection_name), None)


def _loud_on_healthy(docs: list[dict]) -> list:
    return [(f["rule"], f["severity"], f["object"]) for d in docs for f in d["findings"]
            if f["severity"] != "info" and (HEALTHY in f["connection_name"] or "field.healthy" in f["object"])]


def _published(node: LocalBroker, connection_name: str) -> int | None:
    """What the broker counts a client's channels published, by the name it gave its connection."""
    names = {c["name"] for c in node.api("GET", "/connections").json()
             if c.get("client_properties", {}).get("connection_name") == connection_name}
    counts = [ch.get("message_stats", {}).get("publish") for ch in node.api("GET", "/channels").json()
              if ch.get("connection_details", {}).get("name") in names]
    return sum(n or 0 for n in counts) if counts else None


def _wait_for_polls_until(field: Field, until: float, timeout: float) -> None:
    wait_for(lambda: field.polls.latest() >= until, timeout=timeout,
             what=lambda: f"a poll taken after {until:.0f} (latest {field.polls.latest():.0f})")


def test_a_publisher_nacked_then_idle_is_named_for_the_whole_window_and_no_longer(field):
    # Idle from when the broker counts its 50 publishes (4.x shows it up to a refresh late: later, never earlier).
    wait_for(lambda: (field.clients.check(), _published(field.node, "pika-nacked") == 50)[1], timeout=60,
             what="the nacked publisher's 50 publishes")
    idle_at = time.time()
    # Named through the window after it went idle: from more than two polls after, to near the window's end.
    _wait_for_polls_until(field, idle_at + WINDOW - 3, timeout=WINDOW + 30)
    idle = field.polls.between(idle_at + 2.5 * INTERVAL, idle_at + WINDOW - 3)
    assert len(idle) >= 10, f"polls while it idled: {len(idle)}"
    missing = [d["taken_at"] for d in idle if not _named(d, "publisher-nacked", "pika-nacked")]
    assert not missing, f"publisher-nacked absent at {len(missing)} of {len(idle)} polls after it went idle"
    first, last = (_named(d, "publisher-nacked", "pika-nacked") for d in (idle[0], idle[-1]))
    assert (first["severity"], first["evidence"]["inferred_nacked"], first["evidence"]["nacked_in_window"]) == \
        ("warning", 49, 49), first
    # Near the window's end the window starts after its first nacks: fewer are the window's, and when the last was
    # seen is said.
    assert 0 < last["evidence"]["nacked_in_window"] <= 49 and last["evidence"]["last_seen"].endswith("s ago"), last
    # Gone once the window has passed its last nack.
    gone_from = idle_at + WINDOW + WINDOW / KEPT + REFRESH + 2 * INTERVAL
    _wait_for_polls_until(field, gone_from + 3 * INTERVAL, timeout=WINDOW + 60)
    after = field.polls.between(gone_from)
    assert after and not [d for d in after if _named(d, "publisher-nacked", "pika-nacked")]
    assert not _loud_on_healthy(field.polls.between(0)), "the healthy client is named by nothing"


def test_a_poison_message_killing_its_consumer_under_one_a_second_is_a_critical_requeue_loop(field):
    def dying():
        field.clients.check()
        return next((f for d in field.polls.between(0) for f in d["findings"]
                     if f["rule"] == "requeue-loop" and f["object"] == "queue field.poison"
                     and f["evidence"]["window_seconds"] >= WINDOW - 2 * INTERVAL
                     and ("consumer_connections_closed" in f["evidence"] or "consumers_seen" in f["evidence"])),
                    None)
    def said() -> str:
        loops = [(g["severity"], g["connection_name"], g["evidence"]) for d in field.polls.between(0)
                 for g in d["findings"] if g["rule"] == "requeue-loop"]
        return f"requeue-loop on field.poison saying its consumers die; the last seen: {loops[-4:]}"
    f = wait_for(dying, timeout=WINDOW + 60, what=said)
    ev = f["evidence"]
    assert f["severity"] == "critical" and ev["acked_in_window"] == 0, f
    assert 0 < ev["deliver_rate"] < 1.0 and ev["redelivered_in_window"] >= 5, ev
    # Each worker lives a fraction of a second: whether a poll sees it decides how the loop is told, not whether.
    if "consumer_connections_closed" in ev:
        assert "dies holding the message" in f["explanation"] and f["connection_name"] == "pika-poison-worker", f
    else:
        assert ev["consumers_seen"].startswith("none at any poll") and "dying" in f["explanation"], f
    assert ev["next"] == "loops-forever"
    assert not _loud_on_healthy(field.polls.between(0)), "the healthy client is named by nothing"


def test_unroutable_messages_returned_then_acked_on_a_confirm_channel_are_critical(field):
    def returned():
        """The finding of the poll that counted the most returns: all five, once the broker counts them."""
        field.clients.check()
        found = [f for d in field.polls.between(0) for f in d["findings"]
                 if f["rule"] == "unroutable-returned" and f["connection_name"] == "pika-returned"]
        f = max(found, key=lambda f: f["evidence"]["return_unroutable_in_window"], default=None)
        return f if f is not None and f["evidence"]["return_unroutable_in_window"] == 5 else None
    f = wait_for(returned, timeout=60, what="unroutable-returned naming pika-returned, all five returns counted")
    assert (f["severity"], f["evidence"]["return_unroutable_in_window"], f["evidence"]["confirm"]) == \
        ("critical", 5, True), f
    assert "no queue holds them" in f["explanation"]
    # The management API does not say which exchange a confirm channel published to: named or said to be unknown,
    # never another.
    where = f["evidence"]["exchange"]
    assert where == "exchange 'field.nowhere'" or where.startswith("not known"), where
    assert not _loud_on_healthy(field.polls.between(0)), "the healthy client is named by nothing"
