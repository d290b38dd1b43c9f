"""The rules on the clients people use, configured as their documentation suggests and none of them naming
its connection: Celery (py-amqp), aio-pika, Node's amqplib, the librabbitmq-c tools and the Java client, on
the suite's own broker. Each finding that must fire fires on the right object, naming the client by its
library, address and user; the healthy configurations raise nothing at warning or above."""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Iterator

import pytest
import requests
from client_processes import NODE_CLIENT, Clients, tool
from helpers import CHANNEL, findings, fires, identity, only_vhost, quiet, scrape, value, wait_for, window_filled

from ackscope.diagnosis.thresholds import Thresholds
from ackscope.workloads.private_broker import ADMIN_PASSWORD, ADMIN_USER

WINDOW = 20.0  # seconds: the rate-like rules' window, short so that a test sees it fill


@pytest.fixture
def watching(broker, vhost, start_exporter):
    return start_exporter(broker.management_url, interval=0.5, thresholds=Thresholds(window_seconds=WINDOW),
                          selection=only_vhost(vhost))


@pytest.fixture
def processes(broker, vhost, tmp_path) -> Iterator[Clients]:
    with Clients(broker.amqp_url(vhost), tmp_path) as running:
        yield running


def declare(broker, vhost: str, queue: str) -> None:
    broker.api("PUT", f"/queues/{vhost}/{queue}", json={"durable": True, "arguments": {"x-expires": 600_000}})


def publish(broker, vhost: str, queue: str, count: int) -> None:
    for i in range(count):
        broker.api("POST", f"/exchanges/{vhost}/amq.default/publish",
                   json={"routing_key": queue, "payload": f"job {i}", "payload_encoding": "string",
                         "properties": {"delivery_mode": 2}})


# -- Celery (kombu, py-amqp) -----------------------------------------------------------------------------
def test_celery_defaults_its_producer_without_confirms_is_a_warning_its_events_and_control_are_info(broker, vhost,
                                                                                                   watching, processes):
    # A web app's producer with Celery's defaults (confirm_publish off): 0.3 persistent tasks a second into the
    # durable queue "celery". Its worker, with its defaults, publishes heartbeat events every 2 s into its own
    # auto-delete gossip queue, and answers control commands into the caller's auto-delete reply queue.
    processes.celery_worker()
    wait_for(lambda: any(c["name"] == "celery" and c.get("consumers") for c in
                         broker.api("GET", f"/queues/{vhost}").json()), timeout=60, what="the worker to consume")
    processes.start(sys.executable, "celery_app.py", "fine", "0")
    window_filled(watching, WINDOW)
    for _ in range(3):
        processes.run(sys.executable, "-m", "celery", "-A", "celery_app", "inspect", "ping", "--timeout=2")

    def judged():
        processes.check()
        found = [f for f in findings(watching) if f["rule"] == "publisher-without-confirms"]
        warned = [f for f in found if f["severity"] != "info"]
        events = [f for f in found if f["severity"] == "info" and "celeryev" in json.dumps(f["evidence"])]
        return (warned, events, found) if warned and events else None
    warned, events, found = wait_for(judged, 60, lambda: "the producer warned and the events info (findings: "
                                     f"{[(f['severity'], f['object'], f['evidence']) for f in findings(watching)]})")
    # One warning: the producer's channel, into the durable queue; the worker's plumbing is info.
    [producer] = warned
    assert [(q["queue"], q["durable"]) for q in producer["evidence"]["at_stake"]] == [("celery", True)]
    assert producer["evidence"]["publish_rate"] < 1 and identity("py-amqp").search(producer["identity"])
    assert all(f["severity"] == "info" for f in found if f is not producer)
    # The producer's idle-looking connection without heartbeat publishes at stake: a warning, not info.
    connection = producer["object"].removeprefix("channel ").rsplit(" (", 1)[0]
    [heartbeat] = [f for f in findings(watching) if f["rule"] == "heartbeat-disabled"
                   and f["object"] == f"connection {connection}"]
    assert heartbeat["severity"] == "warning" and heartbeat["evidence"]["publishes_at_stake"] is True


