"""Pure functions from the Prometheus plugin's exposition (per-object families of /metrics/detailed, and the
node's own /metrics) to the broker model, on top of what the management API still gives with statistics off.

The plugin names a channel by its process id and nothing else: no connection, no user, no client name. A
channel's vhost, and the queues it consumes from and the exchanges it publishes to, come from the labels of
its per-queue and per-exchange counters, so they are known once it has delivered or published something.
Its confirm mode is inferred: only a channel in confirm mode counts confirms or holds unconfirmed messages.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

from ackscope.model import snapshot as facts
from ackscope.model.snapshot import (
    Channel,
    Churn,
    Consumer,
    DeadLettered,
    MessageStats,
    Node,
    Overview,
    ProtocolCounts,
    Queue,
    Snapshot,
    attributed,
)
from ackscope.model.source import FetchError

from ..cli import Enrichment, pid_key
from ..selection import Selection
from .exposition import MalformedExposition, Samples, declared, read_samples

# /metrics/detailed?family=…: only what the model, the collectors and the rules read.
FAMILIES = ("queue_coarse_metrics", "queue_consumer_count", "channel_metrics", "channel_queue_metrics",
            "channel_exchange_metrics", "channel_queue_exchange_metrics")
# What the queues' counts need, when the management API lists the channels (a large broker whose statistics
# are on): channel_metrics is 2.3 MB at 5,000 channels, 0.1 s of the broker's CPU and more of ours, for nothing.
QUEUE_FAMILIES = ("queue_coarse_metrics", "queue_consumer_count", "channel_queue_metrics",
                  "channel_queue_exchange_metrics")
# Each stream's largest consumer offset lag: asked beside FAMILIES, and not required of an answer (the family is
# declared only where the stream plugin is enabled).
STREAM_LAG_FAMILY = "stream_consumer_metrics"
STREAM_LAG = "stream_consumer_max_offset_lag"
PREFIX = "rabbitmq_detailed_"
CHANNEL_GAUGES = ("channel_consumers", "channel_messages_unacked", "channel_messages_unconfirmed",
                  "channel_messages_uncommitted", "channel_acks_uncommitted", "consumer_prefetch", "channel_prefetch")
DELIVERED = ("channel_messages_delivered_ack_total", "channel_messages_delivered_total", "channel_get_ack_total",
             "channel_get_total")
PER_QUEUE = (*DELIVERED, "channel_messages_acked_total", "channel_messages_redelivered_total")
PER_EXCHANGE = ("channel_messages_published_total", "channel_messages_confirmed_total",
                "channel_messages_unroutable_returned_total", "channel_messages_unroutable_dropped_total")
QUEUE_GAUGES = ("queue_messages_ready", "queue_messages_unacked", "queue_consumers")
QUEUE_SERIES = frozenset(PREFIX + n for n in QUEUE_GAUGES)
PUBLISHED_INTO = "queue_messages_published_total"  # per channel, queue and exchange
# A series each family declares (# TYPE) even when it has no samples, and what the model misses without it.
DECLARES = {"queue_coarse_metrics": ("queue_messages_ready", facts.QUEUE_COUNTS),
            "queue_consumer_count": ("queue_consumers", facts.QUEUE_COUNTS),
            "channel_metrics": ("channel_consumers", facts.CHANNELS),
            "channel_queue_metrics": ("channel_messages_delivered_ack_total", facts.CHANNELS),
            "channel_exchange_metrics": ("channel_messages_published_total", facts.CHANNELS),
            "channel_queue_exchange_metrics": ("queue_messages_published_total", facts.QUEUE_COUNTS)}
# The samples each endpoint's answer is read for; the rest of its lines are checked, not parsed.
DETAILED_SAMPLES = frozenset(PREFIX + n for n in (*CHANNEL_GAUGES, *PER_QUEUE, *PER_EXCHANGE, *QUEUE_GAUGES,
                                                  PUBLISHED_INTO, STREAM_LAG))
# The node's counts of messages dead-lettered or dropped, one family per reason (RabbitMQ 3.10 and later).
DEAD_LETTER_REASONS = ("delivery_limit", "expired", "maxlen", "rejected")
DEAD_LETTERED = {f"rabbitmq_global_messages_dead_lettered_{reason}_total": reason for reason in DEAD_LETTER_REASONS}
# The plugin's names of queue types, and the model's.
QUEUE_TYPES = {"rabbit_quorum_queue": "quorum", "rabbit_classic_queue": "classic", "rabbit_stream_queue": "stream"}
# The quorum queues' Raft commit latency, under the name each release gives it: to 4.1 one gauge for all the node's
# Raft clusters; from 4.2 (the Raft families renamed) the largest of the quorum queues' own.
RAFT_COMMIT_LATENCY = ("rabbitmq_raft_max_commit_latency_seconds", "rabbitmq_raft_entry_commit_latency_seconds")
# Deliveries to consumers per protocol and queue type: how AMQP 1.0 outcomes that give a message back (released,
# modified) show, as redeliveries; and the basic.get answered empty, counted so too (no queue named).
PROTOCOL_COUNTS = ("rabbitmq_global_messages_delivered_total", "rabbitmq_global_messages_redelivered_total",
                   "rabbitmq_global_messages_get_empty_total")
CHURN = ("rabbitmq_connections_opened_total", "rabbitmq_connections_closed_total", "rabbitmq_channels_opened_total",
         "rabbitmq_channels_closed_total")


UNREACHABLE_PEERS = "rabbitmq_unreachable_cluster_peers_count"
NODE_SAMPLES = frozenset({
    "rabbitmq_build_info", "rabbitmq_identity_info", "rabbitmq_process_resident_memory_bytes",
    "rabbitmq_resident_memory_limit_bytes", "rabbitmq_alarms_memory_used_watermark",
    "rabbitmq_disk_space_available_bytes", "rabbitmq_disk_space_available_limit_bytes",
    "rabbitmq_alarms_free_disk_space_watermark", "rabbitmq_process_open_fds", "rabbitmq_process_max_fds",
    *DEAD_LETTERED, *RAFT_COMMIT_LATENCY, *PROTOCOL_COUNTS, *CHURN, UNREACHABLE_PEERS})


def parse(text: str, endpoint: str, names: frozenset[str] | None = None) -> Samples:
    """The samples the model reads (`names`, by default those of `endpoint`), by name (counters with their
    _total); FetchError(malformed) for text that is not an exposition."""
    if names is None:
        names = DETAILED_SAMPLES if endpoint == "metrics/detailed" else NODE_SAMPLES
    try:
        return read_samples(text, names)
    except MalformedExposition as e:
        raise FetchError(endpoint, "malformed", f"answer is not a Prometheus exposition ({e})") from None


# What the node's /metrics must declare for its alarms to be known: a cut answer may end before them.
NODE_DECLARES = ("rabbitmq_alarms_memory_used_watermark", "rabbitmq_alarms_free_disk_space_watermark")


def missing_families(text: str, endpoint: str = "metrics/detailed",
                     families: Collection[str] = FAMILIES) -> tuple[str, ...]:
    """What the answer should declare and does not: of /metrics/detailed, the `families` asked for (an older
    RabbitMQ, or a family name the plugin does not know: it leaves those out without a word, or an answer
    cut short); of /metrics, the alarms."""
    names = declared(text)
    if endpoint == "metrics":
        return tuple(n for n in NODE_DECLARES if n not in names)
    return tuple(f for f in families if PREFIX + DECLARES[f][0] not in names)


def merged(per_node: Mapping[str, Samples], node_of: Mapping[tuple[str, str], str | None] = {}
           ) -> tuple[Samples, dict[tuple[str, str], str]]:
    """A cluster's /metrics/detailed from each node's own ({node: samples}), and the node that reported each queue.
    A node reports the channels of the connections it holds and the queues it leads (a quorum queue's counts
    only on its leader: measured on 3.10 and 4.3), so the answers add up. A queue two nodes report (a row left
    behind when its leader moved) is taken from the node the queue list names (`node_of`), else the first."""
    reporter: dict[tuple[str, str], str] = {}
    for node, samples in sorted(per_node.items()):
        for labels, _ in samples.get(PREFIX + "queue_messages_ready", ()):
            key = (labels.get("vhost", ""), labels.get("queue", ""))
            if key not in reporter or node_of.get(key) == node:
                reporter[key] = node
    if len(per_node) == 1:
        return next(iter(per_node.values())), reporter
    out: Samples = defaultdict(list)
    for node, samples in per_node.items():
        for name, series in samples.items():
            if name in QUEUE_SERIES:  # the gauges a queue's own row gives: one node's
                series = [(labels, v) for labels, v in series
                          if reporter.get((labels.get("vhost", ""), labels.get("queue", "")), node) == node]
            out[name].extend(series)
    return out, reporter


def _by(samples: Samples, name: str, *keys: str) -> dict[tuple[str, ...], float]:
    """{label values: value} of one detailed series; summed where several share those labels."""
    out: dict[tuple[str, ...], float] = defaultdict(float)
    for labels, value in samples.get(PREFIX + name, ()):
        out[tuple(labels.get(k, "") for k in keys)] += value
    return out


def _whole(v: float | None) -> int | None:
    """A sample's value as the count it is (the plugin writes every value as a float); None where absent."""
    return None if v is None else int(v)


