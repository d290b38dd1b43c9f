"""The broker's state at one poll, as immutable typed records.

A field is None when the broker did not report it (another RabbitMQ version, statistics switched off, an
object too new to have stats): the collectors then emit no series, never a made-up zero.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace


# RabbitMQ's default collect_statistics_interval, seconds: the management API refreshes a channel's counters this
# often, and lists a channel opened since only from its next collection. Two polls closer than this may show the
# counters of a consumer that acks unmoved.
STATISTICS_INTERVAL = 5.0


@dataclass(frozen=True, slots=True)
class MessageStats:
    """Cumulative message counts as the management API reports them (never its smoothed rates)."""

    publish: int | None = None
    confirm: int | None = None
    deliver_get: int | None = None
    ack: int | None = None
    redeliver: int | None = None
    return_unroutable: int | None = None
    drop_unroutable: int | None = None
    get: int | None = None  # basic.get fetches with manual ack (queues)
    get_no_ack: int | None = None  # basic.get fetches with automatic ack (queues)
    deliver_no_ack: int | None = None  # deliveries to consumers with automatic ack (queues)
    get_empty: int | None = None  # basic.get answered get-empty: the queue had nothing to give (queues, channels)


@dataclass(frozen=True, slots=True)
class Churn:
    """Connections and channels opened and closed since the broker started, summed over its nodes (the management
    API's churn_rates, or the Prometheus plugin's rabbitmq_connections_opened_total ...): what polls alone can
    say of connections shorter than a poll, for the whole broker and no client."""

    connections_opened: int | None = None
    connections_closed: int | None = None
    channels_opened: int | None = None
    channels_closed: int | None = None


@dataclass(frozen=True, slots=True)
class Overview:
    rabbitmq_version: str | None
    erlang_version: str | None
    management_version: str | None
    cluster_name: str | None
    statistics_disabled: bool
    message_stats: MessageStats
    queue_total: int | None = None  # queues in the cluster, all vhosts: what listing them costs the broker
    churn: Churn | None = None  # None where the source does not count it (statistics off, no plugin)
    node: str | None = None  # the node whose management API answered: the cluster as that node sees it

    @property
    def release(self) -> tuple[int, int] | None:
        """(major, minor) of the broker's version ("4.0.5", "3.13.7+2.g3ab2f1c"); None for none or nonsense: what
        differs by release is looked up by it."""
        found = re.match(r"(\d+)\.(\d+)", self.rabbitmq_version or "")
        return (int(found[1]), int(found[2])) if found else None


@dataclass(frozen=True, slots=True)
class NodeSettings:
    """The configuration of the node the broker's CLI reaches (--cli): what no HTTP endpoint shows."""

    node: str
    # rabbit's consumer_timeout (rabbitmq.conf), applied where neither the consumer nor its queue sets one; None:
    # set to no number ('undefined': no timeout before 4.3, 24 hours on a 4.3 quorum queue)
    consumer_timeout_ms: int | None


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    running: bool | None
    mem_used: int | None
    mem_limit: int | None
    mem_alarm: bool | None
    disk_free: int | None
    disk_free_limit: int | None
    disk_free_alarm: bool | None
    fd_used: int | None
    fd_total: int | None
    io_sync_count: int | None
    io_sync_avg_seconds: float | None
    # The cluster members this node cannot reach (a network partition, as it sees it); None where unknown. Where the
    # release lists none under a partition (4.x, Khepri: always []), inferred from which nodes answer themselves.
    partitions: tuple[str, ...] | None = None
    partitions_inferred: bool = False
    # The peers its own Prometheus plugin counts unreachable (rabbitmq_unreachable_cluster_peers_count, 3.13 and
    # later); None where not read.
    unreachable_peers: int | None = None
    # How long its quorum queues' log entries take to commit (Raft), from its Prometheus plugin; None unread.
    quorum_commit_latency_seconds: float | None = None
    # "disc" or "ram", as /api/nodes says (a ram node keeps its metadata in memory only: 4.3 removed them); None unread
    node_type: str | None = None


