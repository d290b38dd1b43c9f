"""The synthetic probes against a real broker: latency per queue type, fsync batching, nacks, returns,
requeues, duplicates, the event log, and the failures an on-call engineer meets."""

from __future__ import annotations

import time
from dataclasses import replace

import pika
import pika.exceptions
import pyarrow.dataset as ds
import pytest
import requests
from helpers import value, wait_for
from probe_helpers import probe_config, probe_samples, probe_value, quick, running_probes, settled_since, wait_probe
from snapshot_builders import snapshot

from ackscope.diagnosis.rules import Context, evaluate
from ackscope.model.schemas import EVENT_KINDS as KINDS
from ackscope.model.schemas import EVENTS as SCHEMA
from ackscope.probes.message import ProbeMessage
from ackscope.probes.targets import DEFAULT_TARGETS, EXCHANGE, REJECT_PUBLISH
from ackscope.workloads.private_broker import ADMIN_PASSWORD, ADMIN_USER


def _quantile(samples, name: str, target: str, q: float) -> float:
    """The upper bound of the bucket holding quantile q (what histogram_quantile would bracket)."""
    buckets = sorted((float(lbls["le"]), v) for lbls, v in samples[name + "_bucket"] if lbls["target"] == target)
    total = buckets[-1][1]
    return next(le for le, count in buckets if count >= q * total)


def test_confirm_and_delivery_latency_are_measured_for_each_queue_type(broker, vhost):
    targets = tuple(quick(t.name, t.queue_type, t.persistent) for t in DEFAULT_TARGETS)
    with running_probes(probe_config(broker, vhost, targets)) as probes:
        for t in targets:
            wait_probe(probes, "ackscope_probe_confirm_latency_seconds_count", t.name, 40)
            wait_probe(probes, "ackscope_probe_delivery_latency_seconds_count", t.name, 40)
        s = probe_samples(probes)
    for t in targets:
        labels = dict(target=t.name, queue_type=t.queue_type, persistent="true" if t.persistent else "false")
        assert value(s, "ackscope_probe_up", **labels) == 1
        assert value(s, "ackscope_probe_published_total", **labels) >= 40
        assert value(s, "ackscope_probe_lost_total", **labels) == 0
        assert value(s, "ackscope_probe_nacked_total", **labels) == 0
        assert value(s, "ackscope_probe_consumer_prefetch", **labels) == t.prefetch
        p50 = _quantile(s, "ackscope_probe_confirm_latency_seconds", t.name, 0.5)
        assert 0 < p50 <= 1.0, f"{t.name}: confirm p50 within {p50}s"


def test_a_burst_of_persistent_messages_on_a_classic_queue_is_confirmed_in_batches(broker, vhost):
    target = quick("classic-persistent", burst_size=300)
    with running_probes(probe_config(broker, vhost, (target,))) as probes:
        wait_probe(probes, "ackscope_probe_confirmed_total", target.name, 600)
        s = probe_samples(probes)
    frames = value(s, "ackscope_probe_confirm_batch_size_count", target=target.name)
    settled = value(s, "ackscope_probe_confirm_batch_size_sum", target=target.name)
    single = value(s, "ackscope_probe_confirm_batch_size_bucket", target=target.name, le="1.0")
    assert settled >= 600
    assert frames < settled, "every confirm frame settled one message: no batching seen"
    assert single < frames, "no basic.ack with multiple=true settled more than one message"


def test_overflowing_reject_publish_queue_is_counted_as_nacks_not_losses(broker, vhost):
    target = replace(REJECT_PUBLISH, burst_interval=2.0)
    with running_probes(probe_config(broker, vhost, (target,))) as probes:
        nacked = wait_probe(probes, "ackscope_probe_nacked_total", target.name, 10)
        wait_probe(probes, "ackscope_probe_delivered_total", target.name, 5)
        assert probe_value(probes, "ackscope_probe_lost_total", target.name) == 0
        assert probe_value(probes, "ackscope_probe_confirmed_total", target.name) > 0
    assert nacked >= 10


