"""What the broker's log says it dropped, and the clients it closed, on real nodes of 3.10 and the newest 4.x read by
an exporter that follows the log (--broker-log), side by side on one node as a busy broker would have them (issue 55,
K4 and K6's 406): a confirmed message dropped in a dead-letter cycle (pika), a client closed for missed heartbeats
(pika), a Celery producer whose every send is refused with 406 PRECONDITION_FAILED (its queue declared elsewhere
with x-max-priority and x-message-ttl), and beside them a healthy client that nothing names at warning or above."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from client_processes import Clients
from conftest import exporter_config
from helpers import matrix_release, private_broker, scenarios_running, scrape, value, wait_for
from test_breaks import Seen

from ackscope.apps.exporter import Exporter
from ackscope.workloads.private_broker import LocalBroker
from ackscope.workloads.rabbitmq_release import Release
from ackscope.workloads.scenarios import PREFIX

CYCLE = "k4.cycle"
PRIORITY_QUEUE = "k4.celery-priority"  # declared by "someone else" (the API) with other arguments than Celery's
SENDS, EVERY = 5, 2.0  # the Celery producer's sends: 5 in 10 s, each refused
HEALTHY = "ackscope-scenario healthy"  # workloads.scenarios' healthy client: confirms, prefetch, manual acks


@dataclass(frozen=True)
class Dropping:
    release: Release
    node: LocalBroker
    exporter: Exporter
    seen: Seen


@pytest.fixture(scope="module", params=["3.10", "newest"])
def release(request) -> Release:
    return matrix_release(request.param)


@pytest.fixture(scope="module")
def dropping(release, tmp_path_factory) -> Iterator[Dropping]:
    """One node of the release logging at info, an exporter following its log, the healthy client running, and
    each client the broker drops from run to its end, one after the other."""
    with private_broker(f"ackscope-k4-{release.name.replace('.', '')}", release=release,
                        config=("log.file.level = info",)) as node:
        exporter = Exporter(exporter_config(node.management_url, interval=1.0, broker_log=str(node.log_file),
                                            prometheus_url=node.prometheus_url))
        exporter.start()
        seen = Seen(exporter.url)
        try:
            with scenarios_running(node, "/", "healthy"), \
                    Clients(node.amqp_url(), tmp_path_factory.mktemp("clients")) as clients:
                clients.run(sys.executable, "pika_drops.py", "dead-letter-cycle", CYCLE)
                node.api("PUT", f"/queues/%2F/{PRIORITY_QUEUE}", json={"durable": True, "arguments": {
                    "x-max-priority": 10, "x-message-ttl": 60000}})
                clients.run(sys.executable, "celery_inequivalent.py", PRIORITY_QUEUE, str(SENDS), str(EVERY))
                clients.run(sys.executable, "pika_drops.py", "heartbeat-sleeper", "k4-heartbeat-sleeper")
                yield Dropping(release, node, exporter, seen)
        finally:
            seen.stop()
            exporter.stop()


def _found(d: Dropping, rule: str, match, what: str, timeout: float = 30.0) -> dict:
    def found():
        return next((f for f in list(d.seen.findings.values()) if f["rule"] == rule and match(f)), None)
    return wait_for(found, timeout=timeout, what=lambda: f"{rule} on {what} (RabbitMQ {d.release.version}); seen: "
                    f"{sorted((k[0], k[1], f['severity']) for k, f in list(d.seen.findings.items()))}")


def test_a_confirmed_message_dropped_in_a_dead_letter_cycle_is_critical_naming_the_cycle(dropping):
    f = _found(dropping, "dead-letter-cycle-dropped", lambda f: f["object"] == f"queue {CYCLE}.retry", "the cycle")
    assert f["severity"] == "critical"
    assert f["evidence"]["queues"] == [f"{CYCLE}.work", f"{CYCLE}.retry", f"{CYCLE}.work"]
    # The log names no vhost: the only one holding both queues is inferred, and said to be.
    assert f["vhost"] == "/" and "inferred" in f["evidence"]["vhost"]
    assert value(scrape(dropping.exporter), "ackscope_broker_messages_dropped_total", reason="dead_letter_cycle",
                 vhost="", user="", connection_name="") == 1


def test_a_celery_producer_refused_every_send_with_406_can_no_longer_work_critical(dropping):
    f = _found(dropping, "closed-on-error", lambda f: f["connection_name"] == "celery-inequivalent-producer"
               and f["evidence"]["closed"] == SENDS, "the Celery producer")
    assert f["severity"] == "critical" and f["evidence"]["reason"] == "inequivalent_arguments"
    assert f["evidence"]["queue"] == PRIORITY_QUEUE and f["evidence"]["operation"] == "queue.declare"
    assert "can no longer do its work" in f["explanation"] and "policy" in f["remedy"]


def test_a_client_closed_for_missed_heartbeats_is_named(dropping):
    f = _found(dropping, "closed-on-error", lambda f: f["connection_name"] == "k4-heartbeat-sleeper",
               "the heartbeat sleeper")
    assert f["severity"] == "warning" and f["evidence"]["reason"] == "missed_heartbeats"
    assert f["evidence"]["broker_said"] == "missed heartbeats from client, timeout: 2s"
    assert "add_callback_threadsafe" in f["remedy"]


def test_the_healthy_client_is_named_by_nothing_and_every_warning_the_node_wrote_was_understood(dropping):
    # After the others were found: every finding shown since the clients started.
    for rule, what in (("dead-letter-cycle-dropped", "the cycle"), ("closed-on-error", "the refused clients")):
        _found(dropping, rule, lambda f: True, what)
    loud = [(k, f["connection_name"], f["severity"]) for k, f in list(dropping.seen.findings.items())
            if f["severity"] in ("warning", "critical")]
    assert not [x for x in loud if x[1] == HEALTHY or PREFIX + "healthy" in x[0][1] or x[0][2] == PREFIX + "healthy"]
    # The rules of the log name nothing else: the cycle's queue, and the clients the broker closed.
    named = {(k[0], f["connection_name"] or f["object"]) for k, f in list(dropping.seen.findings.items())
             if k[0] in ("dead-letter-cycle-dropped", "closed-on-error")}
    assert named == {("dead-letter-cycle-dropped", f"queue {CYCLE}.retry"),
                     ("closed-on-error", "celery-inequivalent-producer"),
                     ("closed-on-error", "k4-heartbeat-sleeper")}
    samples = scrape(dropping.exporter)
    assert value(samples, "ackscope_broker_log_not_understood_lines_total") == 0
    assert value(samples, "ackscope_broker_log_unknown_lines_total") == 0
