"""Per-node series: memory, disk and file-descriptor headroom, alarms, fsync counts where reported, and the
node's consumer timeout where its CLI was read."""

from __future__ import annotations

from ackscope.model.snapshot import Node, Snapshot

from .families import counter, flag, gauge

LABELS = ("node",)
DEAD_LETTER_LABELS = ("node", "reason", "queue_type", "strategy")

GAUGES = (
    ("running", "1 when the node is running.", lambda n: flag(n.running)),
    ("memory_used_bytes", "Memory the node uses.", lambda n: n.mem_used),
    ("memory_limit_bytes", "Memory high watermark: above it, publishers are blocked.", lambda n: n.mem_limit),
    ("memory_alarm", "1 while the memory alarm is on (publishers blocked).", lambda n: flag(n.mem_alarm)),
    ("disk_free_bytes", "Free disk space where the node keeps its data.", lambda n: n.disk_free),
    ("disk_free_limit_bytes", "Free disk low watermark: below it, publishers are blocked.",
     lambda n: n.disk_free_limit),
    ("disk_free_alarm", "1 while the free-disk alarm is on (publishers blocked).", lambda n: flag(n.disk_free_alarm)),
    ("file_descriptors_used", "File descriptors the node has open.", lambda n: n.fd_used),
    ("file_descriptors_limit", "File descriptors the node may open.", lambda n: n.fd_total),
    ("partitions", "Cluster members this node cannot reach (a network partition as it sees it); 0 when whole. "
     "Where the release lists none (4.x under Khepri), inferred from which nodes answer themselves.",
     lambda n: None if n.partitions is None else len(n.partitions)),
    ("unreachable_peers", "Cluster peers the node cannot reach, as its own Prometheus plugin counts them "
     "(rabbitmq_unreachable_cluster_peers_count, 3.13 and later).", lambda n: n.unreachable_peers),
    ("io_sync_average_seconds", "Average duration of the node's recent fsyncs (absent on RabbitMQ 4, which "
     "reports zeros).", lambda n: n.io_sync_avg_seconds),
    ("quorum_commit_latency_seconds", "How long the node's quorum queues take to commit a log entry (Raft), as "
     "its Prometheus plugin says under each release's name: to 4.1 rabbitmq_raft_entry_commit_latency_seconds, "
     "from 4.2 the quorum queues' rabbitmq_raft_max_commit_latency_seconds.",
     lambda n: n.quorum_commit_latency_seconds),
)


def _labels(n: Node) -> tuple[str, ...]:
    return (n.name,)


class NodeCollector:
    def __init__(self, snapshot: Snapshot):
        self._snapshot = snapshot

    def collect(self):
        nodes = self._snapshot.nodes
        for name, doc, value in GAUGES:
            yield gauge(f"ackscope_node_{name}", doc, LABELS, nodes, _labels, value)
        yield counter("ackscope_node_io_syncs_total", "fsync calls by the node: the message store's batched "
                      "syncs that gate confirms of persistent messages (absent on RabbitMQ 4, which reports "
                      "zeros).", LABELS, nodes, _labels, lambda n: n.io_sync_count)
        yield counter("ackscope_node_messages_dead_lettered_total", "Messages the node's queues gave up on, by "
                      "reason (delivery_limit, expired, maxlen, rejected), queue type and strategy: 'disabled' "
                      "means no dead-letter exchange, so they were dropped (from its Prometheus plugin).",
                      DEAD_LETTER_LABELS, self._snapshot.dead_lettered,
                      lambda d: (d.node, d.reason, d.queue_type, d.strategy), lambda d: d.count)
        settings = [self._snapshot.settings] if self._snapshot.settings is not None else []
        yield gauge("ackscope_node_consumer_timeout_seconds", "The node's consumer_timeout (rabbitmq.conf), read "
                    "with --cli: how long a consumer may hold a delivery unacked where neither it nor its queue "
                    "sets a timeout. Absent where the node sets no number or --cli is not given.", LABELS, settings,
                    lambda s: (s.node,),
                    lambda s: None if s.consumer_timeout_ms is None else s.consumer_timeout_ms / 1000)