# What says where a channel's publishes went: asked beside the management API's lists, for the vhosts where a
# channel publishes without confirms (sources/routing.py).
ROUTE_FAMILIES = ("channel_exchange_metrics", "channel_queue_exchange_metrics")
ROUTE_SAMPLES = frozenset(PREFIX + n for n in ("channel_messages_published_total", PUBLISHED_INTO))


@dataclass(frozen=True)
class ChannelRoutes:
    """One channel's publishes as a node's plugin counts them: how many, and the queues they were routed into."""

    channel: str  # the channel's process id, the plugin's only name for it
    vhost: str
    published: int
    queues: tuple[str, ...]


def channel_routes(s: Samples) -> list[ChannelRoutes]:
    """Each channel that published, with the queues its publishes reached (none: routed nowhere)."""
    published = _by(s, "channel_messages_published_total", "channel", "vhost")
    into: dict[str, set[str]] = defaultdict(set)
    for ch, queue in _by(s, PUBLISHED_INTO, "channel", "queue"):
        into[ch].add(queue)
    return [ChannelRoutes(ch, vhost, int(n), tuple(sorted(into[ch]))) for (ch, vhost), n in sorted(published.items())
            if n > 0]


def channels_and_consumers(s: Samples) -> tuple[list[Channel], list[Consumer]]:
    """Channels with their prefetch, unacked, unconfirmed and counters; a consumer per channel and queue the
    channel consumes from (known by the deliveries it had from that queue)."""
    gauge = {name: _by(s, name, "channel") for name in CHANNEL_GAUGES}
    per_queue = {name: _by(s, name, "channel", "vhost", "queue") for name in PER_QUEUE}
    per_exchange = {name: _by(s, name, "channel", "vhost", "exchange") for name in PER_EXCHANGE}
    vhost_of: dict[str, str] = {}
    totals: dict[tuple[str, str], float] = defaultdict(float)  # (series, channel): summed over queues/exchanges
    for table in (per_queue, per_exchange):
        for name, series in table.items():
            for (ch, vhost, _), v in series.items():
                vhost_of.setdefault(ch, vhost)
                totals[(name, ch)] += v
    queues_of: dict[str, set[tuple[str, str]]] = defaultdict(set)  # channel: the queues it had deliveries from
    for name in ("channel_messages_delivered_ack_total", "channel_messages_delivered_total"):
        for ch, vhost, queue in per_queue[name]:
            queues_of[ch].add((vhost, queue))
    touched: dict[str, set[str]] = defaultdict(set)  # channel: every queue it consumed from or published into
    for series in per_queue.values():
        for ch, _, queue in series:
            touched[ch].add(queue)
    routed: dict[str, set[str]] = defaultdict(set)  # channel: the queues its publishes were routed into
    for ch, queue in _by(s, PUBLISHED_INTO, "channel", "queue"):
        touched[ch].add(queue)
        routed[ch].add(queue)
    # Counted per channel and queue where the family answered: a channel none of whose publishes reached a queue
    # routed them nowhere; without the family, where they went is not known.
    counted = PREFIX + PUBLISHED_INTO in s
    exchanges: dict[str, set[str]] = defaultdict(set)
    for series in per_exchange.values():
        for ch, _, exchange in series:
            exchanges[ch].add(exchange)

    def total(*names: str, ch: str) -> int:
        return int(sum(totals.get((n, ch), 0.0) for n in names))

    channels, consumers = [], []
    for (ch,) in sorted(gauge["channel_consumers"]):
        published = total("channel_messages_published_total", ch=ch)
        confirmed = total("channel_messages_confirmed_total", ch=ch)
        pending = _whole(gauge["channel_messages_unconfirmed"].get((ch,)))
        confirm = True if confirmed or pending else (False if published else None)
        prefetch = _whole(gauge["consumer_prefetch"].get((ch,)))
        stats = MessageStats(
            publish=published, confirm=confirmed, deliver_get=total(*DELIVERED, ch=ch),
            ack=total("channel_messages_acked_total", ch=ch),
            redeliver=total("channel_messages_redelivered_total", ch=ch),
            return_unroutable=total("channel_messages_unroutable_returned_total", ch=ch),
            drop_unroutable=total("channel_messages_unroutable_dropped_total", ch=ch))
        consumer_count = _whole(gauge["channel_consumers"][(ch,)])
        channels.append(Channel(
            name=ch, number=None, vhost=vhost_of.get(ch, ""), user="", connection="", connection_name="",
            prefetch_count=prefetch, global_prefetch_count=_whole(gauge["channel_prefetch"].get((ch,))),
            messages_unacked=_whole(gauge["channel_messages_unacked"].get((ch,))), messages_unconfirmed=pending,
            confirm=confirm,
            transactional=True if gauge["channel_messages_uncommitted"].get((ch,)) or
            gauge["channel_acks_uncommitted"].get((ch,)) else None,
            consumer_count=consumer_count, state=None, message_stats=stats, queues=tuple(sorted(touched[ch])),
            exchanges=tuple(sorted(exchanges[ch])), routed_into=tuple(sorted(routed[ch])) if counted else None))
        if not consumer_count:
            continue
        for vhost, queue in sorted(queues_of[ch]):
            manual = per_queue["channel_messages_delivered_ack_total"].get((ch, vhost, queue), 0)
            auto = per_queue["channel_messages_delivered_total"].get((ch, vhost, queue), 0)
            consumers.append(Consumer(
                vhost=vhost, queue=queue, consumer_tag="", channel=ch, connection="", connection_name="", user="",
                prefetch_count=prefetch, ack_required=True if manual else (False if auto else None),
                exclusive=None, active=None))
    return channels, consumers