@dataclass(frozen=True, slots=True)
class Connection:
    name: str  # the broker's name for it: "peer:port -> host:port"
    vhost: str
    user: str
    connection_name: str  # what the client called itself (client_properties.connection_name), or ""
    heartbeat_seconds: int | None
    state: str | None
    node: str | None
    peer_host: str | None
    client: str | None  # client library and version, e.g. "Pika Python Client Library 1.4.4"
    peer_port: int | None = None
    platform: str | None = None  # what the client says it runs on, e.g. "Python 3.11.7", "Node.JS v20.20.2"
    protocol: str | None = None  # as the broker names it: "AMQP 0-9-1", "AMQP 1-0", "MQTT 3-1-1", "STOMP 1.2" ...
    # An AMQP 1.0 client's container-id: the name its application goes by in AMQP 1.0 (a random UUID unless the
    # application sets one). RabbitMQ's own AMQP 1.0 clients send no connection properties: it is all they say.
    container_id: str | None = None
    # (received, sent) bytes as the broker last counted them: they move whenever frames cross the connection and
    # stand still while it is idle. None where it lists none (statistics off).
    octets: tuple[int, int] | None = None
    # When the broker accepted it, unix seconds: a new connection from the same peer port has the old one's name but
    # not its time. None where the source does not say.
    connected_at: float | None = None

    @property
    def identity(self) -> str:
        """Who this client is, for a human: its connection name; failing that, what it runs, from where and
        as whom, e.g. "py-amqp 5.4.2 from 10.0.3.7:51234 as celery" (stable for the connection's life); an AMQP
        1.0 client adds its container-id."""
        if self.connection_name:
            return self.connection_name
        peer = f"{self.peer_host}:{self.peer_port}" if self.peer_host and self.peer_port else self.peer_host
        client = self.client or ("AMQP 1.0 client" if self.amqp10 else "unnamed client")
        container = f" (container {self.container_id})" if self.container_id else ""
        return f"{client}{container} from {peer or self.name} as {self.user}"

    @property
    def amqp10(self) -> bool:
        """Whether it speaks AMQP 1.0: its sessions and links are read, not channels."""
        return self.protocol == AMQP10

    @property
    def blocked(self) -> bool | None:
        """True when publishers on it are held back: blocked, blocking, or in credit-flow control."""
        return None if self.state is None else self.state in ("blocked", "blocking", "flow")


AMQP10 = "AMQP 1-0"  # Connection.protocol of an AMQP 1.0 client, as the broker names it


@dataclass(frozen=True, slots=True)
class Channel:
    name: str  # "peer:port -> host:port (number)"
    number: int | None
    vhost: str
    user: str
    connection: str
    connection_name: str
    prefetch_count: int | None
    global_prefetch_count: int | None
    messages_unacked: int | None
    messages_unconfirmed: int | None
    confirm: bool | None
    transactional: bool | None
    consumer_count: int | None
    state: str | None
    message_stats: MessageStats
    # What the channel touched, where the source says (the Prometheus plugin's per-queue and per-exchange
    # counters): the queues it consumed from or published into, the exchanges it published to. A channel
    # known only by its process id is named by them.
    queues: tuple[str, ...] = ()
    exchanges: tuple[str, ...] = ()
    # The prefetch each of the channel's consumers got when it subscribed (0: none), where the source lists
    # consumers with their own prefetch; None where it does not (then prefetch_count stands for each).
    consumer_prefetch: tuple[int, ...] | None = None
    client: str | None = None  # its connection's client library and version (Connection.client)
    identity: str = ""  # its connection's Connection.identity, "" where the connection is unknown
    # The queues its publishes were routed into, as the broker counts them per channel and queue (the Prometheus
    # plugin's channel_queue_exchange_metrics); None where the source does not count them (the management API
    # keeps no such breakdown unless rates_mode is detailed): then Snapshot.exchanges may tell.
    routed_into: tuple[str, ...] | None = None
    # How routed_into was tied to this channel where the source names channels otherwise than the plugin (the
    # management API: sources/routing.py), an inference; None where the plugin's own channel is this one.
    routed_match: str | None = None

    @property
    def prefetch_limit(self) -> int | None:
        """How many unacked deliveries the channel may hold, as RabbitMQ applies basic.qos; None when
        nothing limits it (see binding_limit)."""
        if self.consumer_prefetch is not None:
            return binding_limit(self.consumer_prefetch, self.global_prefetch_count)
        # Each of its consumers held to prefetch_count: their sum is that times their number, computed, not
        # spelt out as a tuple of them (an answer claiming 10**12 consumers must not cost that much memory).
        each = self.prefetch_count or 0
        return _tighter(each * max(self.consumer_count or 0, 1) if each else None, self.global_prefetch_count)

    def limit_for(self, consumer_prefetch: int | None) -> int | None:
        """The limit that binds one consumer of this channel: its own prefetch, capped by the channel-wide
        one it shares; None when neither limits it."""
        return binding_limit((consumer_prefetch or 0,), self.global_prefetch_count)


