"""Per-queue series: depth, persistence, consumers and message counters, with per-vhost folded totals."""

from __future__ import annotations

from ackscope.model.snapshot import Queue

from ..cardinality import FOLDED, Folded, Shaped
from .families import counter, gauge, with_folded

LABELS = ("vhost", "queue", "type", "durable")


def _labels(q: Queue) -> tuple[str, ...]:
    return (q.vhost, q.name, q.type, "" if q.durable is None else str(q.durable).lower())


LEADER_LABELS = ("vhost", "queue", "node")


def _leader_labels(q: Queue) -> tuple[str, ...]:
    return (q.vhost, q.name, q.node or "")


def _members(q: Queue) -> int | None:
    if q.members is not None:
        return len(q.members)
    return None if q.mirrors is None else 1 + len(q.mirrors)


def _online(q: Queue) -> int | None:
    if q.members is not None:
        return None if q.online is None else len(set(q.online) & set(q.members))
    return None if q.mirrors is None or q.synchronised_mirrors is None else 1 + len(q.synchronised_mirrors)


def _folded_labels(f: Folded) -> tuple[str, ...]:
    return (f.vhost, FOLDED, "", "")


SUMMABLE = (
    ("messages_ready", "Messages ready for delivery.", gauge,
     lambda q: q.messages_ready, lambda f: f.messages_ready),
    ("messages_unacked", "Messages delivered and not yet acknowledged.", gauge,
     lambda q: q.messages_unacked, lambda f: f.messages_unacked),
    ("messages_persistent", "Persistent messages in the queue.", gauge,
     lambda q: q.messages_persistent, lambda f: f.messages_persistent),
    ("consumers", "Consumers on the queue.", gauge, lambda q: q.consumers, lambda f: f.consumers),
    ("published_total", "Messages published into the queue.", counter,
     lambda q: q.message_stats.publish, lambda f: f.message_stats.publish),
    ("delivered_total", "Messages delivered from the queue (consumers and basic.get).", counter,
     lambda q: q.message_stats.deliver_get, lambda f: f.message_stats.deliver_get),
    ("acked_total", "Deliveries from the queue that were acknowledged.", counter,
     lambda q: q.message_stats.ack, lambda f: f.message_stats.ack),
    ("redelivered_total", "Deliveries from the queue flagged redelivered.", counter,
     lambda q: q.message_stats.redeliver, lambda f: f.message_stats.redeliver),
)


class QueueCollector:
    def __init__(self, shaped: Shaped):
        self._shaped = shaped

    def collect(self):
        queues, folded = self._shaped.queues, self._shaped.folded_queues
        yield from with_folded("ackscope_queue_", LABELS, SUMMABLE, queues, _labels, folded, _folded_labels)
        yield gauge("ackscope_queue_consumer_utilisation", "Share of time the queue could deliver to its "
                    "consumers at once (RabbitMQ's consumer capacity); absent until measured.",
                    LABELS, queues, _labels, lambda q: q.consumer_utilisation)
        # Replicated queues only: a classic queue that is not mirrored has no members to count.
        yield gauge("ackscope_queue_members", "Nodes a replicated queue is configured on: a quorum queue's members, "
                    "a classic mirrored queue's leader and mirrors.", LABELS, queues, _labels, _members)
        yield gauge("ackscope_queue_members_online", "Of a quorum queue's members, those online (fewer than half "
                    "of ackscope_queue_members: no quorum); of a mirrored queue's, the leader and synchronised "
                    "mirrors.", LABELS, queues, _labels, _online)
        yield gauge("ackscope_queue_delivery_limit", "Deliveries after which the queue dead-letters or drops a "
                    "message (a quorum queue's delivery limit: 20 by default from RabbitMQ 4.0); absent where "
                    "there is none.", LABELS, queues, _labels, lambda q: q.delivery_limit)
        yield gauge("ackscope_queue_messages_delayed", "Messages a quorum queue's delayed retry holds back "
                    "before their next delivery (RabbitMQ 4.3).", LABELS, queues, _labels,
                    lambda q: q.messages_delayed)
        yield gauge("ackscope_queue_leader", "1 for a replicated queue's leader's node (label node).",
                    LEADER_LABELS, [q for q in queues if _members(q) is not None and q.node], _leader_labels,
                    lambda q: 1)