def queue_counts(s: Samples, queues: Iterable[Queue], absent: Collection[str] = ()) -> list[Queue]:
    """The management API's queue list (type, durability, state) with the plugin's depths, consumers and,
    summed over the channels that touched each queue, publishes, deliveries, acks and redeliveries; what an
    `absent` family would give stays None."""
    ready = _by(s, "queue_messages_ready", "vhost", "queue")
    unacked = _by(s, "queue_messages_unacked", "vhost", "queue")
    consumers = _by(s, "queue_consumers", "vhost", "queue")
    lag = _by(s, STREAM_LAG, "vhost", "queue")

    def per_queue(*names: str, vhost_label: str = "vhost") -> dict[tuple[str, str], float]:
        out: dict[tuple[str, str], float] = defaultdict(float)
        for name in names:
            for (_, vhost, queue), v in _by(s, name, "channel", vhost_label, "queue").items():
                out[(vhost, queue)] += v
        return out

    published = per_queue(PUBLISHED_INTO, vhost_label="queue_vhost")  # its labels name two vhosts
    delivered = per_queue(*DELIVERED)
    acked = per_queue("channel_messages_acked_total")
    redelivered = per_queue("channel_messages_redelivered_total")
    got, got_no_ack = per_queue("channel_get_ack_total"), per_queue("channel_get_total")
    delivered_no_ack = per_queue("channel_messages_delivered_total")
    no_publishes = "channel_queue_exchange_metrics" in absent
    no_deliveries = "channel_queue_metrics" in absent

    def counted(table: dict, key: tuple[str, str], known: bool) -> int | None:
        return _whole(table.get(key, 0.0)) if known else None

    # Built directly, not with dataclasses.replace: five times faster, and this runs for every queue each poll.
    return [Queue(q.vhost, q.name, q.type, q.durable, q.auto_delete, q.exclusive, q.state, q.node,
                  _whole(ready.get(key)), _whole(unacked.get(key)), q.messages_persistent, _whole(consumers.get(key)),
                  q.consumer_utilisation,
                  MessageStats(publish=counted(published, key, not no_publishes),
                               deliver_get=counted(delivered, key, not no_deliveries),
                               ack=counted(acked, key, not no_deliveries),
                               redeliver=counted(redelivered, key, not no_deliveries),
                               get=counted(got, key, not no_deliveries),
                               get_no_ack=counted(got_no_ack, key, not no_deliveries),
                               deliver_no_ack=counted(delivered_no_ack, key, not no_deliveries)),
                  q.members, q.online, q.mirrors, q.synchronised_mirrors, q.delivery_limit, q.dead_letter_exchange,
                  q.messages_delayed, _whole(lag.get(key)) if q.stream else None,
                  # What the list showed of the queue's settings stands (the plugin counts, it does not
                  # configure); its head message and held dead letters, read less often than the counts, do not.
                  q.consumer_timeout_ms, q.arguments, None, None,
                  q.dead_letter_strategy, q.dead_letter_routing_key, q.max_length, q.max_length_bytes, q.overflow,
                  q.message_ttl_ms, q.settings_shown)
            for q in queues for key in ((q.vhost, q.name),)]