def test_unroutable_mandatory_publishes_are_counted_as_returns_and_the_queue_comes_back(broker, vhost):
    # No bursts and no requeues of its own: a message the probe requeues into a queue deleted at that moment is
    # lost for real, and this test is about returns.
    target = quick("classic-persistent", burst_size=0, requeue_share=0.0)
    with running_probes(probe_config(broker, vhost, (target,))) as probes:
        wait_probe(probes, "ackscope_probe_delivered_total", target.name, 10)
        # Unbind first: from then on publishes match no binding and come back. Deleting the queue straight away
        # would race with a publish already routed to it: the broker confirms such a message when its queue is
        # deleted (CI saw one, counted lost, rightly). Once a return is seen, what was routed before has reached
        # the queue; delete it when it holds nothing, and the probe declares and binds it again.
        _unbind(broker, vhost, target.queue)
        wait_probe(probes, "ackscope_probe_returned_total", target.name, 1)
        wait_for(lambda: _delete_if_empty(broker, vhost, target.queue), what="the probe queue empty, and deleted")
        wait_for(lambda: _consumers(broker, vhost, target.queue) == 1,
                 what="the probe to declare its queue again and consume from it")
        back = time.monotonic()
        delivered = probe_value(probes, "ackscope_probe_delivered_total", target.name)
        wait_probe(probes, "ackscope_probe_delivered_total", target.name, delivered + 10)
        # A returned message has nothing to deliver: none may wait (and, past its deadline, count as lost).
        wait_for(lambda: settled_since(probes, back), timeout=30, what="no returned message awaiting delivery")
        assert probe_value(probes, "ackscope_probe_lost_total", target.name) == 0


def _unbind(broker, vhost: str, queue: str) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(broker.amqp_url(vhost)))
    try:
        conn.channel().queue_unbind(queue, EXCHANGE, routing_key=queue)
    finally:
        conn.close()


def _delete_if_empty(broker, vhost: str, queue: str) -> bool:
    """queue.delete with if-empty (atomic in the broker): False while the queue holds ready messages."""
    conn = pika.BlockingConnection(pika.URLParameters(broker.amqp_url(vhost)))
    try:
        conn.channel().queue_delete(queue, if_empty=True)
        return True
    except pika.exceptions.ChannelClosedByBroker as e:
        assert e.reply_code == 406, e  # PRECONDITION_FAILED: not empty right now
        return False
    finally:
        if conn.is_open:
            conn.close()


def _consumers(broker, vhost: str, queue: str) -> int | None:
    r = requests.get(f"{broker.management_url}/api/queues/{vhost}/{queue}", auth=(ADMIN_USER, ADMIN_PASSWORD),
                     timeout=5)
    return r.json().get("consumers") if r.status_code == 200 else None


def test_requeued_deliveries_come_back_redelivered_and_are_not_duplicates(broker, vhost):
    target = quick("classic-persistent", requeue_share=0.3)
    with running_probes(probe_config(broker, vhost, (target,))) as probes:
        requeued = wait_probe(probes, "ackscope_probe_requeued_total", target.name, 10)
        wait_probe(probes, "ackscope_probe_redelivered_total", target.name, requeued)
        wait_probe(probes, "ackscope_probe_redelivery_latency_seconds_count", target.name, requeued)
        assert probe_value(probes, "ackscope_probe_duplicates_total", target.name) == 0


def test_a_second_copy_of_a_delivered_message_is_a_duplicate_and_out_of_order_critical_with_one_consumer(broker,
                                                                                                         vhost):
    target = quick("classic-persistent")
    with running_probes(probe_config(broker, vhost, (target,))) as probes:
        wait_probe(probes, "ackscope_probe_delivered_total", target.name, 20)
        # Message 2 published again, after 20 and more were delivered: its copy is not flagged redelivered.
        copy = ProbeMessage(probes.runner.run_id, target.name, 2, time.monotonic_ns()).encode()
        conn = pika.BlockingConnection(pika.URLParameters(broker.amqp_url(vhost)))
        conn.channel().basic_publish(EXCHANGE, target.queue, copy, pika.BasicProperties(delivery_mode=2))
        conn.close()
        assert wait_probe(probes, "ackscope_probe_duplicates_total", target.name, 1) == 1
        assert wait_probe(probes, "ackscope_probe_out_of_order_first_total", target.name, 1) == 1
        stats = probes.stats().targets
    [f] = [f for f in evaluate(Context(snapshot(), probes=stats)) if f.rule == "probe-out-of-order"]
    assert f.severity == "critical" and f.object == f"probe {target.name}"
    assert f.evidence["out_of_order_first"] == 1 and f.evidence["consumers"] == 1


