"""`ackscope diagnose` run as on call, after the incident, on a private node of 3.10 and of the newest release: a
double ack that ended a minute before it ran, found in the node's log (--broker-log) within --since and not before;
a running exporter's findings over its window (--exporter-url); and a consumer that acks nothing said stalled, never
at its prefetch, with a healthy consumer beside it named by nothing at warning or above. The parts without a
node: tests/test_diagnose_window.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pika
import pytest
import requests
from conftest import exporter_config
from helpers import findings, matrix_release, own_vhost, private_broker, scenarios_running, wait_for

from ackscope.apps.exporter import Exporter
from ackscope.diagnosis.thresholds import Thresholds
from ackscope.model.events import EVENTS
from ackscope.sources import Selection
from ackscope.workloads.private_broker import ADMIN_PASSWORD, ADMIN_USER, LocalBroker
from ackscope.workloads.rabbitmq_release import Release
from ackscope.workloads.scenarios import PREFIX

STALLED = "ackscope-scenario consumer-stalled"
HEALTHY = "ackscope-scenario healthy"
ENDED_BEFORE = 60.0  # seconds between the double ack's end and the diagnose that looks for it


@dataclass(frozen=True)
class Node:
    node: LocalBroker
    ended: str  # the vhost of the double ack that has ended, and nothing else
    ended_at: float  # when its channel was closed
    running: str  # the vhost of the consumers that are still there: one stalled, one healthy


def _double_ack(node: LocalBroker, vhost: str, name: str) -> float:
    """A client that acks one delivery twice, on a channel the broker then closes, and goes away; when it ended."""
    params = pika.URLParameters(node.amqp_url(vhost))
    params.client_properties = {"connection_name": name}
    conn = pika.BlockingConnection(params)
    try:
        ch = conn.channel()
        ch.queue_declare("k8.double-ack", arguments={"x-expires": 600_000})
        ch.basic_publish("", "k8.double-ack", b"job")
        method = wait_for(lambda: ch.basic_get("k8.double-ack")[0], what="the message to get")
        ch.basic_ack(method.delivery_tag)
        ch.basic_ack(method.delivery_tag)  # unknown delivery tag: the broker closes the channel
        wait_for(lambda: (conn.process_data_events(time_limit=0.1), ch.is_closed)[1], what="the channel's close")
    finally:
        conn.close()
    return time.time()


@pytest.fixture(scope="module", params=["3.10", "newest"])
def release(request) -> Release:
    return matrix_release(request.param)


@pytest.fixture(scope="module")
def k8(release) -> Iterator[Node]:
    """A node of the release: a double ack ended in one vhost, and in another a stalled consumer and a healthy one."""
    with private_broker(f"ackscope-k8-{release.name.replace('.', '')}", release=release) as node, \
            own_vhost(node, "k8-ended") as ended, own_vhost(node, "k8-running") as running:
        ended_at = _double_ack(node, ended, "k8-double-ack")
        with scenarios_running(node, running, "consumer-stalled", "healthy"):
            wait_for(lambda: _queue(node, running, f"{PREFIX}consumer-stalled").get("messages_unacknowledged") == 5,
                     timeout=60, what=lambda: f"the stalled consumer to hold its 5 (its queue: "
                     f"{_queue(node, running, PREFIX + 'consumer-stalled')})")
            yield Node(node, ended, ended_at, running)


def _queue(node: LocalBroker, vhost: str, name: str) -> dict:
    answer = requests.get(f"{node.management_url}/api/queues/{vhost}/{name}", auth=(ADMIN_USER, ADMIN_PASSWORD),
                          timeout=10)
    return answer.json() if answer.ok else {}


def _diagnose(node: LocalBroker, *options: str, vhost: str | None = None) -> subprocess.CompletedProcess:
    """`ackscope diagnose` as on call, a process of its own; of one vhost's objects where `vhost` is given."""
    env = dict(os.environ, ACKSCOPE_PASSWORD=ADMIN_PASSWORD, COLUMNS="200")
    chosen = ("--include-vhosts", re.escape(vhost)) if vhost else ()
    return subprocess.run([sys.executable, "-m", "ackscope", "diagnose", "--management-url", node.management_url,
                           "--username", ADMIN_USER, *chosen, *options], capture_output=True, text=True, timeout=300,
                          env=env)


def _report(done: subprocess.CompletedProcess) -> dict:
    assert done.returncode in (0, 1, 2) and "Traceback" not in done.stderr, done.stderr
    return json.loads(done.stdout)


def _loud_about_healthy(found: list[dict]) -> list[tuple]:
    return [(f["rule"], f["severity"], f["object"]) for f in found if f["severity"] != "info" and (
        f["connection_name"] == HEALTHY or f["object"] == f"queue {PREFIX}healthy")]


