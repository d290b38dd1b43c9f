"""A three-node cluster of private nodes (joined with rabbitmqctl join_cluster): a node killed, then a second,
then both back; what ackscope names at each step, read from the exporter as a user reads it."""

from __future__ import annotations

import pika
import requests
from helpers import scrape, value, wait_for

from ackscope.workloads.private_broker import LocalCluster

QUEUE = "ackscope.test.quorum"


def findings(url: str) -> list[dict]:
    return requests.get(url + "/api/findings", timeout=5).json()["findings"]


def of(url: str, rule: str, obj: str) -> dict | None:
    return next((f for f in findings(url) if f["rule"] == rule and f["object"] == obj), None)


def test_a_dead_node_and_a_quorum_queue_losing_members_then_its_quorum_are_named_and_clear_on_return(
        cluster: LocalCluster, start_exporter):
    first, second, third = cluster.nodes
    conn = pika.BlockingConnection(pika.URLParameters(first.amqp_url()))
    conn.channel().queue_declare(QUEUE, durable=True, arguments={"x-queue-type": "quorum"})
    conn.close()
    exporter = start_exporter(first.management_url, source="management", interval=0.5, timeout=5.0)
    url = exporter.url
    members = wait_for(lambda: value(scrape(exporter), "ackscope_queue_members", queue=QUEUE), 30,
                       "the quorum queue's members")
    assert members == 3
    assert value(scrape(exporter), "ackscope_node_running", node=third.nodename) == 1

    third.kill()
    down = wait_for(lambda: of(url, "node-down", f"node {third.nodename}"), 30, "node-down naming the third node")
    assert down["severity"] == "critical"
    degraded = wait_for(lambda: of(url, "quorum-queue-degraded", f"queue {QUEUE}"), 30, "quorum-queue-degraded")
    assert degraded["evidence"]["missing"] == [third.nodename]
    samples = scrape(exporter)
    assert value(samples, "ackscope_node_running", node=third.nodename) == 0
    assert value(samples, "ackscope_queue_members_online", queue=QUEUE) == 2

    second.kill()
    lost = wait_for(lambda: of(url, "quorum-queue-no-quorum", f"queue {QUEUE}"), 60, "quorum-queue-no-quorum")
    assert lost["severity"] == "critical"
    assert sorted(lost["evidence"]["missing"]) == sorted([second.nodename, third.nodename])

    second.start()
    third.start()
    cluster.wait_running(3)
    wait_for(lambda: not any(f["rule"] in ("node-down", "quorum-queue-degraded", "quorum-queue-no-quorum")
                             for f in findings(url)), 60, "the cluster findings to clear")


def test_a_memory_alarm_on_one_member_is_named(cluster: LocalCluster, start_exporter):
    _, _, third = cluster.nodes
    exporter = start_exporter(cluster.nodes[0].management_url, source="management", interval=0.5, timeout=5.0)
    third.ctl("set_vm_memory_high_watermark", "0.0000001")
    try:
        alarm = wait_for(lambda: of(exporter.url, "memory-alarm", f"node {third.nodename}"), 30,
                         "memory-alarm naming the third node")
        assert alarm["severity"] == "critical"
    finally:
        third.ctl("set_vm_memory_high_watermark", "0.4")
    wait_for(lambda: of(exporter.url, "memory-alarm", f"node {third.nodename}") is None, 30, "the alarm to clear")