def binding_limit(consumer_prefetch: Sequence[int | None], global_prefetch: int | None) -> int | None:
    """The unacked deliveries some consumers of one channel may hold together, as RabbitMQ (3.3+) applies
    basic.qos: each consumer is held to the per-consumer prefetch (global=false) the channel had when it
    subscribed, so a qos set after basic.consume binds only later consumers; all of them together are held
    to the channel-wide prefetch (global=true). 0 means no limit. None when nothing binds: no consumer, or
    one without a prefetch of its own and no channel-wide one."""
    own = None if not consumer_prefetch or not all(consumer_prefetch) else sum(consumer_prefetch)
    return _tighter(own, global_prefetch)


def _tighter(own: int | None, global_prefetch: int | None) -> int | None:
    """The lower of the consumers' own limit and the channel-wide one, 0 or None meaning no limit."""
    limits = [n for n in (own, global_prefetch) if n]
    return min(limits) if limits else None


@dataclass(frozen=True, slots=True)
class Consumer:
    vhost: str
    queue: str
    consumer_tag: str
    channel: str
    connection: str
    connection_name: str
    user: str
    prefetch_count: int | None
    ack_required: bool | None
    exclusive: bool | None
    active: bool | None
    client: str | None = None  # as Channel.client
    identity: str = ""  # as Channel.identity
    # The consumer timeout the broker holds for it, in ms (/api/consumers' consumer_timeout, RabbitMQ 4.x: the
    # consumer's argument, its queue's or the node's); None where the source does not say (3.x).
    consumer_timeout_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Link:
    """One AMQP 1.0 link, as the broker's session lists it (GET /api/connections/{name}/sessions): a receiver
    (the broker's outgoing link: it delivers a queue's messages to the client) or a sender (the client publishes
    on it). The /management link every client opens is no consumer nor publisher and is left out."""

    vhost: str
    user: str
    connection: str
    session: int  # the session's channel number on its connection
    handle: int  # the link's handle in its session
    name: str  # the link name the client gave
    role: str  # "receiver" | "sender", from the client's side
    address: str  # the source (receiver) or target (sender) address, e.g. "/queues/orders"
    queue: str | None  # the queue a receiver consumes from; None for a sender
    # Pre-settled: a receiver's deliveries are settled when sent (at-most-once, the analog of auto-ack); a sender's
    # transfers are settled when sent (snd-settle-mode settled: it never hears an outcome, no confirms).
    settled: bool | None
    credit: int | None  # what the link may still transfer, as the broker holds it
    delivery_count: int | None  # transfers on the link so far (AMQP 1.0 flow control's delivery-count)
    unconfirmed: int | None = None  # a sender's transfers the broker has not settled yet; None for a receiver
    # The session's deliveries sent and not yet settled by the client: the broker counts them per session, not per
    # link; `session_receivers` is how many receivers share the count.
    session_unsettled: int | None = None
    session_receivers: int = 0
    client: str | None = None  # as Channel.client
    identity: str = ""  # as Channel.identity
    # Unix time its session was read: this poll's, or an earlier one's where its connection was idle since (no
    # frame crossed it, so nothing above changed): see sources/management/session_reads.py.
    read_at: float | None = None

    @property
    def unsettled(self) -> int | None:
        """This receiver's unsettled deliveries: its session's, where it is the session's only receiver."""
        return self.session_unsettled if self.role == "receiver" and self.session_receivers == 1 else None

    @property
    def key(self) -> tuple[str, int, int]:
        return (self.connection, self.session, self.handle)