def test_celery_acks_late_with_multiplier_1_and_a_backlog_is_prefetch_one(broker, vhost, watching, processes):
    # One process, so that multiplier 1 makes a channel-wide QoS of 1 (Celery's prefetch is multiplier
    # times concurrency, which defaults to the CPU count).
    processes.celery_worker("acks-late", "--concurrency=1")
    processes.run(sys.executable, "celery_app.py", "slow", "240", env={"CELERY_MODE": "acks-late"})
    f = fires(watching, processes, "prefetch-one", CHANNEL, "py-amqp")
    assert f["evidence"]["queue"] == "celery" and f["evidence"]["ready"] >= 100


def test_celery_task_that_rejects_with_requeue_is_a_requeue_loop_naming_the_worker(broker, vhost, watching,
                                                                                     processes):
    processes.celery_worker()
    processes.run(sys.executable, "celery_app.py", "rejects", "1")
    f = fires(watching, processes, "requeue-loop", "queue celery", "py-amqp")
    assert f["evidence"]["redeliver_rate"] >= 1


# -- aio-pika --------------------------------------------------------------------------------------------
def test_aio_pika_process_with_requeue_on_a_failing_handler_is_a_requeue_loop(broker, vhost, watching, processes):
    processes.start(sys.executable, "aio_pika_client.py", "process-requeue", "jobs")
    fires(watching, processes, "requeue-loop", "queue jobs", "aiormq")


def test_aio_pika_rejecting_into_a_dead_letter_target_that_is_deleted_is_dead_lettering_stuck(broker, vhost, watching,
                                                                                              processes):
    # At-least-once dead-lettering (overflow reject-publish, which it needs) into a fanout exchange's queue: while
    # the queue is there every message goes through; once it is deleted, nothing routes, and the quorum queue keeps
    # each dead-lettered message unconfirmed.
    broker.api("PUT", f"/exchanges/{vhost}/dlx", json={"type": "fanout", "durable": True})
    broker.api("PUT", f"/queues/{vhost}/dead", json={"durable": True})
    broker.api("POST", f"/bindings/{vhost}/e/dlx/q/dead", json={"routing_key": ""})
    broker.api("PUT", f"/queues/{vhost}/orders", json={"durable": True, "arguments": {
        "x-queue-type": "quorum", "x-dead-letter-exchange": "dlx", "x-dead-letter-strategy": "at-least-once",
        "x-overflow": "reject-publish"}})
    processes.start(sys.executable, "aio_pika_client.py", "process-reject", "orders")
    wait_for(lambda: broker.api("GET", f"/queues/{vhost}/dead").json().get("messages", 0) >= 10, timeout=30,
             what="the rejected messages dead-lettered into queue dead")
    assert not [f for f in findings(watching) if f["rule"] == "dead-lettering-stuck"]
    broker.api("DELETE", f"/queues/{vhost}/dead")
    f = fires(watching, processes, "dead-lettering-stuck", "queue orders", "aiormq")
    assert f["severity"] == "warning" and "exchange 'dlx'" in f["evidence"]["dead_letter_target"]
    assert f["evidence"]["why"] == ["exchange 'dlx' has no bindings: it routes them nowhere"]  # its queue deleted
    assert f["evidence"]["dead_lettered_held"] >= f["evidence"]["held_earlier"] > 0


