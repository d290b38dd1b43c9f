"""A cluster whose management statistics are off, read from each node's own Prometheus plugin: a node reports
only the channels of the connections it holds, the queues it leads and its own alarms, and no release lists the
plugins' listeners with statistics off, so the operator gives one URL per node (--prometheus-url a,b,c). On
3.10 and on the newest 4.x of the release matrix."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pika
import requests
from helpers import finding_on, memory_alarm, scrape, value, wait_for

from ackscope_testkit.cluster import LocalCluster

PREFETCH, PUBLISHED = 3, 7


def snapshot(url: str) -> dict:
    """The exporter's last snapshot, once it has polled."""
    return wait_for(lambda: requests.get(url + "/api/snapshot", timeout=5).json()["snapshot"], 30, "a poll")


@contextmanager
def held_on_another_node(cluster: LocalCluster) -> Iterator[str]:
    """A classic queue on node 2 (declared through it) with PUBLISHED messages, PREFETCH of them held unacked by
    a consumer connected to node 3: the queue's counts are in node 2's plugin only, the channel in node 3's."""
    _, second, third = cluster.nodes
    queue = f"ackscope.test.plugins.{uuid.uuid4().hex[:8]}"
    publisher = pika.BlockingConnection(pika.URLParameters(second.amqp_url()))
    consumer = pika.BlockingConnection(pika.URLParameters(third.amqp_url()))
    try:
        channel = publisher.channel()
        channel.queue_declare(queue, durable=True)
        for _ in range(PUBLISHED):
            channel.basic_publish("", queue, b"held", pika.BasicProperties(delivery_mode=2))
        held = consumer.channel()
        held.basic_qos(prefetch_count=PREFETCH)
        delivered = []
        held.basic_consume(queue, lambda *args: delivered.append(args))
        wait_for(lambda: consumer.process_data_events(0.2) or len(delivered) == PREFETCH, 30,
                 "the consumer on node 3 to hold its prefetch")
        yield queue
    finally:
        consumer.close()
        publisher.channel().queue_delete(queue)
        publisher.close()


def each_nodes_plugin_is_read(cluster: LocalCluster, start_exporter) -> None:
    first, second, third = cluster.nodes
    with held_on_another_node(cluster) as queue:
        # One URL: the plugin of the node answering the management API only, and a note naming the others.
        one = start_exporter(first.management_url, source="prometheus", prometheus_url=first.prometheus_url,
                             interval=0.5, timeout=5.0)
        note = wait_for(lambda: next((n for n in snapshot(one.url)["notes"] if "is not read" in n), None), 30,
                        "the note naming the nodes whose plugin is not read")
        assert second.nodename in note and third.nodename in note and "--prometheus-url" in note
        assert value(scrape(one), "ackscope_queue_messages_ready", queue=queue) is None

        every = start_exporter(first.management_url, source="prometheus", interval=0.5, timeout=5.0,
                               prometheus_url=tuple(n.prometheus_url for n in cluster.nodes))
        wait_for(lambda: value(scrape(every), "ackscope_queue_messages_unacked", queue=queue) == PREFETCH, 30,
                 "the queue's counts from node 2's plugin")
        samples = scrape(every)
        assert value(samples, "ackscope_queue_messages_ready", queue=queue) == PUBLISHED - PREFETCH
        assert value(samples, "ackscope_queue_consumers", queue=queue) == 1
        seen = snapshot(every.url)
        assert not [n for n in seen["notes"] if "is not read" in n] and not seen["unread"]
        # The channel is known by its process id, which names node 3's.
        held = [c for c in seen["channels"] if c["messages_unacked"] == PREFETCH and queue in c["queues"]]
        assert len(held) == 1 and held[0]["prefetch_count"] == PREFETCH, seen["channels"]
        assert [c["queue"] for c in seen["consumers"] if c["channel"] == held[0]["name"]] == [queue]

        # An alarm only node 3 raises, and only node 3's plugin says: the nodes' list has none, statistics off.
        with memory_alarm(third):
            alarm = wait_for(lambda: finding_on(every.url, "memory-alarm", f"node {third.nodename}"), 30,
                             "memory-alarm naming node 3, from node 3's plugin")
            assert alarm["severity"] == "critical"
            assert finding_on(one.url, "memory-alarm", f"node {third.nodename}") is None  # node 3's plugin unread
        wait_for(lambda: finding_on(every.url, "memory-alarm", f"node {third.nodename}") is None, 30, "the alarm to clear")


def test_with_statistics_off_each_nodes_plugin_gives_its_queues_channels_and_alarms(
        statsoff_cluster: LocalCluster, start_exporter):
    each_nodes_plugin_is_read(statsoff_cluster, start_exporter)


def test_with_statistics_off_on_rabbitmq_4_each_nodes_plugin_gives_its_queues_channels_and_alarms(
        newest_statsoff_cluster: LocalCluster, start_exporter):
    assert newest_statsoff_cluster.nodes[0].api("GET", "/overview").json()["rabbitmq_version"].startswith("4.")
    each_nodes_plugin_is_read(newest_statsoff_cluster, start_exporter)