@dataclass(frozen=True, slots=True)
class StreamConsumer:
    """A consumer of a stream over the stream protocol, as the stream plugin's management lists it."""

    vhost: str
    stream: str
    connection: str
    subscription_id: int
    offset: int | None  # the next offset the broker dispatches to it
    # What the broker has not dispatched to it yet (the stream's committed offset less `offset`): a client that
    # buffers chunks it has been sent but not processed looks caught up by it.
    offset_lag: int | None
    credits: int | None
    consumed: int | None  # messages dispatched to it so far
    reference: str | None = None  # its name for offset tracking, where the client said it
    client: str | None = None
    identity: str = ""

    @property
    def committed_offset(self) -> int | None:
        """The stream's end as this consumer's figures give it."""
        return None if self.offset is None or self.offset_lag is None else self.offset + self.offset_lag


def stream_ends(consumers: Sequence[StreamConsumer]) -> dict[tuple[str, str], int]:
    """Each stream's end (committed offset), (vhost, stream): as its stream-protocol consumers' figures give it."""
    ends: dict[tuple[str, str], int] = {}
    for c in consumers:
        if c.committed_offset is not None:
            ends[(c.vhost, c.stream)] = max(ends.get((c.vhost, c.stream), 0), c.committed_offset)
    return ends


@dataclass(frozen=True, slots=True)
class StreamPublisher:
    """A publisher into a stream over the stream protocol: what it sent and what the broker confirmed."""

    vhost: str
    stream: str
    connection: str
    publisher_id: int
    reference: str | None
    published: int | None
    confirmed: int | None
    errored: int | None
    client: str | None = None
    identity: str = ""


@dataclass(frozen=True, slots=True)
class StoredOffset:
    """An offset a stream client stored under its reference (the stream protocol's offset tracking): its own
    progress, whatever the broker has dispatched to it."""

    vhost: str
    stream: str
    reference: str
    offset: int