def test_a_named_and_an_unnamed_client_on_one_queue_keep_their_names_and_no_name_is_invented(broker, vhost, watching,
                                                                                            processes):
    # Two consumers failing every message on one queue: aio-pika named as its documentation names a connection,
    # and amqplib sending its connection_name void (null), which the management API shows as "undefined".
    processes.start(sys.executable, "aio_pika_client.py", "process-requeue", "jobs",
                    env={"CONNECTION_NAME": "billing-worker"})
    processes.start(shutil.which("node") or "node", str(NODE_CLIENT), "nack-requeue", "jobs",
                    env={"VOID_CONNECTION_NAME": "1"})
    void = wait_for(lambda: next((c for c in broker.api("GET", f"/vhosts/{vhost}/connections").json()
                                  if c["client_properties"].get("connection_name") == "undefined"), None), 30,
                    "amqplib's void name shown as 'undefined'")
    assert "user_provided_name" not in void  # the broker took no name from it

    def looping():
        processes.check()
        return next((f for f in findings(watching) if f["rule"] == "requeue-loop" and f["object"] == "queue jobs"
                     and "billing-worker" in f["identity"] and identity("amqplib").search(f["identity"])), None)
    f = wait_for(looping, 60, "requeue-loop on queue jobs naming both consumers")
    # The label holds the one name given; the identity names the other by library, address and user.
    assert f["connection_name"] == "billing-worker" and "amqplib" in f["client"] and "aiormq" in f["client"]
    samples = scrape(watching)
    names = {labels["connection_name"] for family in samples.values() for labels, _ in family
             if labels.get("vhost") == vhost and "connection_name" in labels}
    assert names == {"billing-worker", ""}, names
    assert "undefined" not in requests.get(watching.url + "/metrics", timeout=5).text
    assert "undefined" not in json.dumps(findings(watching))


def test_aio_pika_default_confirming_publisher_and_consumer_raise_nothing(broker, vhost, watching, processes):
    processes.start(sys.executable, "aio_pika_client.py", "confirming-publisher", "orders")
    window_filled(watching, WINDOW)
    quiet(watching, processes)


# -- Node's amqplib --------------------------------------------------------------------------------------
def test_amqplib_without_prefetch_holding_messages_is_prefetch_unlimited(broker, vhost, watching, processes):
    declare(broker, vhost, "work")
    publish(broker, vhost, "work", 30)
    processes.amqplib("unlimited", "work")
    named = fires(watching, processes, "prefetch-unlimited", CHANNEL, "amqplib")
    # A poll may see the channel before its deliveries are counted (info: it holds nothing yet); then the 30.
    f = wait_for(lambda: next((g for g in findings(watching) if g["rule"] == "prefetch-unlimited"
                               and g["object"] == named["object"] and g["severity"] == "warning"), None), 30,
                 "prefetch-unlimited at warning once amqplib's 30 deliveries are counted")
    assert f["evidence"]["unacked"] == 30


def test_amqplib_prefetch_10_with_two_consumers_on_one_channel_sees_the_full_one(broker, vhost, watching, processes):
    declare(broker, vhost, "busy")
    publish(broker, vhost, "busy", 60)
    processes.amqplib("two-consumers", "busy")
    f = fires(watching, processes, "prefetch-saturated", CHANNEL, "amqplib")
    assert f["evidence"]["queue"] == "busy" and f["evidence"]["prefetch_limit"] == 10
    assert f["evidence"]["unacked"] == 10 and f["evidence"]["ready"] == 50


@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
def test_amqplib_consumer_that_stops_on_stamped_messages_is_messages_waiting_with_where_the_age_comes_from(
        broker, vhost, start_exporter, processes, queue_type):
    # A classic queue reports its head message's timestamp, which amqplib's publisher set; a quorum queue reports
    # none (rabbitmq-server#6813): its age is the bound its history gives, said to be inferred.
    watching = start_exporter(broker.management_url, interval=0.5, selection=only_vhost(vhost),
                              thresholds=Thresholds(oldest_message_seconds=5))
    broker.api("PUT", f"/queues/{vhost}/waiting", json={"durable": True, "arguments": {"x-queue-type": queue_type}})
    processes.amqplib("stamped-stuck", "waiting")
    f = fires(watching, processes, "messages-waiting", "queue waiting", "amqplib")
    assert f["evidence"]["oldest_message_age_s"] >= 5 and f["evidence"]["consumers"] == 1
    assert f["evidence"]["age_from"].startswith("the head message's timestamp" if queue_type == "classic"
                                                else "inferred")
    source = "timestamp" if queue_type == "classic" else "inferred"
    assert value(scrape(watching), "ackscope_queue_oldest_message_age_seconds", vhost=vhost, queue="waiting",
                 source=source) >= 5


