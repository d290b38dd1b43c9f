"""Where deliveries break, on real clients and on every release of the matrix, read by an exporter that follows the
node's log (--broker-log): pika acking twice and on another channel, Celery's acks_late task that hangs past a short
consumer timeout, the Java client's consumer that stops acking (on a quorum queue), amqplib connecting per message.
What each release does differs (docs/versions.md): 3.10 and 4.0 close a timed-out consumer's channel and log it;
4.3 cancels a quorum queue's consumer silently, and times out no classic queue's."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from client_processes import Clients
from conftest import exporter_config
from helpers import MATRIX, findings, matrix_release, private_broker, scrape, value, wait_for

from ackscope.apps.exporter import Exporter
from ackscope.diagnosis.thresholds import Thresholds
from ackscope.workloads.private_broker import LocalBroker
from ackscope.workloads.rabbitmq_release import Release

TIMEOUT_MS = 20_000  # the nodes' consumer_timeout: short, so that a timeout happens within the test
STALLED_AFTER = 3.0  # seconds a consumer holds without acking before it is stalled (a minute by default)
# 3.10 checks the timeout about once a minute: its close comes up to 60 s after the timeout.
TIMED_OUT_WITHIN = 120.0


@dataclass(frozen=True)
class Breaking:
    release: Release
    statistics: bool  # off: the exporter reads the Prometheus plugin, and no poll names a client's library
    node: LocalBroker
    exporter: Exporter
    clients: Clients

    @property
    def newest(self) -> bool:
        return self.release.at_least(4, 3)


@pytest.fixture(scope="module", params=list(MATRIX))
def release(request) -> Release:
    return matrix_release(request.param)


@pytest.fixture(scope="module", params=["stats-on", "stats-off"])
def breaking(request, release, tmp_path_factory) -> Iterator[Breaking]:
    """One node of the release, logging at info with a 20 s consumer timeout, its management statistics on or off
    (the exporter then reads its Prometheus plugin), an exporter following its log, and every misbehaving client at
    once (each on queues of its own)."""
    statistics = request.param == "stats-on"
    with private_broker(f"ackscope-breaks{release.name.replace('.', '')}{request.param[6:]}", release=release,
                        statistics=statistics,
                        config=("log.file.level = info", f"consumer_timeout = {TIMEOUT_MS}")) as node:
        exporter = Exporter(exporter_config(node.management_url, interval=0.5, broker_log=str(node.log_file),
                                            prometheus_url=node.prometheus_url,
                                            thresholds=Thresholds(stalled_consumer_seconds=STALLED_AFTER)))
        exporter.start()
        try:
            with Clients(node.amqp_url(), tmp_path_factory.mktemp("clients")) as clients:
                clients.start(sys.executable, "pika_acks.py", "double-ack", "pika.double-ack")
                clients.start(sys.executable, "pika_acks.py", "ack-other-channel", "pika.other-channel")
                clients.amqplib("connection-per-message", "amqplib.churn")
                clients.java_client("stalled-consumer", "java.stalled")
                for i in range(10):
                    node.api("POST", "/exchanges/%2F/amq.default/publish",
                             json={"routing_key": "java.stalled", "payload": f"job {i}",
                                   "payload_encoding": "string", "properties": {"delivery_mode": 2}})
                clients.celery_worker("acks-late")
                # The CLI, which lists consumers with statistics off too.
                wait_for(lambda: "celery" in node.ctl("list_consumers", "-q", "queue_name").split(), timeout=60,
                         what="the Celery worker to consume")
                clients.run(sys.executable, "celery_app.py", "hangs", "1")
                yield Breaking(release, statistics, node, exporter, clients)
        finally:
            exporter.stop()


def _found(b: Breaking, rule: str, match, timeout: float, what: str) -> dict:
    def found():
        b.clients.check()
        return next((f for f in findings(b.exporter) if f["rule"] == rule and match(f)), None)
    return wait_for(found, timeout=timeout, what=f"{rule} on {what} (RabbitMQ {b.release.version})")


def test_a_double_ack_and_an_ack_on_another_channel_are_named_with_the_remedy_for_an_unknown_tag(breaking):
    for name in ("pika-double-ack", "pika-ack-other-channel"):
        f = _found(breaking, "closed-on-error", lambda f, n=name: f["connection_name"] == n
                   and f["evidence"]["closed"] >= 2, 30, name)
        assert f["evidence"]["reason"] == "unknown_delivery_tag" and f["evidence"]["operation"] == "basic.ack"
        assert f["evidence"]["source"] == "broker log" and "unknown delivery tag" in f["evidence"]["broker_said"]
        assert "double ack" in f["remedy"] and f["client"].startswith("Pika" if breaking.statistics else "")
    samples = scrape(breaking.exporter)
    assert value(samples, "ackscope_broker_channel_errors_total", connection_name="pika-double-ack",
                 reason="unknown_delivery_tag") >= 2
    assert value(samples, "ackscope_broker_log_readable") == 1


def test_amqplib_connecting_per_message_is_churn_named_by_its_address(breaking):
    f = _found(breaking, "connection-churn", lambda f: f["severity"] == "warning", 60, "amqplib")
    assert f["evidence"]["source"] == "broker log" and f["evidence"]["peer_host"] == "127.0.0.1"
    # Twice a second; judged over a minute at least, so that a burst of a few connections is no churn.
    assert f["evidence"]["connections_opened"] >= 10 and f["evidence"]["per_minute"] >= 10
    opened = sum(v for labels, v in scrape(breaking.exporter)["ackscope_broker_connections_opened_total"])
    assert opened >= 10


def test_the_java_clients_consumer_that_stops_acking_is_stalled_with_what_its_release_will_do(breaking):
    f = _found(breaking, "consumer-stalled", lambda f: f["evidence"]["queue"] == "java.stalled", 30,
               "the Java client")
    ev = f["evidence"]
    assert ev["unacked"] == 5
    if breaking.statistics:
        assert ev["queue_type"] == "quorum" and f["client"].startswith("RabbitMQ")
    if breaking.release.at_least(4, 0) and breaking.statistics:
        assert ev["timeout_ms"] == TIMEOUT_MS
        assert ev["timeout_source"] == "the broker's own figure for this consumer (/api/consumers)"
    else:  # 3.10, or statistics off, shows no consumer's timeout: the default, said to be inferred, until the log
        # shows one applied
        assert (ev["timeout_ms"], ev["timeout_source"][:8]) in ((1_800_000, "inferred"), (TIMEOUT_MS, "the brok"))
    if breaking.newest:
        assert ("cancels the consumer" if ev["queue_type"] else "depends on the queue's type") in ev["next"]
    else:
        assert "closes the channel" in ev["next"]
    assert not [p for p in findings(breaking.exporter) if p["rule"] == "prefetch-saturated"
                and p["evidence"]["queue"] == "java.stalled"], "stalled, not slow"


def test_past_the_timeout_the_java_consumer_is_timed_out_or_on_4_3_silently_cancelled(breaking):
    if breaking.newest:
        f = _found(breaking, "consumer-cancelled-by-broker", lambda f: f["evidence"]["queue"] == "java.stalled",
                   TIMED_OUT_WITHIN, "the Java client")
        assert f["severity"] == "critical" and f["evidence"]["ready"] == 10 and f["evidence"]["channel_open"]
        assert "inferred" in f["evidence"]
    else:
        # 4.0 names the queue; 3.10 does not, and with statistics off nothing names the Java client's library.
        queue = "java.stalled" if breaking.release.name == "4.0" else "not named by this release's log"
        f = _found(breaking, "consumer-timed-out", lambda f: f["evidence"]["queue"] == queue and (
            f["client"].startswith("RabbitMQ") or not breaking.statistics), TIMED_OUT_WITHIN, "the Java client")
        assert f["evidence"]["timeout_ms"] == TIMEOUT_MS and f["evidence"]["source"] == "broker log"


def test_a_celery_acks_late_task_that_hangs_is_stalled_then_timed_out_but_not_on_4_3s_classic_queue(breaking):
    f = _found(breaking, "consumer-stalled", lambda f: f["evidence"]["queue"] == "celery", 60, "Celery")
    assert f["evidence"]["unacked"] == 1
    if not breaking.statistics:  # the Prometheus plugin names neither the client nor (on 4.3) the queue's type
        return
    assert f["client"].startswith("py-amqp")
    if breaking.newest:
        assert f["evidence"]["timeout_ms"] is None and "no timeout applies" in f["evidence"]["next"]
        assert f["severity"] == "warning"
        return
    timed_out = _found(breaking, "consumer-timed-out", lambda f: f["client"].startswith("py-amqp"), TIMED_OUT_WITHIN,
                       "Celery")
    assert timed_out["evidence"]["timeouts"] >= 1