def test_a_consumer_that_acks_nothing_is_stalled_never_at_its_prefetch(k8):
    report = _report(_diagnose(k8.node, "--format", "json", vhost=k8.running))  # the default window, 5 s
    about = [f for f in report["findings"] if f["connection_name"] == STALLED]
    rules = {f["rule"] for f in about}
    assert "consumer-stalled" in rules and "prefetch-saturated" not in rules, about
    (stalled,) = [f for f in about if f["rule"] == "consumer-stalled"]
    assert stalled["evidence"]["unacked"] == 5 and stalled["evidence"]["prefetch_limit"] == 5
    assert stalled["evidence"]["held_for_at_least_seconds"] >= 5 and "acked none for at least" in stalled["explanation"]
    assert _loud_about_healthy(report["findings"]) == []


def test_with_an_exporter_its_findings_over_its_window_are_reported(k8):
    exporter = Exporter(exporter_config(k8.node.management_url, interval=0.5, broker_log=str(k8.node.log_file),
                                        selection=Selection(include_vhosts=re.compile(re.escape(k8.running))),
                                        # Not 3 s: on a loaded machine the healthy consumer's acks, in a
                                        # thread beside the exporter's, were once counted still for 3 s.
                                        thresholds=Thresholds(stalled_consumer_seconds=15)))
    exporter.start()
    try:
        # What ended inside the exporter's window and no sample of diagnose's own could see: a double ack.
        _double_ack(k8.node, k8.running, "k8-exporter-double-ack")
        wait_for(lambda: {"closed-on-error", "consumer-stalled"} <= {f["rule"] for f in findings(exporter)},
                 timeout=60, what="the exporter's findings of the double ack and the stall")
        report = _report(_diagnose(k8.node, "--exporter-url", exporter.url, "--format", "json"))
        text = _diagnose(k8.node, "--exporter-url", exporter.url)
    finally:
        exporter.stop()
    assert report["exporter"]["url"] == exporter.url and report["exporter"]["stale"] is False
    rules = {f["rule"]: f for f in report["findings"]}
    closed = rules["closed-on-error"]
    assert closed["vhost"] == k8.running and closed["evidence"]["reason"] == "unknown_delivery_tag"
    (stalled,) = [f for f in report["findings"] if f["rule"] == "consumer-stalled"]
    assert stalled["connection_name"] == STALLED and stalled["since"] is not None
    assert "prefetch-saturated" not in rules and _loud_about_healthy(report["findings"]) == []
    head = text.stdout.splitlines()
    assert head[0].startswith(f"{exporter.url}: RabbitMQ ") and "queues" in head[0]
    assert head[1].startswith(f"the findings of the exporter at {exporter.url}, over its whole window, as of its "
                              "poll at ") and head[1].endswith("the broker was not sampled by diagnose")
    assert re.search(r"^WARNING +closed-on-error ", text.stdout, re.M) and "  since     20" in text.stdout


def test_a_log_that_is_not_there_is_one_line_and_nothing_else_is_lost(k8, tmp_path):
    missing = tmp_path / "rabbit.log"
    done = _diagnose(k8.node, "--broker-log", str(missing), vhost=k8.running)
    assert done.returncode in (0, 1, 2) and done.stderr == "", done.stderr
    said = [line for line in done.stdout.splitlines() if str(missing) in line]
    assert said == [f"broker log: the broker log {missing} cannot be read: No such file or directory: the rules "
                    "that need it are not evaluated"]
    assert re.search(r"^\S+ +consumer-stalled .*\(ackscope-scenario consumer-stalled\)$", done.stdout, re.M)
    assert "not evaluated closed-on-error: needs the broker's log (--broker-log)" in done.stdout


def test_a_double_ack_that_ended_a_minute_before_is_found_in_the_log_within_since_and_not_before(k8):
    wait_for(lambda: time.time() - k8.ended_at >= ENDED_BEFORE, timeout=ENDED_BEFORE + 5,
             what="a minute since the double ack ended")
    within = _report(_diagnose(k8.node, "--broker-log", str(k8.node.log_file), "--since", "15m", "--window", "1s",
                               "--format", "json", vhost=k8.ended))
    (closed,) = [f for f in within["findings"] if f["rule"] == "closed-on-error"]
    assert closed["severity"] == "warning" and closed["vhost"] == k8.ended
    assert closed["evidence"]["reason"] == "unknown_delivery_tag" and closed["evidence"]["window_seconds"] == 900
    assert closed["since"] <= k8.ended_at and k8.ended_at - closed["since"] < 30
    assert re.fullmatch(r"at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC, the last \d+ min before this report",
                        closed["evidence"]["logged"])
    assert within["broker_log"]["problem"] is None and within["broker_log"]["events"] >= 1
    before = _report(_diagnose(k8.node, "--broker-log", str(k8.node.log_file), "--since", "10s", "--window", "1s",
                               "--format", "json", vhost=k8.ended))
    assert [f for f in before["findings"] if f["rule"] == "closed-on-error"] == []
    assert not [n for n in before["not_evaluated"] if EVENTS in n["needs"]], "the log's rules ran, over 10 s"