@dataclass(frozen=True, slots=True)
class Queue:
    vhost: str
    name: str
    type: str
    durable: bool | None
    auto_delete: bool | None
    exclusive: bool | None
    state: str | None
    node: str | None
    messages_ready: int | None
    messages_unacked: int | None
    messages_persistent: int | None
    consumers: int | None
    consumer_utilisation: float | None
    message_stats: MessageStats
    # A replicated queue's nodes, where the source says: a quorum queue's configured members and those online
    # (`node` is its leader's); a classic mirrored queue's mirrors and the synchronised ones (`node` is its
    # leader's). None for a queue that has none, or where the source does not list them.
    members: tuple[str, ...] | None = None
    online: tuple[str, ...] | None = None
    mirrors: tuple[str, ...] | None = None
    synchronised_mirrors: tuple[str, ...] | None = None
    # How often a message may be delivered before the queue dead-letters or drops it (a quorum queue's
    # delivery_limit: 20 by default from RabbitMQ 4.0); None where the queue has none or the source does not say.
    delivery_limit: int | None = None
    # The exchange the queue dead-letters to (x-dead-letter-exchange, by argument or policy): "" is the default
    # exchange, which routes by the dead-letter routing key: a working target, not "none". None where neither sets
    # one, or where the source does not show the queue's settings (`settings_shown` tells which; see `dead_letters`).
    dead_letter_exchange: str | None = None
    messages_delayed: int | None = None  # held back by a quorum queue's delayed retry (RabbitMQ 4.3)
    # A stream's largest consumer offset lag, as the Prometheus plugin reports it (stream protocol consumers).
    stream_max_offset_lag: int | None = None
    # The queue's own consumer timeout in ms (x-consumer-timeout argument or consumer-timeout policy, 3.12+).
    consumer_timeout_ms: int | None = None
    # The optional arguments it was declared with, as (name, JSON value), sorted; x-queue-type left out (`type`
    # says it, and 4.x adds it to every queue). Empty where it has none or the source does not list them.
    arguments: tuple[tuple[str, str], ...] = ()
    # The unix time in the timestamp property of the message at the head of the queue (classic queues, where the
    # publisher sets it); None where it has none, the queue is empty, or the source does not say.
    head_message_timestamp: float | None = None
    # A quorum queue dead-lettering at-least-once keeps each message it dead-letters until the target confirms it:
    # how many it keeps so (None where the source does not say).
    messages_dlx: int | None = None
    # The queue's settings, each as its x- argument or a policy's key sets it, None where neither does (or where
    # the source does not show them: `settings_shown`): the dead-letter strategy ("at-least-once",
    # "at-most-once"), the routing key dead letters are sent with, the length limits (the lower of argument and
    # policy, as the broker applies them), what a full queue does (x-overflow: "drop-head", "reject-publish",
    # "reject-publish-dlx"; see `overflow_mode`) and its message TTL in ms.
    dead_letter_strategy: str | None = None
    dead_letter_routing_key: str | None = None
    max_length: int | None = None
    max_length_bytes: int | None = None
    overflow: str | None = None
    message_ttl_ms: int | None = None
    # Whether the source showed the queue's arguments and policy: where it did not (the Prometheus plugin alone, a
    # listing without them), None in the settings above means "not shown", not "not set".
    settings_shown: bool = False

    @property
    def stream(self) -> bool:
        """A stream keeps its log: messages_ready is what it retains, not a backlog waiting to be consumed."""
        return self.type == "stream"

    @property
    def dead_letters(self) -> bool | None:
        """Whether the queue has a dead-letter target (the default exchange counts): False where none is set, so
        that what it dead-letters is dropped; None where the source does not show its settings."""
        return None if not self.settings_shown else self.dead_letter_exchange is not None

    @property
    def overflow_mode(self) -> str | None:
        """What the queue does at its length limit, as the broker applies it: "drop-head" where x-overflow is not
        set; None where the source does not show its settings."""
        return None if not self.settings_shown else self.overflow or "drop-head"

    @property
    def length_limited(self) -> bool | None:
        """Whether the queue has a length limit, in messages or bytes; None where its settings are not shown."""
        return None if not self.settings_shown else self.max_length is not None or self.max_length_bytes is not None

    @property
    def dead_letter_target(self) -> str:
        """Where the queue dead-letters, in words: the exchange and routing key, "no dead-letter exchange", or
        "not shown"."""
        if self.dead_letters is None:
            return "not shown by the source"
        if self.dead_letter_exchange is None:
            return "no dead-letter exchange"
        where = f"exchange '{self.dead_letter_exchange}'" if self.dead_letter_exchange else "the default exchange"
        key = self.dead_letter_routing_key
        return where + (f" with routing key '{key}'" if key is not None else " with each message's own routing key")


@dataclass(frozen=True, slots=True)
class Policy:
    """A policy (or an operator policy) as the broker holds it: what it sets on the queues or exchanges it
    matches. What a release refuses to declare (classic queue mirroring's ha-* keys from 4.0) is read from it."""

    vhost: str
    name: str
    pattern: str
    apply_to: str  # queues | exchanges | all | classic_queues | quorum_queues | streams
    definition: tuple[tuple[str, str], ...]  # (key, JSON value), sorted
    operator: bool = False  # an operator policy (/api/operator-policies)


@dataclass(frozen=True, slots=True)
class DeprecatedFeature:
    """A deprecated feature the broker says is in use (/api/deprecated-features/used, 3.13 and later)."""

    name: str  # e.g. transient_nonexcl_queues
    phase: str  # permitted_by_default | denied_by_default | disconnected | removed, as the broker says
    doc_url: str = ""