def nodes_from_metrics(per_node: Sequence[Samples], nodes: Iterable[Node]) -> list[Node]:
    """Each node whose plugin answered (`per_node`: their /metrics), with its memory, disk, descriptors and
    alarms (the management API lists nodes without them when statistics are off); other nodes as listed."""
    said = {name: s for s in per_node if (name := node_name(s)) is not None}

    def one(s: Samples, metric: str) -> float | None:
        values = [v for _, v in s.get(metric, [])]
        return values[0] if values else None

    def flag(s: Samples, metric: str) -> bool | None:
        v = one(s, metric)
        return None if v is None else v == 1

    out = []
    for n in nodes:
        s = said.get(n.name)
        if s is not None:
            n = replace(n, mem_used=_whole(one(s, "rabbitmq_process_resident_memory_bytes")),
                        mem_limit=_whole(one(s, "rabbitmq_resident_memory_limit_bytes")),
                        mem_alarm=flag(s, "rabbitmq_alarms_memory_used_watermark"),
                        disk_free=_whole(one(s, "rabbitmq_disk_space_available_bytes")),
                        disk_free_limit=_whole(one(s, "rabbitmq_disk_space_available_limit_bytes")),
                        disk_free_alarm=flag(s, "rabbitmq_alarms_free_disk_space_watermark"),
                        fd_used=_whole(one(s, "rabbitmq_process_open_fds")),
                        fd_total=_whole(one(s, "rabbitmq_process_max_fds")),
                        quorum_commit_latency_seconds=quorum_commit_latency(s))
        out.append(n)
    return out


