"""Each metric family against real broker state: the workloads on-call engineers need to see through."""

from __future__ import annotations

import pika
import pytest
from helpers import scrape, value, wait_for_sample


def _publish(conn: pika.BlockingConnection, queue: str, count: int, persistent: bool = True) -> None:
    ch = conn.channel()
    props = pika.BasicProperties(delivery_mode=2 if persistent else 1)
    for _ in range(count):
        ch.basic_publish("", queue, b"payload", props)
    ch.close()


def test_manual_ack_consumer_with_prefetch_zero_holds_everything_unacked(broker, vhost, exporter, clients):
    producer = clients(broker, vhost, "producer")
    producer.channel().queue_declare("work", durable=True)
    _publish(producer, "work", 25)
    hoarder = clients(broker, vhost, "hoarder")
    hoarder.channel().basic_consume("work", on_message_callback=lambda *a: None)  # manual ack, no basic.qos

    wait_for_sample(exporter, "ackscope_channel_messages_unacked", 25, vhost=vhost, connection_name="hoarder")
    # The consumer list, and the queue's own counts, come a moment after the channels' statistics on a loaded
    # machine (a clean-clone run once scraped the queue without its unacked count yet): wait for them too.
    wait_for_sample(exporter, "ackscope_consumer_prefetch_count", 0, vhost=vhost, queue="work",
                    connection_name="hoarder")
    s = wait_for_sample(exporter, "ackscope_queue_messages_unacked", 25, vhost=vhost, queue="work")
    assert value(s, "ackscope_consumer_prefetch_count", vhost=vhost, queue="work", connection_name="hoarder") == 0
    assert value(s, "ackscope_channel_messages_unacked", vhost=vhost, connection_name="hoarder") == 25
    assert value(s, "ackscope_channel_prefetch_count", vhost=vhost, connection_name="hoarder") == 0
    assert value(s, "ackscope_channel_prefetch_utilisation", vhost=vhost, connection_name="hoarder") is None
    assert value(s, "ackscope_consumer_ack_required", vhost=vhost, queue="work", connection_name="hoarder") == 1
    assert value(s, "ackscope_channel_delivered_total", vhost=vhost, connection_name="hoarder") == 25
    assert value(s, "ackscope_channel_acked_total", vhost=vhost, connection_name="hoarder") == 0


def test_prefetch_ten_consumer_saturated_with_backlog_behind_it(broker, vhost, exporter, clients):
    producer = clients(broker, vhost, "producer")
    producer.channel().queue_declare("orders", durable=True)
    _publish(producer, "orders", 50)
    slow = clients(broker, vhost, "slow-worker").channel()
    slow.basic_qos(prefetch_count=10)
    slow.basic_consume("orders", on_message_callback=lambda *a: None)

    # The queue's consumer count comes with its statistics, and the consumer with the consumer list, either of
    # which may reach a poll after the channel's (CI once scraped between them).
    wait_for_sample(exporter, "ackscope_queue_consumers", 1, vhost=vhost, queue="orders")
    wait_for_sample(exporter, "ackscope_consumer_prefetch_count", 10, vhost=vhost, queue="orders",
                    connection_name="slow-worker")
    s = wait_for_sample(exporter, "ackscope_channel_prefetch_utilisation", 1.0, vhost=vhost,
                        connection_name="slow-worker")
    assert value(s, "ackscope_channel_messages_unacked", vhost=vhost, connection_name="slow-worker") == 10
    assert value(s, "ackscope_channel_prefetch_count", vhost=vhost, connection_name="slow-worker") == 10
    assert value(s, "ackscope_consumer_prefetch_count", vhost=vhost, queue="orders",
                 connection_name="slow-worker") == 10
    # The queue's figures come in its own statistics event, which may lag the channel's by an emission interval.
    s = wait_for_sample(exporter, "ackscope_queue_messages_ready", 40, vhost=vhost, queue="orders")
    assert value(s, "ackscope_queue_consumers", vhost=vhost, queue="orders") == 1


def test_auto_ack_consumer_is_marked_as_not_acknowledging(broker, vhost, exporter, clients):
    producer = clients(broker, vhost, "producer")
    producer.channel().queue_declare("events")
    _publish(producer, "events", 5, persistent=False)
    fire_and_forget = clients(broker, vhost, "auto-acker").channel()
    fire_and_forget.basic_consume("events", on_message_callback=lambda *a: None, auto_ack=True)

    wait_for_sample(exporter, "ackscope_consumer_ack_required", 0, vhost=vhost, queue="events",
                    connection_name="auto-acker")
    # The stats DB can list the consumer a moment before its channel's figures: wait for them, then they are 0.
    wait_for_sample(exporter, "ackscope_channel_messages_unacked", 0, vhost=vhost, connection_name="auto-acker")
    wait_for_sample(exporter, "ackscope_channel_delivered_total", 5, vhost=vhost, connection_name="auto-acker")