@dataclass(frozen=True, slots=True)
class Exchange:
    """An exchange with what it took and where it routes: read where a channel of its vhost publishes without
    confirms, to judge what is at stake (the management API does not say which exchange a channel publishes to)."""

    vhost: str
    name: str  # "" is the default exchange, which routes to the queue named by the routing key
    message_stats: MessageStats  # `publish`: messages published into it (the API's publish_in), cumulative
    # Its bindings: (destination type, destination, binding key), "queue" or "exchange".
    bindings: tuple[tuple[str, str, str], ...] = ()
    type: str | None = None  # direct, fanout, topic, headers or a plugin's; None where the source did not say


@dataclass(frozen=True, slots=True)
class DeadLettered:
    """One node's count of messages its queues dead-lettered or dropped, as the broker's Prometheus plugin counts
    them (rabbitmq_global_messages_dead_lettered_<reason>_total): by reason, queue type and strategy, with no
    queue named. Strategy "disabled" means the queue has no dead-letter exchange: the messages were dropped."""

    node: str
    reason: str  # delivery_limit | expired | maxlen | rejected
    queue_type: str  # as the model names queue types: quorum | classic | stream
    strategy: str  # disabled | at_most_once | at_least_once
    count: int

    @property
    def dropped(self) -> bool:
        return self.strategy == "disabled"


@dataclass(frozen=True, slots=True)
class ProtocolCounts:
    """One node's deliveries to consumers of one protocol from one type of queue, as its Prometheus plugin counts
    them (rabbitmq_global_messages_delivered_total, ..._redelivered_total): per node, protocol and queue type, with
    no queue named. Where AMQP 1.0 deliveries are counted at all: the management API keeps no per-queue statistics
    of them (measured on 4.3.6: message_stats null)."""

    node: str
    protocol: str  # as the plugin names it: amqp091 | amqp10 | stream | mqtt ...
    queue_type: str  # as the model names queue types: quorum | classic | stream ("" where not labelled)
    delivered: int
    redelivered: int
    # basic.get answered get-empty (rabbitmq_global_messages_get_empty_total): node-wide, no queue named; None where
    # the plugin does not count it.
    get_empty: int | None = None


@dataclass(frozen=True, slots=True)
class Shovel:
    """A shovel (rabbitmq_shovel): the broker's own consumer of a source and publisher to a destination, as
    /api/shovels reports it running and /api/parameters/shovel defines it (a dynamic one). Its ack mode is its
    guarantee: no-ack forgets a message once received, on-publish once published, on-confirm once the destination
    confirms it. URIs are as the broker gives them, without any password."""

    name: str
    type: str  # dynamic | static
    vhost: str | None  # a dynamic shovel's; None for a static one (configured on a node, in no vhost)
    # As the broker says: starting | running | flow | blocked (4.x reports the destination's flow control here) |
    # terminated; None where it is only defined (its status was not read)
    state: str | None
    node: str | None = None
    ack_mode: str | None = None  # on-confirm | on-publish | no-ack; None where the definition is not read (static)
    source_uri: str = ""
    source_protocol: str | None = None  # amqp091 | amqp10 | local (4.x)
    source_queue: str | None = None
    source_exchange: str | None = None
    destination_uri: str = ""
    destination_protocol: str | None = None
    destination_queue: str | None = None
    destination_exchange: str | None = None
    forwarded: int | None = None  # messages forwarded since it started (4.x); None where not reported
    pending: int | None = None  # messages received and not yet forwarded (4.x)
    reason: str | None = None  # why it terminated, as the broker gives it

    @property
    def key(self) -> tuple[str, str]:
        return self.vhost or "", self.name

    @property
    def moving(self) -> bool:
        return self.state in RUNNING_SHOVEL


RUNNING_SHOVEL = frozenset({"running", "flow", "blocked"})


@dataclass(frozen=True, slots=True)
class FederationLink:
    """A federation link (rabbitmq_federation): a federated exchange or queue here consuming from one upstream,
    as /api/federation-links reports it. The URI is as the broker gives it, without the password."""

    vhost: str
    upstream: str  # the upstream's name (its parameter)
    type: str  # exchange | queue
    local: str  # the federated exchange or queue on this broker
    upstream_name: str  # the exchange or queue it consumes from upstream
    status: str  # starting | running | error | shutdown ..., as the broker says
    uri: str = ""
    node: str | None = None
    error: str | None = None  # as the broker gives it, where the status is an error
    local_connection: str | None = None  # the link's connection here, while running