def quorum_commit_latency(metrics: Samples) -> float | None:
    """The node's quorum queues' Raft commit latency: 4.2's rabbitmq_raft_max_commit_latency_seconds for the
    quorum_queues Ra system, else the older rabbitmq_raft_entry_commit_latency_seconds; None where neither is."""
    new, old = RAFT_COMMIT_LATENCY
    latest = [v for labels, v in metrics.get(new, ()) if labels.get("ra_system") == "quorum_queues"]
    older = [v for _, v in metrics.get(old, ())]
    found = latest or older
    return max(found) if found else None


def churn(metrics: Sequence[Samples]) -> Churn | None:
    """Connections and channels opened and closed, summed over the nodes whose /metrics answered; None where
    none counts them."""
    totals = [sum(v for m in metrics for _, v in m.get(name, ())) if any(name in m for m in metrics) else None
              for name in CHURN]
    return None if totals == [None] * 4 else Churn(*(None if t is None else int(t) for t in totals))


def dead_lettered(metrics: Samples, node: str) -> tuple[DeadLettered, ...] | None:
    """The node's dead-letter counters from its /metrics; None when the answer has none (a plugin too old to
    count them, or an answer cut short): then they are not reported, never zero."""
    found = [DeadLettered(node, reason, QUEUE_TYPES.get(labels.get("queue_type", ""), labels.get("queue_type", "")),
                          labels.get("dead_letter_strategy", ""), int(value))
             for name, reason in DEAD_LETTERED.items() for labels, value in metrics.get(name, ())]
    return tuple(sorted(found, key=lambda d: (d.reason, d.queue_type, d.strategy))) if found else None