def test_confirm_mode_and_transactional_publishers_are_told_apart(broker, vhost, exporter, clients):
    setup = clients(broker, vhost, "setup").channel()
    setup.queue_declare("ledger", durable=True)
    confirming = clients(broker, vhost, "confirming-publisher").channel()
    confirming.confirm_delivery()
    for _ in range(20):
        confirming.basic_publish("", "ledger", b"x", pika.BasicProperties(delivery_mode=2))
    tx = clients(broker, vhost, "tx-publisher").channel()
    tx.tx_select()
    for _ in range(5):
        tx.basic_publish("", "ledger", b"x", pika.BasicProperties(delivery_mode=2))
    tx.tx_commit()
    plain = clients(broker, vhost, "fire-and-forget-publisher").channel()
    plain.basic_publish("", "ledger", b"x")

    wait_for_sample(exporter, "ackscope_channel_confirmed_total", 20, vhost=vhost, connection_name="confirming-publisher")
    # A channel's modes can come a poll after its counters on a loaded machine (a clean-clone run saw none).
    s = wait_for_sample(exporter, "ackscope_channel_transactional", 0, vhost=vhost,
                        connection_name="confirming-publisher")
    assert value(s, "ackscope_channel_confirmed_total", vhost=vhost, connection_name="confirming-publisher") == 20
    assert value(s, "ackscope_channel_confirm_mode", vhost=vhost, connection_name="confirming-publisher") == 1
    assert value(s, "ackscope_channel_transactional", vhost=vhost, connection_name="confirming-publisher") == 0
    assert value(s, "ackscope_channel_published_total", vhost=vhost, connection_name="confirming-publisher") == 20
    assert value(s, "ackscope_channel_messages_unconfirmed", vhost=vhost,
                 connection_name="confirming-publisher") == 0
    s = wait_for_sample(exporter, "ackscope_channel_published_total", 5, vhost=vhost, connection_name="tx-publisher")
    assert value(s, "ackscope_channel_transactional", vhost=vhost, connection_name="tx-publisher") == 1
    assert value(s, "ackscope_channel_confirm_mode", vhost=vhost, connection_name="tx-publisher") == 0
    s = wait_for_sample(exporter, "ackscope_channel_published_total", 1, vhost=vhost,
                        connection_name="fire-and-forget-publisher")
    assert value(s, "ackscope_channel_confirm_mode", vhost=vhost, connection_name="fire-and-forget-publisher") == 0
    assert value(s, "ackscope_channel_transactional", vhost=vhost, connection_name="fire-and-forget-publisher") == 0
    assert value(s, "ackscope_channel_user", vhost=vhost) is None  # user is a label, not a family
    assert {lbl["user"] for lbl, _ in s["ackscope_channel_confirm_mode"]} == {"guest"}


def test_unroutable_messages_are_counted_per_publishing_channel(broker, vhost, exporter, clients):
    ch = clients(broker, vhost, "lost-publisher").channel()
    ch.basic_publish("amq.direct", "no-such-binding", b"x", mandatory=True)
    ch.basic_publish("amq.direct", "no-such-binding", b"x")
    ch.basic_publish("amq.direct", "no-such-binding", b"x")

    s = wait_for_sample(exporter, "ackscope_channel_unroutable_dropped_total", 2, vhost=vhost,
                        connection_name="lost-publisher")
    assert value(s, "ackscope_channel_unroutable_returned_total", vhost=vhost, connection_name="lost-publisher") == 1


def test_requeued_delivery_is_counted_as_redelivered_on_channel_and_queue(broker, vhost, exporter, clients):
    ch = clients(broker, vhost, "requeuer").channel()
    ch.queue_declare("retry")
    ch.basic_publish("", "retry", b"x")
    for _ in range(3):
        method, _props, _body = ch.basic_get("retry")
        ch.basic_nack(method.delivery_tag, requeue=True)

    s = wait_for_sample(exporter, "ackscope_queue_redelivered_total", 2, vhost=vhost, queue="retry")
    assert value(s, "ackscope_queue_delivered_total", vhost=vhost, queue="retry") == 3
    # The broker emits a channel's statistics apart from its queues': one poll may see the queue's first.
    wait_for_sample(exporter, "ackscope_channel_redelivered_total", 2, vhost=vhost, connection_name="requeuer")


def test_heartbeat_is_exported_and_zero_when_disabled(broker, vhost, exporter, clients):
    clients(broker, vhost, "no-heartbeat", heartbeat=0)
    clients(broker, vhost, "with-heartbeat", heartbeat=30)

    wait_for_sample(exporter, "ackscope_connection_heartbeat_seconds", 0, vhost=vhost, connection_name="no-heartbeat")
    # A connection's state can come a poll after its heartbeat on a loaded machine (a clean-clone run saw none).
    wait_for_sample(exporter, "ackscope_connection_blocked", 0, vhost=vhost, connection_name="no-heartbeat")
    s = wait_for_sample(exporter, "ackscope_connection_blocked", 0, vhost=vhost, connection_name="with-heartbeat")
    assert value(s, "ackscope_connection_heartbeat_seconds", vhost=vhost, connection_name="with-heartbeat") == 30
    assert value(s, "ackscope_connection_blocked", vhost=vhost, connection_name="no-heartbeat") == 0
    assert value(s, "ackscope_connection_blocked", vhost=vhost, connection_name="with-heartbeat") == 0