# Facts a source may be unable to report (Snapshot.unreported); a rule that needs one is not evaluated.
CHANNEL_TRANSACTIONAL = "the channel's transactional flag"
QUEUE_PERSISTENT_COUNTS = "the queue's count of persistent messages"
CONNECTION_HEARTBEATS = "the connection's heartbeat"
CONNECTION_STATES = "the connection's state (blocked, flow)"
QUEUE_DURABILITY = "the queue's durability"
QUEUE_DEAD_LETTERED_HELD = "a quorum queue's dead-lettered messages awaiting their target's confirm (messages_dlx)"
# Facts a poll may miss when one of its source's endpoints fails while the others answer (Snapshot.unread).
CHANNELS = "the channels and their consumers"
QUEUE_COUNTS = "the queues' depths and counters"
NODE_ALARMS = "the nodes' memory and disk alarms"
CONNECTIONS = "the connections and their clients"  # a count of 0 is a count only where they were read
DEAD_LETTER_COUNTS = "the nodes' dead-letter counters (the Prometheus plugin's)"
AMQP10_LINKS = "the AMQP 1.0 sessions and links"
STREAM_CLIENTS = "the stream protocol's consumers, publishers and stored offsets (the stream plugin's management)"
SHOVELS = "the shovels and their definitions"
SHOVEL_STATES = "the shovels' state (rabbitmq_shovel_management)"
FEDERATION_LINKS = "the federation links and their state (rabbitmq_federation_management)"


@dataclass(frozen=True, slots=True)
class Unread:
    """An endpoint this poll could not read while the rest of the snapshot stands: `reason` is a label value
    (ackscope_poll_errors_total), `message` the sentence for humans."""

    endpoint: str
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything one poll saw, attributed: channels and consumers carry their connection's client name."""

    taken_at: float  # unix time the poll started
    overview: Overview
    nodes: tuple[Node, ...] = ()
    vhosts: tuple[str, ...] = ()
    connections: tuple[Connection, ...] = ()
    channels: tuple[Channel, ...] = ()
    consumers: tuple[Consumer, ...] = ()
    queues: tuple[Queue, ...] = ()
    dead_lettered: tuple[DeadLettered, ...] = ()  # every node's, where its Prometheus plugin was read
    protocol_counts: tuple[ProtocolCounts, ...] = ()  # every node's, where its Prometheus plugin was read
    # The exchanges of the vhosts where a channel publishes without confirms (or in transactions), where the
    # source reads them (the management API): what such a channel's publishes may reach.
    exchanges: tuple[Exchange, ...] = ()
    links: tuple[Link, ...] = ()  # the AMQP 1.0 clients' receivers and senders
    stream_consumers: tuple[StreamConsumer, ...] = ()
    stream_publishers: tuple[StreamPublisher, ...] = ()
    stored_offsets: tuple[StoredOffset, ...] = ()
    shovels: tuple[Shovel, ...] = ()
    federation_links: tuple[FederationLink, ...] = ()
    notes: tuple[str, ...] = field(default=())  # what the broker did not report, said once for humans
    unreported: frozenset[str] = frozenset()  # facts this source cannot report at all (the constants above)
    unread: tuple[Unread, ...] = ()  # a partial poll: what failed (the facts it would give are in `unreported`)
    settings: NodeSettings | None = None  # where --cli was given and has answered
    # Read for `ackscope upgrade-check` (sources.management.upgrade): None where not read, or, for the deprecated
    # features in use, where the release offers no such list (before 3.13).
    policies: tuple[Policy, ...] | None = None
    deprecated_used: tuple[DeprecatedFeature, ...] | None = None