def protocol_counts(metrics: Samples, node: str) -> tuple[ProtocolCounts, ...]:
    """The node's deliveries and redeliveries per protocol and queue type, from its /metrics."""
    delivered, redelivered, empty = ({(labels.get("protocol", ""), labels.get("queue_type", "")): int(v)
                                      for labels, v in metrics.get(name, ())} for name in PROTOCOL_COUNTS)
    return tuple(ProtocolCounts(node, protocol, QUEUE_TYPES.get(queue_type, queue_type), delivered[key],
                                redelivered.get(key, 0), empty.get(key))
                 for key in sorted(delivered) for protocol, queue_type in (key,))


def unreachable_peers(metrics: Samples | None) -> int | None:
    """The cluster peers the node cannot reach, as its plugin counts them (3.13 and later); None before."""
    found = (metrics or {}).get(UNREACHABLE_PEERS)
    return int(found[0][1]) if found else None


def node_name(metrics: Samples | None) -> str | None:
    """The name of the node whose plugin answered (rabbitmq_identity_info), if it said."""
    identity = (metrics or {}).get("rabbitmq_identity_info")
    return identity[0][0].get("rabbitmq_node") if identity else None


def reported_queues(detailed: Samples, selection: Selection = Selection()) -> frozenset[tuple[str, str]]:
    """(vhost, name) of every selected queue the plugin reports: those whose process runs on its node. Only
    queue_coarse_metrics says a queue exists: with statistics off, 3.10 keeps a deleted queue's
    queue_consumers series (nothing collects its row), measured on a real node."""
    return frozenset((v, q) for v, q in _by(detailed, "queue_messages_ready", "vhost", "queue")
                     if selection.vhost(v) and selection.queue(q))


def plugin_only_base(detailed: Samples | None, metrics: Sequence[Samples], taken_at: float,
                     selection: Selection = Selection(), queue_nodes: Mapping[tuple[str, str], str] = {}) -> Snapshot:
    """What a broker without the management plugin says of itself on its Prometheus plugins alone (`metrics`:
    each node's /metrics that answered): its version and nodes, and its queues by name, each on the node that
    reported it (`queue_nodes`), without type, durability or connections."""
    first = metrics[0] if metrics else {}
    build = (first.get("rabbitmq_build_info") or [({}, 0.0)])[0][0]
    identity = (first.get("rabbitmq_identity_info") or [({}, 0.0)])[0][0]
    names = sorted({name for m in metrics if (name := node_name(m)) is not None})
    alone = names[0] if len(names) == 1 else None
    queues = tuple(Queue(vhost=v, name=q, type="", durable=None, auto_delete=None, exclusive=None, state=None,
                         node=queue_nodes.get((v, q), alone), messages_ready=None, messages_unacked=None,
                         messages_persistent=None, consumers=None, consumer_utilisation=None,
                         message_stats=MessageStats())
                   for v, q in sorted(reported_queues(detailed or {}, selection)))
    return Snapshot(
        taken_at=taken_at,
        overview=Overview(build.get("rabbitmq_version"), build.get("erlang_version"), None,
                          identity.get("rabbitmq_cluster"), True, MessageStats()),
        nodes=tuple(Node(name, True, *(None,) * 10) for name in names),
        vhosts=tuple(sorted({q.vhost for q in queues})),
        queues=queues,
        notes=("no management API answers: the broker's Prometheus plugin alone gives queues by name, without "
               "type, durability or connections",),
        unreported=frozenset({facts.QUEUE_DURABILITY, facts.CONNECTIONS}),
    )


def online_from_nodes(queues: Iterable[Queue], nodes: Sequence[Node]) -> Iterator[Queue]:
    """Each replicated queue with its members online taken as those on running nodes. The queue list that
    names the members is read once a minute; the nodes every poll: a member's node going down is seen at the
    next poll, not a minute later. (A member whose node runs but whose replica does not is not seen here.)"""
    running = {n.name for n in nodes if n.running}
    for q in queues:
        online = None if q.members is None or not nodes else tuple(m for m in q.members if m in running)
        # Unchanged, the same record: model.snapshot.sharing then finds it from the last poll by identity.
        yield q if online is None or online == q.online else replace(q, online=online)