def test_amqplib_plain_channel_publishing_is_without_confirms_and_a_confirm_channel_is_not(broker, vhost,
                                                                                         watching, processes):
    processes.amqplib("confirm-publisher", "safe")
    processes.amqplib("plain-publisher", "risky")
    f = fires(watching, processes, "publisher-without-confirms", CHANNEL, "amqplib")
    window_filled(watching, WINDOW)
    mine = [g for g in findings(watching) if g["rule"] == "publisher-without-confirms"]
    assert [(g["object"], g["severity"]) for g in mine] == [(f["object"], "warning")]  # only the plain one


# -- librabbitmq-c tools ---------------------------------------------------------------------------------
@pytest.fixture
def amqp_tools(broker, vhost) -> list[str]:
    """The tools' connection options. Their --authfile would keep the password off the command line, but
    Debian's 0.11.0 refuses every file ("Malformed auth file (missing username)"); this is the suite's
    throwaway broker and its guest account."""
    return ["--server=127.0.0.1", f"--port={broker.ports.amqp}", f"--vhost={vhost}", f"--username={ADMIN_USER}",
            f"--password={ADMIN_PASSWORD}"]


def test_amqp_consume_defaults_hold_the_backlog_unlimited_and_without_heartbeat(broker, vhost, watching, processes,
                                                                              amqp_tools):
    declare(broker, vhost, "tasks")
    publish(broker, vhost, "tasks", 40)
    processes.start(tool("amqp-consume"), *amqp_tools, "--queue=tasks", "sleep", "30", ready=False)
    f = fires(watching, processes, "prefetch-unlimited", CHANNEL, "rabbitmq-c")
    assert f["evidence"]["queue"] == "tasks"


def test_amqp_consume_no_ack_is_an_auto_ack_consumer(broker, vhost, watching, processes, amqp_tools):
    declare(broker, vhost, "firehose")
    processes.start(tool("amqp-consume"), *amqp_tools, "--queue=firehose", "--no-ack", "cat", ready=False)
    f = fires(watching, processes, "auto-ack-consumer", CHANNEL, "rabbitmq-c")
    assert f["evidence"]["queue"] == "firehose"


def test_amqp_get_in_a_loop_is_polling_not_nobody_consuming(broker, vhost, watching, processes, amqp_tools):
    declare(broker, vhost, "polled")
    publish(broker, vhost, "polled", 150)
    loop = f"while true; do {tool('amqp-get')} {' '.join(amqp_tools)} --queue=polled >/dev/null; sleep 0.5; done"
    processes.start("bash", "-c", loop, ready=False)
    f = wait_for(lambda: next((g for g in findings(watching) if g["rule"] == "queue-polled"), None), timeout=60,
                 what="queue-polled on queue polled")
    assert f["object"] == "queue polled" and f["severity"] == "warning" and f["evidence"]["gets_without_ack"] > 0
    assert not [g for g in findings(watching) if g["rule"] == "no-consumers-backlog"]


# -- the Java client -------------------------------------------------------------------------------------
def test_java_transactional_publisher_is_found(broker, vhost, watching, processes):
    processes.java_client("tx-publisher", "ledger")
    fires(watching, processes, "transactional-publisher", CHANNEL, "RabbitMQ")


def test_java_qos_after_consume_is_unlimited_and_exports_no_utilisation(broker, vhost, watching, processes):
    declare(broker, vhost, "late")
    publish(broker, vhost, "late", 25)
    processes.java_client("qos-after-consume", "late")
    first = fires(watching, processes, "prefetch-unlimited", CHANNEL, "RabbitMQ")
    # The finding may come a poll before the broker's statistics count the deliveries (seen under load: 0).
    f = wait_for(lambda: next((g for g in findings(watching) if g["rule"] == "prefetch-unlimited"
                               and g["object"] == first["object"] and g["evidence"]["unacked"] == 25), None), 30,
                 lambda: f"the 25 deliveries counted unacked (last: {first['evidence']})")
    samples = scrape(watching)
    channel = f["object"].removeprefix("channel ")
    assert value(samples, "ackscope_channel_prefetch_count", channel=channel, client="RabbitMQ 5.0.0") == 10
    assert value(samples, "ackscope_channel_prefetch_utilisation", channel=channel) is None  # nothing binds it