@pytest.mark.parametrize("queue_type", ["classic", "quorum", "stream"])
def test_queues_of_each_type_are_labelled_with_their_type(broker, vhost, exporter, clients, queue_type):
    ch = clients(broker, vhost, "declarer").channel()
    ch.confirm_delivery()
    ch.queue_declare(f"{queue_type}-q", durable=True, arguments={"x-queue-type": queue_type})
    for _ in range(7):
        ch.basic_publish("", f"{queue_type}-q", b"x", pika.BasicProperties(delivery_mode=2))

    wait_for_sample(exporter, "ackscope_queue_messages_ready", 7, vhost=vhost, queue=f"{queue_type}-q")
    # A queue's consumer count comes with its statistics, a moment after its counts on a loaded machine.
    s = wait_for_sample(exporter, "ackscope_queue_consumers", 0, vhost=vhost, queue=f"{queue_type}-q")
    labels = next(lbl for lbl, _ in s["ackscope_queue_messages_ready"] if lbl["queue"] == f"{queue_type}-q")
    assert labels["type"] == queue_type and labels["durable"] == "true"
    assert value(s, "ackscope_queue_messages_ready", vhost=vhost, queue=f"{queue_type}-q") == 7
    persistent = value(s, "ackscope_queue_messages_persistent", vhost=vhost, queue=f"{queue_type}-q")
    if queue_type == "stream":
        assert persistent is None, "streams report no persistent count: the series must be absent, not 0"
    else:
        assert persistent == 7


def test_node_overview_and_broker_info_are_exported(broker, vhost, exporter, clients):
    ch = clients(broker, vhost, "any").channel()
    ch.queue_declare("q")
    ch.basic_publish("", "q", b"x")

    s = wait_for_sample(exporter, "ackscope_overview_published_total", lambda v: v >= 1)
    node = broker.nodename
    assert value(s, "ackscope_node_running", node=node) == 1
    assert value(s, "ackscope_node_memory_used_bytes", node=node) > 0
    assert value(s, "ackscope_node_memory_limit_bytes", node=node) > value(s, "ackscope_node_memory_used_bytes",
                                                                           node=node)
    assert value(s, "ackscope_node_memory_alarm", node=node) == 0
    assert value(s, "ackscope_node_disk_free_alarm", node=node) == 0
    assert 0 < value(s, "ackscope_node_file_descriptors_used", node=node) < value(
        s, "ackscope_node_file_descriptors_limit", node=node)
    assert value(s, "ackscope_broker_info", rabbitmq_version="3.10.8") == 1
    assert value(s, "ackscope_up") == 1
    assert 0 < value(s, "ackscope_poll_duration_seconds") < 2
    assert 0 <= value(s, "ackscope_snapshot_age_seconds") < 5


def test_memory_alarm_blocks_publisher_connection(spare_broker, start_exporter, clients):
    # On a node of its own: the alarm blocks every publisher of the node, and is critical to every rule reading it.
    exporter = start_exporter(spare_broker.management_url)
    params_name = "blocked-publisher"
    conn = clients(spare_broker, "/", params_name)
    ch = conn.channel()
    ch.queue_declare("held")
    spare_broker.ctl("set_vm_memory_high_watermark", "absolute", "1")
    try:
        ch.basic_publish("", "held", b"x")  # the broker blocks a connection when it next publishes
        wait_for_sample(exporter, "ackscope_connection_blocked", 1, vhost="/", connection_name=params_name)
        # The node's alarm comes in the node's own statistics, which may reach a poll after the connection's state.
        wait_for_sample(exporter, "ackscope_node_memory_alarm", 1, node=spare_broker.nodename)
    finally:
        spare_broker.ctl("set_vm_memory_high_watermark", "0.4")
    wait_for_sample(exporter, "ackscope_node_memory_alarm", 0, node=spare_broker.nodename)


def test_every_channel_and_consumer_series_names_the_client_connection(broker, vhost, exporter, clients):
    ch = clients(broker, vhost, "billing-service").channel()
    ch.queue_declare("invoices")
    ch.basic_consume("invoices", on_message_callback=lambda *a: None)

    s = wait_for_sample(exporter, "ackscope_consumer_prefetch_count", 0, vhost=vhost, queue="invoices")
    for name, series in s.items():
        if name.startswith(("ackscope_channel_", "ackscope_consumer_")):
            for labels, _ in series:
                assert labels["connection_name"] == "billing-service", (name, labels)
    assert scrape(exporter)  # still answering