def snapshot(base: Snapshot, detailed: Samples | None, metrics: Sequence[Samples] | None,
             selection: Selection = Selection(), absent: Collection[str] = (),
             channels_listed: bool = False, counted: bool = False) -> Snapshot:
    """`base` (the management API's snapshot without queue statistics) completed from the plugin's answers
    (`detailed`: the cluster's, merged; `metrics`: each node's that answered); an answer that is None was not read, and what it would give stays unknown, as does what the `absent`
    families of /metrics/detailed would give (no channels at all rather than channels half known).
    `channels_listed`: the management API listed the channels and consumers, with their statistics and
    connections (a large broker whose statistics are on); they stand, and only the queues come from here.
    `counted`: base's queues carry the plugin's counts already (see queue_counts)."""
    queues = tuple(queue_counts(detailed, base.queues, absent)) if detailed is not None and not counted \
        else base.queues
    queues = tuple(online_from_nodes(queues, base.nodes))
    # Known when every node that answered counts them (a plugin before 3.10 counts none).
    counts = [dead_lettered(m, node_name(m) or "") for m in metrics or ()]
    dead = tuple(d for node in counts for d in node) if counts and None not in counts else None
    nodes = tuple(nodes_from_metrics(metrics, base.nodes)) if metrics is not None else base.nodes
    if base.overview.churn is None and metrics:  # statistics off: the API keeps no churn_rates
        base = replace(base, overview=replace(base.overview, churn=churn(metrics)))
    base = replace(base, dead_lettered=dead or (),
                   protocol_counts=tuple(c for m in metrics or () for c in protocol_counts(m, node_name(m) or "")),
                   unreported=base.unreported | ({facts.DEAD_LETTER_COUNTS} if dead is None else set()))
    if channels_listed:
        return replace(base, queues=queues,
                       unreported=base.unreported | {facts.QUEUE_PERSISTENT_COUNTS, facts.QUEUE_DEAD_LETTERED_HELD},
                       nodes=nodes,
                       notes=(*base.notes, "a large broker: the queues' depths and counters come from its "
                              "Prometheus plugin, which costs it far less than the management API's listing; "
                              "channels, consumers and connections from the management API (docs/polling.md)"))
    channels_known = detailed is not None and not any(DECLARES[f][1] == facts.CHANNELS for f in absent)
    channels, consumers = channels_and_consumers(detailed) if channels_known else ([], [])
    return replace(
        base,
        nodes=nodes,
        channels=tuple(c for c in channels if selection.vhost(c.vhost)),
        consumers=tuple(c for c in consumers if selection.vhost(c.vhost) and selection.queue(c.queue)),
        queues=queues,
        notes=tuple(n for n in base.notes if "statistics are disabled" not in n) + (
            "management statistics are disabled on the broker: counts come from its Prometheus plugin, where "
            "a channel is known by its process id (docs/polling.md)",),
        unreported=base.unreported | {facts.CHANNEL_TRANSACTIONAL, facts.QUEUE_PERSISTENT_COUNTS,
                                      facts.QUEUE_DEAD_LETTERED_HELD, facts.CONNECTION_HEARTBEATS,
                                      facts.CONNECTION_STATES},
    )


def enrich(s: Snapshot, cli: Enrichment) -> Snapshot:
    """`s` with what the broker's CLI knows: each channel's connection, client name, user, transactional flag
    and exact confirm mode; each connection's client name, heartbeat and state."""
    def channel(ch: Channel) -> Channel:
        info = cli.channels.get(pid_key(ch.name))
        if info is None:
            return ch
        conn = info.connection
        return replace(ch, user=info.user, transactional=info.transactional, confirm=info.confirm,
                       connection=conn.name if conn else "", connection_name=conn.connection_name if conn else "")

    channels = {c.name: channel(c) for c in s.channels}
    consumers = tuple(replace(c, connection=ch.connection, connection_name=ch.connection_name, user=ch.user)
                      if (ch := channels.get(c.channel)) is not None else c for c in s.consumers)
    connections = tuple(replace(c, connection_name=info.connection_name, heartbeat_seconds=info.heartbeat_seconds,
                                state=info.state, client=info.client)
                        if (info := cli.connections.get(c.name)) is not None else c for c in s.connections)
    return attributed(replace(s, channels=tuple(channels.values()), consumers=consumers, connections=connections,
                              unreported=s.unreported - {facts.CHANNEL_TRANSACTIONAL, facts.CONNECTION_HEARTBEATS,
                                                         facts.CONNECTION_STATES}))
