"""Issue 55's field cases of messages the broker removes, side by side on one node of 3.10 and of the newest 4.x,
with real pika clients: a quorum queue dead-lettering through the default exchange is never said to drop (K1); the
nodes' drop counters are blamed only on a queue whose settings can make them, and are said unattributed where
none or several could (K2); a length limit destroying confirmed messages is critical and names their publisher
(K6). A healthy client beside them (confirms, manual acks, a prefetch) is named by nothing at warning or above."""

from __future__ import annotations

from collections.abc import Iterator

import pika
import pytest
from helpers import findings, matrix_release, only_vhost, own_vhost, polls_seen, private_broker, wait_for
from pika.exceptions import NackError

from ackscope.diagnosis.thresholds import Thresholds
from ackscope.workloads.private_broker import LocalBroker
from ackscope.workloads.rabbitmq_release import Release

WINDOW = 30.0  # the rules' window: long enough to hold each case, short enough to see it fill
PERSISTENT = pika.BasicProperties(delivery_mode=2)


@pytest.fixture(scope="module", params=["3.10", "newest"])
def release(request) -> Release:
    return matrix_release(request.param)


@pytest.fixture(scope="module")
def release_broker(release) -> Iterator[LocalBroker]:
    """One node per release, shared by the module's tests, each in a vhost of its own."""
    with private_broker(f"ackscope-fld-{release.name.replace('.', '')}", release=release) as node:
        yield node


def _connect(node: LocalBroker, vhost: str, name: str) -> pika.BlockingConnection:
    params = pika.URLParameters(node.amqp_url(vhost))
    params.client_properties = {"connection_name": name}
    return pika.BlockingConnection(params)


def _confirmed(channel, queue: str, count: int) -> int:
    """Publish `count` persistent messages into `queue` through the default exchange, waiting for each confirm;
    how many the broker nacked."""
    nacked = 0
    for i in range(count):
        try:
            channel.basic_publish("", queue, f"m{i}".encode(), PERSISTENT)
        except NackError:
            nacked += 1
    return nacked


def _reject_until_gone(channel, queue: str, bound: int = 200) -> None:
    """Fetch and reject with requeue until the queue's delivery limit has removed every message."""
    for _ in range(bound):
        method, _, _ = channel.basic_get(queue)
        if method is None:
            return
        channel.basic_reject(method.delivery_tag, requeue=True)
    raise AssertionError(f"{queue} still held messages after {bound} rejects")


def _healthy(node: LocalBroker, vhost: str) -> None:
    """A client doing everything right: confirms, persistent messages into a durable queue, a consumer with a
    prefetch acking each delivery."""
    with _connect(node, vhost, "fld-healthy") as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare("fld.healthy", durable=True)
        assert _confirmed(ch, "fld.healthy", 20) == 0
        ch.basic_qos(prefetch_count=10)
        got = 0
        for method, _, _ in ch.consume("fld.healthy", inactivity_timeout=10):
            assert method is not None, "the healthy consumer got fewer than 20 deliveries"
            ch.basic_ack(method.delivery_tag)
            got += 1
            if got == 20:
                break
        ch.cancel()


def _at_or_above_warning(found: list[dict], name: str) -> list[dict]:
    return [f for f in found if f["severity"] in ("warning", "critical") and
            (name in f["connection_name"] or name in f["identity"] or name in f["object"])]


def test_a_dead_letter_target_through_the_default_exchange_a_drop_at_the_limit_and_a_length_limit_side_by_side(
        release_broker, start_exporter):
    node = release_broker
    with own_vhost(node, "fld") as vhost:
        exporter = start_exporter(node.management_url, interval=0.5, selection=only_vhost(vhost),
                                  thresholds=Thresholds(window_seconds=WINDOW))
        polls_seen(exporter.url, 1)
        with _connect(node, vhost, "fld-looping") as conn:
            ch = conn.channel()
            ch.confirm_delivery()
            quorum = {"x-queue-type": "quorum", "x-delivery-limit": 2}
            ch.queue_declare("fld.dlq", durable=True)
            ch.queue_declare("fld.kept", durable=True, arguments={
                **quorum, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "fld.dlq"})
            ch.queue_declare("fld.dropping", durable=True, arguments=quorum)
            assert _confirmed(ch, "fld.kept", 3) == 0 and _confirmed(ch, "fld.dropping", 2) == 0
            _reject_until_gone(ch, "fld.kept")
            _reject_until_gone(ch, "fld.dropping")
            # All three dead-lettered through the default exchange are kept: the broker's own count.
            wait_for(lambda: ch.queue_declare("fld.dlq", passive=True).method.message_count == 3, timeout=30,
                     what="the three dead letters in fld.dlq")
        with _connect(node, vhost, "fld-capped-publisher") as conn:
            ch = conn.channel()
            ch.confirm_delivery()
            ch.queue_declare("fld.capped", durable=True, arguments={"x-max-length": 2})
            assert _confirmed(ch, "fld.capped", 10) == 0  # all ten confirmed; eight are destroyed
            _healthy(node, vhost)

            def seen():
                found = findings(exporter)
                by = {(f["rule"], f["object"]): f for f in found}
                wanted = [("delivery-limit-reached", "queue fld.kept"), ("delivery-limit-reached", "queue fld.dropping"),
                          ("messages-dropped", "queue fld.capped")]
                return (found, [by[w] for w in wanted]) if all(w in by for w in wanted) else None

            found, (kept, dropping, capped) = wait_for(seen, timeout=120, what=lambda: str(
                sorted((f["rule"], f["object"], f["severity"]) for f in findings(exporter))))
    assert kept["severity"] == "warning" and "the default exchange with routing key 'fld.dlq'" in kept["explanation"]
    assert "dropped" not in kept["explanation"] and kept["evidence"]["attribution"].startswith("inferred:")
    assert dropping["severity"] == "critical" and "dropped" in dropping["explanation"]
    assert capped["severity"] == "critical" and capped["evidence"]["reason"] == "maxlen"
    assert capped["connection_name"] == "fld-capped-publisher" and "gone" in capped["explanation"]
    assert not _at_or_above_warning(found, "fld-healthy") and not _at_or_above_warning(found, "fld.healthy")