def test_event_log_is_parquet_with_the_documented_schema(broker, vhost, tmp_path):
    target = quick("quorum", "quorum", requeue_share=0.2)
    with running_probes(probe_config(broker, vhost, (target,), data_dir=str(tmp_path))) as probes:
        wait_probe(probes, "ackscope_probe_requeued_total", target.name, 3)
        wait_probe(probes, "ackscope_probe_delivered_total", target.name, 30)
    files = sorted((tmp_path / "events").rglob("*.parquet"))
    assert files and all(f.parent.name.startswith("date=") for f in files)
    assert not [p for p in (tmp_path / "events").rglob("*") if p.name.startswith(".")]  # no half-written files
    table = ds.dataset(tmp_path / "events", format="parquet", partitioning="hive").to_table(
        columns=SCHEMA.names)
    assert table.schema.remove_metadata() == SCHEMA.remove_metadata()
    rows = table.to_pylist()
    kinds = {r["kind"] for r in rows}
    assert {"published", "confirmed", "delivered", "acked", "requeued"} <= kinds <= set(KINDS)
    assert {r["run_id"] for r in rows} == {probes.runner.run_id}
    confirmed = [r for r in rows if r["kind"] == "confirmed"]
    assert all(r["latency_s"] > 0 and r["batch_size"] >= 1 for r in confirmed)
    delivered = [r for r in rows if r["kind"] == "delivered"]
    assert all(r["redelivered"] in (True, False) and r["latency_s"] > 0 for r in delivered)
    assert any(r["redelivered"] for r in delivered)
    assert all(r["queue_type"] == "quorum" and r["persistent"] for r in rows)


def test_a_stream_target_from_the_config_measures_its_latencies(broker, vhost):
    target = quick("events", "stream")
    with running_probes(probe_config(broker, vhost, (target,))) as probes:
        wait_probe(probes, "ackscope_probe_confirm_latency_seconds_count", target.name, 20)
        wait_probe(probes, "ackscope_probe_delivery_latency_seconds_count", target.name, 20)
        s = probe_samples(probes)
    assert value(s, "ackscope_probe_up", target="events", queue_type="stream") == 1
    assert value(s, "ackscope_probe_requeued_total", target="events") == 0  # a stream has no requeue


def test_probe_user_with_permissions_only_on_ackscope_probe_resources_is_enough(broker, vhost):
    user, password = f"probe-{vhost}", "probe-secret"
    broker.api("PUT", f"/users/{user}", json={"password": password, "tags": ""})
    pattern = r"^ackscope\.probe\."
    broker.api("PUT", f"/permissions/{vhost}/{user}", json={"configure": pattern, "write": pattern, "read": pattern})
    try:
        targets = tuple(quick(t.name, t.queue_type, t.persistent) for t in DEFAULT_TARGETS)
        url = broker.amqp_url(vhost, user=user, password=password)
        with running_probes(probe_config(broker, vhost, targets, url=url)) as probes:
            for t in targets:
                wait_probe(probes, "ackscope_probe_delivered_total", t.name, 10)
                assert probe_value(probes, "ackscope_probe_up", t.name) == 1
        # And nothing else: the same user cannot declare a queue outside the probe's namespace.
        conn = pika.BlockingConnection(pika.URLParameters(url))
        with pytest.raises(pika.exceptions.ChannelClosedByBroker, match="ACCESS_REFUSED"):
            conn.channel().queue_declare("orders")
        conn.close()
    finally:
        broker.api("DELETE", f"/users/{user}")