def prefetch_fill(unacked: int | None, limit: int | None) -> float:
    """How full a channel's prefetch is: its unacked deliveries against the limit that binds them; infinite where
    nothing limits a channel that holds some (the broker may send it every message), 0 where it holds none."""
    held = unacked or 0
    return held / limit if limit else math.inf if held else 0.0


def fullest_consuming(s: Snapshot, top: int) -> tuple[tuple[Channel, ...], int]:
    """The `top` consuming channels (a consumer, or unacked deliveries) fullest first: by prefetch_fill, then by
    unacked, ties in the snapshot's order; and how many channels consume in all."""
    with_consumers = {c.channel for c in s.consumers}
    consuming = [ch for ch in s.channels if ch.name in with_consumers or ch.messages_unacked]
    ranked = sorted(consuming, key=lambda ch: (prefetch_fill(ch.messages_unacked, ch.prefetch_limit),
                                               ch.messages_unacked or 0), reverse=True)
    return tuple(ranked[:top]), len(consuming)


def attribution(connection: Connection | None, connection_name: str, client: str | None = None
                ) -> tuple[str | None, str]:
    """(client, identity) of a channel or consumer on `connection` (None where it is unknown: then the
    connection name it was given, and the `client` it had)."""
    if connection is None:
        return client, connection_name
    return connection.client, connection.identity


def attributed(s: Snapshot) -> Snapshot:
    """`s` with each channel and consumer carrying its connection's client and identity (see attribution), for
    sources whose records learn their connection after they are made (the Prometheus plugin's, the CLI's)."""
    by_name = {c.name: c for c in s.connections}

    def who(record):
        # A link or stream client has no connection name of its own: unattributed, it goes by its connection's.
        named = record.connection_name if isinstance(record, (Channel, Consumer)) else record.connection
        client, identity = attribution(by_name.get(record.connection), named, record.client)
        return replace(record, client=client, identity=identity)

    return replace(s, channels=tuple(who(c) for c in s.channels), consumers=tuple(who(c) for c in s.consumers),
                   links=tuple(who(k) for k in s.links), stream_consumers=tuple(who(c) for c in s.stream_consumers),
                   stream_publishers=tuple(who(p) for p in s.stream_publishers))


def carried(s: Snapshot, previous: Snapshot | None) -> Snapshot:
    """`s` with each channel and consumer listed without its connection, and so unattributed, attributed as
    `previous` attributed the same channel (by name): the management database drops a closed connection's record
    before its channels', and a poll between the two lists channels of no known client. A channel `previous`
    did not attribute either stays unattributed."""
    if previous is None or not (s.channels or s.consumers):
        return s
    listed = {c.name for c in s.connections}
    if all(ch.connection in listed for ch in s.channels) and all(c.connection in listed for c in s.consumers):
        return s
    before = {ch.name: ch for ch in previous.channels if ch.identity}

    def who(record, channel: str):
        known = before.get(channel)
        if record.connection in listed or record.identity or known is None or known.connection != record.connection:
            return record
        return replace(record, connection_name=known.connection_name, client=known.client, identity=known.identity)

    return replace(s, channels=tuple(who(ch, ch.name) for ch in s.channels),
                   consumers=tuple(who(c, c.channel) for c in s.consumers))


def sharing(s: Snapshot, previous: Snapshot | None) -> Snapshot:
    """`s` with every record equal to one of `previous` replaced by that one. The snapshots a rule window
    keeps then hold an unchanged record once: at 50,000 mostly idle queues, ten snapshots cost about the
    memory of one instead of ten (docs/benchmarks.md)."""
    if previous is None:
        return s

    def reuse(new: tuple, old: tuple) -> tuple:
        # A record the source kept from the last poll is found by identity, without hashing its fields.
        kept = {id(r) for r in old}
        fresh = [r for r in new if id(r) not in kept]
        if not fresh:
            return new
        known = {r: r for r in old}
        return tuple(r if id(r) in kept else known.get(r, r) for r in new)

    return replace(s, connections=reuse(s.connections, previous.connections),
                   channels=reuse(s.channels, previous.channels), consumers=reuse(s.consumers, previous.consumers),
                   queues=reuse(s.queues, previous.queues))