def test_drops_by_length_are_never_blamed_on_a_reject_publish_queue_and_a_deleted_queue_is_named(
        release_broker, start_exporter):
    node = release_broker
    with own_vhost(node, "fld") as vhost:
        with _connect(node, vhost, "fld-refused-publisher") as conn:
            ch = conn.channel()
            ch.confirm_delivery()
            # Declared before the exporter's first poll, so that its window starts with the queue there.
            ch.queue_declare("fld.capped-then-deleted", durable=True, arguments={"x-max-length": 2})
            exporter = start_exporter(node.management_url, interval=0.5, selection=only_vhost(vhost),
                                      thresholds=Thresholds(window_seconds=WINDOW))
            polls_seen(exporter.url, 2)
            assert _confirmed(ch, "fld.capped-then-deleted", 10) == 0
            ch.queue_delete("fld.capped-then-deleted")
            ch.queue_declare("fld.refusing", durable=True, arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
            assert _confirmed(ch, "fld.refusing", 50) == 49
            _healthy(node, vhost)

            def dropped():
                found = findings(exporter)
                return found if any(f["rule"] == "messages-dropped" for f in found) else None

            found = wait_for(dropped, timeout=120, what=lambda: str(
                sorted((f["rule"], f["object"]) for f in findings(exporter))))
            # A few polls more: the refusing queue's counters settle, and still it is never blamed.
            polls_seen(exporter.url, 3)
            found = findings(exporter)
    [drop] = [f for f in found if f["rule"] == "messages-dropped"]
    assert drop["object"].startswith("classic queues on ") and drop["severity"] == "critical"
    assert drop["evidence"]["attribution"].startswith("unattributed")
    assert drop["evidence"]["deleted_in_window"] == [f"queue fld.capped-then-deleted ({vhost})"]
    assert not [f for f in found if f["rule"] in ("messages-dropped", "delivery-limit-reached")
                and "fld.refusing" in f["object"] + f["explanation"] + str(f["evidence"])]
    assert not _at_or_above_warning(found, "fld-healthy") and not _at_or_above_warning(found, "fld.healthy")


def test_a_dead_letter_cycle_a_message_can_go_round_by_expiry_is_named_from_its_topology_before_any_loss(
        release_broker, start_exporter):
    """Issue 55's K7: work and retry dead-letter into each other through two exchanges, both with a TTL; beside it
    a retry loop the broker allows (its work queue dead-letters only what a consumer rejects)."""
    node = release_broker
    with own_vhost(node, "fld") as vhost:
        with _connect(node, vhost, "fld-topology") as conn:
            ch = conn.channel()
            for prefix, work_ttl in (("fld.", {"x-message-ttl": 60_000}), ("fld.safe-", {})):
                ch.exchange_declare(f"{prefix}work.x", "direct", durable=True)
                ch.exchange_declare(f"{prefix}retry.x", "direct", durable=True)
                ch.queue_declare(f"{prefix}work", durable=True, arguments={
                    "x-dead-letter-exchange": f"{prefix}retry.x", "x-dead-letter-routing-key": "retry", **work_ttl})
                ch.queue_declare(f"{prefix}retry", durable=True, arguments={
                    "x-dead-letter-exchange": f"{prefix}work.x", "x-dead-letter-routing-key": "work",
                    "x-message-ttl": 5000})
                ch.queue_bind(f"{prefix}work", f"{prefix}work.x", "work")
                ch.queue_bind(f"{prefix}retry", f"{prefix}retry.x", "retry")
        exporter = start_exporter(node.management_url, interval=0.5, selection=only_vhost(vhost),
                                  thresholds=Thresholds(window_seconds=WINDOW))
        found = wait_for(lambda: (found := findings(exporter)) and any(f["rule"] == "dead-letter-cycle" for f in found)
                         and found, timeout=60, what=lambda: str(sorted((f["rule"], f["object"])
                                                                       for f in findings(exporter))))
        polls_seen(exporter.url, 2)
        found = findings(exporter)
    [cycle] = [f for f in found if f["rule"] == "dead-letter-cycle"]
    assert cycle["object"] == "dead-letter cycle fld.retry → fld.work → fld.retry" and cycle["severity"] == "warning"
    assert "exchange 'fld.work.x' (direct, binding key 'work')" in cycle["evidence"]["hops"][0]
    assert not [f for f in found if "safe" in f["object"]]
