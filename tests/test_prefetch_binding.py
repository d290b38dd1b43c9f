"""Which prefetch binds which consumer, as RabbitMQ (3.3+) applies basic.qos: per consumer (global=false,
fixed when it subscribes), channel-wide (global=true), both, a qos after basic.consume, several consumers
on one channel; and the rules and the utilisation gauge that follow from it."""

from __future__ import annotations

import pytest
from snapshot_builders import channel, consumer, queue, snapshot

from ackscope.diagnosis.rules import Context, evaluate
from ackscope.diagnosis.thresholds import Thresholds
from ackscope.model.snapshot import binding_limit
from ackscope.sources.management.normalise import channel as listed_channel
from ackscope.sources.management.normalise import consumer_prefetch


@pytest.mark.parametrize("consumer_prefetch, global_prefetch, expected", [
    ((10,), 0, 10),  # basic.qos(10): the consumer's own
    ((10, 10), 0, 20),  # amqplib prefetch(10) and two consumers: ten each
    ((0,), 1, 1),  # Celery acks_late, multiplier 1: global QoS 1, the consumer's own 0
    ((10, 10), 15, 15),  # both: the channel-wide caps the sum
    ((10,), 50, 10),  # both: the consumer's own is the lower
    ((0,), 0, None),  # nothing binds
    ((0, 10), 0, None),  # one consumer without a limit of its own: the channel is unbounded
    ((0, 10), 5, 5),  # ... unless a channel-wide limit holds them all
    ((), 0, None),  # no consumers: nothing to hold
    ((), 7, 7),
])
def test_binding_limit_follows_rabbitmq_qos_semantics(consumer_prefetch, global_prefetch, expected):
    assert binding_limit(consumer_prefetch, global_prefetch) == expected


def test_a_qos_after_basic_consume_does_not_bind_the_consumer_and_utilisation_is_absent():
    # The Java client: basicConsume, then basicQos(10). The channel shows 10; its consumer keeps 0.
    ch = channel(prefetch_count=10, global_prefetch_count=0, messages_unacked=288, consumer_prefetch=(0,))
    assert ch.prefetch_limit is None
    s = snapshot(channels=[ch], consumers=[consumer(prefetch_count=0)], queues=[queue(messages_unacked=288)])
    [f] = [f for f in evaluate(Context(s)) if f.rule == "prefetch-unlimited"]
    assert f.evidence["unacked"] == 288


def test_without_the_consumers_own_prefetch_the_channels_stands_for_each():
    assert channel(prefetch_count=10, consumer_count=3).prefetch_limit == 30


def test_a_channel_wide_prefetch_of_one_is_prefetch_one():
    # Celery with task_acks_late=True and worker_prefetch_multiplier=1.
    s = snapshot(channels=[channel(prefetch_count=0, global_prefetch_count=1, messages_unacked=1)],
                 consumers=[consumer(prefetch_count=0)], queues=[queue(messages_ready=240, messages_unacked=1)])
    [f] = [f for f in evaluate(Context(s, thresholds=Thresholds(prefetch_one_backlog=100))) if f.rule == "prefetch-one"]
    assert f.evidence["ready"] == 240
    assert [f.rule for f in evaluate(Context(s)) if f.rule == "prefetch-unlimited"] == []


def test_one_full_consumer_of_a_channel_with_room_for_another_is_saturated():
    # amqplib: prefetch(10) per consumer, two consumers on one channel; one holds 10 of 10 with 560 behind it.
    ch = channel(prefetch_count=10, consumer_count=2, messages_unacked=10, consumer_prefetch=(10, 10))
    s = snapshot(channels=[ch],
                 consumers=[consumer("busy", prefetch_count=10), consumer("idle", prefetch_count=10)],
                 queues=[queue("busy", messages_ready=560, messages_unacked=10), queue("idle")])
    [f] = [f for f in evaluate(Context(s)) if f.rule == "prefetch-saturated"]
    assert f.evidence == {"queue": "busy", "unacked": 10, "prefetch_limit": 10, "ready": 560}
    assert ch.prefetch_limit == 20  # the channel as a whole has room


def test_the_management_source_gives_each_channel_its_consumers_own_prefetch():
    own = consumer_prefetch([consumer(channel_name="java", prefetch_count=0),
                             consumer(channel_name="lagging", prefetch_count=5)])
    got = [listed_channel({"name": "java", "prefetch_count": 10, "consumer_count": 1}, {}, own),
           # the stats DB lists one of its two consumers so far
           listed_channel({"name": "lagging", "prefetch_count": 50, "consumer_count": 2}, {}, own)]
    assert [c.consumer_prefetch for c in got] == [(0,), None]
    assert got[0].prefetch_limit is None and got[1].prefetch_limit == 100  # 50 (the channel's) for each of two
