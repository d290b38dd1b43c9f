"""Pure functions from the management API's JSON to a typed, attributed Snapshot.

Each endpoint's `columns` lists exactly the fields its parser reads, so only they travel over the wire.
The API's shapes vary across RabbitMQ 3.10 to 4.x and with what an object has done so far: a missing key
becomes None, an empty stats object may come as `[]`, and nothing here raises on a missing field.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from ackscope.model.snapshot import (
    Channel,
    Churn,
    Connection,
    Consumer,
    DeprecatedFeature,
    Exchange,
    MessageStats,
    Node,
    Overview,
    Policy,
    Queue,
    Snapshot,
    attribution,
)

from .. import client_properties
from ..selection import Selection
from .fields import as_bool, as_dict, as_float, as_int, as_names, as_str, is_number

_STATS = ("publish", "confirm", "deliver_get", "ack", "redeliver", "return_unroutable", "drop_unroutable", "get",
          "get_no_ack", "deliver_no_ack", "get_empty")


# A replicated queue's nodes: a quorum queue's members and those online, a classic mirrored queue's mirrors (3.x).
# A quorum queue's `leader` is listed always; its `node` only once the statistics have it (seen missing for a
# moment after a member's node died, on 3.10).
REPLICAS = ("members", "online", "leader", "slave_nodes", "synchronised_slave_nodes")


# What a queue does with a message it gives up on: its delivery limit (RabbitMQ 4's field; 3.x's argument or
# policy), its dead-letter exchange (argument or policy), what its delayed retry holds back (4.3).
DEAD_LETTERING = ("delivery_limit", "arguments", "effective_policy_definition", "messages_delayed")


def _stats_columns(*names: str) -> tuple[str, ...]:
    return tuple(f"message_stats.{n}" for n in names)


COLUMNS: dict[str, tuple[str, ...]] = {
    "overview": ("rabbitmq_version", "erlang_version", "management_version", "cluster_name", "disable_stats",
                 "message_stats", "object_totals.queues", "object_totals.channels", "object_totals.connections",
                 "node", "listeners", "churn_rates"),
    "nodes": ("name", "running", "mem_used", "mem_limit", "mem_alarm", "disk_free", "disk_free_limit",
              "disk_free_alarm", "fd_used", "fd_total", "io_sync_count", "io_sync_avg_time", "partitions", "type"),
    "vhosts": ("name",),
    "connections": ("name", "vhost", "user", "user_provided_name", "client_properties", "timeout", "state",
                    # The octet counts say whether an AMQP 1.0 connection's sessions moved (session_reads.py).
                    "node", "peer_host", "peer_port", "protocol", "container_id", "recv_oct", "send_oct",
                    "connected_at"),
    "channels": ("name", "number", "vhost", "user", "connection_details.name", "prefetch_count",
                 "global_prefetch_count", "messages_unacknowledged", "messages_unconfirmed", "confirm",
                 "transactional", "consumer_count", "state") + _stats_columns(*_STATS),
    "consumers": ("queue.name", "queue.vhost", "consumer_tag", "channel_details.name",
                  "channel_details.connection_name", "channel_details.user", "prefetch_count", "ack_required",
                  "exclusive", "active", "consumer_timeout"),
    # Read only in the vhosts where a channel publishes without confirms or in transactions (publishing_at_risk), or
    # a queue dead-letters through a named exchange (dead_lettering_by_exchange).
    "exchanges": ("name", "vhost", "type", "message_stats.publish_in"),
    "bindings": ("source", "vhost", "destination", "destination_type", "routing_key"),
    # Read for `ackscope upgrade-check` (management/upgrade.py): small lists, statistics or not.
    "policies": ("vhost", "name", "pattern", "apply-to", "definition"),
    "operator-policies": ("vhost", "name", "pattern", "apply-to", "definition"),
    "deprecated-features/used": ("name", "deprecation_phase", "doc_url"),
    "queues": ("name", "vhost", "type", "durable", "auto_delete", "exclusive", "state", "node", "messages_ready",
               "messages_unacknowledged", "messages_persistent", "consumers", "consumer_utilisation",
               # The head message's timestamp and the dead-lettered messages held move: read with the statistics,
               # never from the plugin source's cached list (no Prometheus family has them).
               "consumer_capacity", "head_message_timestamp", "messages_dlx", *REPLICAS, *DEAD_LETTERING)
               + _stats_columns(
                   "publish", "deliver_get", "ack", "redeliver", "get", "get_no_ack", "deliver_no_ack", "get_empty"),
}


# Fields every object of a list carries on RabbitMQ 3.10 to 4.3 with statistics on (counters, and a queue type's
# own fields, come and go with what an object has done). One that no object of a list carries belongs to a release
# that dropped or renamed it: what it gives is unknown, and said once (channels' global_prefetch_count on 4.x).
EXPECTED = {
    "overview": ("rabbitmq_version", "cluster_name", "object_totals"),
    "nodes": ("name", "running", "mem_used", "mem_limit", "mem_alarm", "disk_free", "disk_free_alarm", "fd_used"),
    "connections": ("name", "vhost", "user", "client_properties", "timeout", "state", "peer_host"),
    "channels": ("name", "vhost", "connection_details", "prefetch_count", "global_prefetch_count",
                 "messages_unacknowledged", "messages_unconfirmed", "confirm", "transactional", "consumer_count"),
    "consumers": ("queue", "consumer_tag", "channel_details", "prefetch_count", "ack_required"),
    "queues": ("name", "vhost", "type", "durable", "arguments", "consumers"),
}


def missing_fields(raw: dict[str, Any]) -> tuple[str, ...]:
    """"endpoint.field" for each EXPECTED field that no object of a non-empty answer carries."""
    missing = []
    for endpoint, fields in EXPECTED.items():
        answer = raw.get(endpoint)
        items = [answer] if isinstance(answer, dict) else answer if isinstance(answer, list) else []
        items = [item for item in items if isinstance(item, dict)]
        if items:
            missing += [f"{endpoint}.{f}" for f in fields if not any(f in item for item in items)]
    return tuple(missing)


class MalformedResponse(ValueError):
    """The API answered 200 with JSON that is not the shape its endpoint has."""

    def __init__(self, endpoint: str, message: str):
        super().__init__(f"{endpoint}: {message}")
        self.endpoint = endpoint


def message_stats(raw: Any) -> MessageStats:
    stats = as_dict(raw)
    return MessageStats(**{name: as_int(stats.get(name)) for name in _STATS})


def overview(raw: Any) -> Overview:
    if not isinstance(raw, dict):
        raise MalformedResponse("overview", "answer is not a JSON object")
    return Overview(
        rabbitmq_version=as_str(raw.get("rabbitmq_version")),
        erlang_version=as_str(raw.get("erlang_version")),
        management_version=as_str(raw.get("management_version")),
        cluster_name=as_str(raw.get("cluster_name")),
        statistics_disabled=raw.get("disable_stats") is True,
        message_stats=message_stats(raw.get("message_stats")),
        queue_total=object_totals(raw).get("queues"),
        churn=churn(raw.get("churn_rates")),
        node=as_str(raw.get("node")),
    )


def churn(raw: Any) -> Churn | None:
    """/api/overview's churn_rates: its counts, not its smoothed rates; None where the broker keeps none
    (statistics off: the field is absent; just started: an empty object)."""
    counts = as_dict(raw)
    found = Churn(as_int(counts.get("connection_created")), as_int(counts.get("connection_closed")),
                  as_int(counts.get("channel_created")), as_int(counts.get("channel_closed")))
    return None if found == Churn() else found


def object_totals(raw: Any) -> dict[str, int]:
    """/api/overview's count of each kind of object ({"queues": 50000, ...}); what is not a count is left out."""
    totals = as_dict(raw.get("object_totals")) if isinstance(raw, dict) else {}
    return {kind: n for kind, n in totals.items() if isinstance(n, int) and not isinstance(n, bool)}


def reports_fsync(rabbitmq_version: str | None) -> bool:
    """RabbitMQ 4 still sends the io_sync_* fields, but always as zeros."""
    major = (rabbitmq_version or "").split(".")[0]
    return not (major.isdigit() and int(major) >= 4)


def node(raw: dict, fsync_reported: bool = True) -> Node:
    avg_ms = as_float(raw.get("io_sync_avg_time")) if fsync_reported else None
    return Node(
        name=str(raw.get("name", "")),
        running=as_bool(raw.get("running")),
        mem_used=as_int(raw.get("mem_used")),
        mem_limit=as_int(raw.get("mem_limit")),
        mem_alarm=as_bool(raw.get("mem_alarm")),
        disk_free=as_int(raw.get("disk_free")),
        disk_free_limit=as_int(raw.get("disk_free_limit")),
        disk_free_alarm=as_bool(raw.get("disk_free_alarm")),
        fd_used=as_int(raw.get("fd_used")),
        fd_total=as_int(raw.get("fd_total")),
        io_sync_count=as_int(raw.get("io_sync_count")) if fsync_reported else None,
        io_sync_avg_seconds=None if avg_ms is None else avg_ms / 1000.0,
        partitions=as_names(raw.get("partitions")),
        node_type=as_str(raw.get("type")),
    )


def connection(raw: dict) -> Connection:
    props = as_dict(raw.get("client_properties"))
    return Connection(
        name=str(raw.get("name", "")),
        vhost=str(raw.get("vhost", "")),
        user=str(raw.get("user", "")),
        connection_name=as_str(raw.get("user_provided_name")) or "",  # the name the broker took: see client_properties
        heartbeat_seconds=as_int(raw.get("timeout")),
        state=as_str(raw.get("state")),
        node=as_str(raw.get("node")),
        peer_host=as_str(raw.get("peer_host")),
        client=client_properties.client(props),
        peer_port=as_int(raw.get("peer_port")),
        platform=client_properties.platform(props),
        protocol=as_str(raw.get("protocol")),
        container_id=as_str(raw.get("container_id")),
        octets=_octets(raw),
        connected_at=ms / 1000 if (ms := as_int(raw.get("connected_at"))) is not None else None,
    )


def _octets(raw: dict) -> tuple[int, int] | None:
    received, sent = as_int(raw.get("recv_oct")), as_int(raw.get("send_oct"))
    return None if received is None or sent is None else (received, sent)


def channel(raw: dict, connections: dict[str, Connection],
            own_prefetch: dict[str, list[int | None]] | None = None) -> Channel:
    """The channel, attributed to its connection among `connections` (by name), with the prefetch its
    consumers got when they subscribed where `own_prefetch` (see consumer_prefetch) lists them all."""
    name, conn = str(raw.get("name", "")), str(as_dict(raw.get("connection_details")).get("name", ""))
    connection = connections.get(conn)
    connection_name = connection.connection_name if connection is not None else ""
    consumer_count = as_int(raw.get("consumer_count"))
    client, identity = attribution(connection, connection_name)
    stats = message_stats(raw.get("message_stats"))
    # Built once, whole: a copy per derived field (dataclasses.replace) cost 70 ms a poll at 5,000 channels.
    return Channel(
        name=name,
        number=as_int(raw.get("number")),
        vhost=str(raw.get("vhost", "")),
        user=str(raw.get("user", "")),
        connection=conn,
        connection_name=connection_name,
        prefetch_count=as_int(raw.get("prefetch_count")),
        global_prefetch_count=as_int(raw.get("global_prefetch_count")),
        messages_unacked=as_int(raw.get("messages_unacknowledged")),
        messages_unconfirmed=as_int(raw.get("messages_unconfirmed")),
        confirm=_confirm_mode(raw.get("confirm"), stats),
        transactional=as_bool(raw.get("transactional")),
        consumer_count=consumer_count,
        state=as_str(raw.get("state")),
        message_stats=stats,
        consumer_prefetch=None if own_prefetch is None else _own_prefetch(own_prefetch.get(name, ()),
                                                                           consumer_count),
        client=client,
        identity=identity,
    )


def _confirm_mode(flag: Any, stats: MessageStats) -> bool | None:
    """The channel's confirm flag, or True where it has counted confirms: the broker sends basic.ack to a
    publisher only in confirm mode, and the flag has been seen to lag the counters (false while 20 confirms were
    counted, pika and amqplib, 3.10), which would call a confirming publisher one without confirms."""
    return True if (stats.confirm or 0) > 0 else as_bool(flag)


def publishing_at_risk(raw_channels: Any) -> list[str]:
    """The vhosts where a channel has published without confirms or in transactions: where to read the exchanges
    and bindings, to judge what such a channel's publishes put at stake (the API does not say which exchange a
    channel publishes to, unless its rates_mode is detailed)."""
    if not isinstance(raw_channels, list):
        return []
    return sorted({str(c.get("vhost", "")) for c in raw_channels if isinstance(c, dict)
                   and (as_int(as_dict(c.get("message_stats")).get("publish")) or 0) > 0
                   and (_confirm_mode(c.get("confirm"), message_stats(c.get("message_stats"))) is False
                        or c.get("transactional") is True)})


def dead_lettering_by_exchange(raw_queues: Any) -> list[str]:
    """The vhosts where a queue dead-letters through a named exchange and either can dead-letter without a
    rejection (a message TTL, a length limit, a delivery limit) or holds dead-lettered messages at-least-once that
    no target has confirmed yet (messages_dlx): where to read the exchanges and bindings, to see whether its dead
    letters come back to it (a cycle that drops them), or where they should go and what does not take them."""
    if not isinstance(raw_queues, list):
        return []
    # Read from the raw answer, not built into Queues: this runs over every queue of every poll.
    return sorted({str(raw.get("vhost", "")) for raw in raw_queues
                   if isinstance(raw, dict) and _setting(raw, "dead-letter-exchange")
                   and (delivery_limit(raw) is not None or (as_int(raw.get("messages_dlx")) or 0) > 0
                        or any(_lowest(raw, key) is not None for key in ("message-ttl", "max-length",
                                                                         "max-length-bytes")))})


def exchanges(raw_exchanges: Any, raw_bindings: Any) -> list[Exchange]:
    """Each exchange with its type, its publish_in counter and its bindings (to queues and to other exchanges, with
    their keys)."""
    routes: dict[tuple[str, str], list[tuple[str, str, str]]] = defaultdict(list)
    for b in objects(raw_bindings, "bindings"):
        kind = str(b.get("destination_type", ""))
        # The default exchange's bindings, one to every queue, restate that it routes by queue name: left out.
        if kind in ("queue", "exchange") and b.get("source"):
            routes[(str(b.get("vhost", "")), str(b.get("source", "")))].append(
                (kind, str(b.get("destination", "")), as_str(b.get("routing_key")) or ""))
    out = []
    for x in objects(raw_exchanges, "exchanges"):
        key = (str(x.get("vhost", "")), str(x.get("name", "")))
        out.append(Exchange(vhost=key[0], name=key[1],
                            message_stats=MessageStats(publish=as_int(as_dict(x.get("message_stats")).get("publish_in"))),
                            bindings=tuple(sorted(set(routes.get(key, ())))), type=as_str(x.get("type"))))
    return out


def consumer_prefetch(consumers: Iterable[Consumer]) -> dict[str, list[int | None]]:
    """The prefetch each channel's consumers got when they subscribed: what binds them, whatever the channel's
    qos says now (a qos after basic.consume binds only later consumers). {channel name: [prefetch, ...]}"""
    own: dict[str, list[int | None]] = defaultdict(list)
    for c in consumers:
        own[c.channel].append(c.prefetch_count)
    return own


def _own_prefetch(own: Sequence[int | None], consumer_count: int | None) -> tuple[int, ...] | None:
    """The channel's consumers' own prefetch, or None unless the list gives every one of them with it."""
    return tuple(own) if all(p is not None for p in own) and len(own) == (consumer_count or 0) else None


def consumer(raw: dict, connections: dict[str, Connection]) -> Consumer:
    queue, chan = as_dict(raw.get("queue")), as_dict(raw.get("channel_details"))
    conn = str(chan.get("connection_name", ""))
    connection = connections.get(conn)
    connection_name = connection.connection_name if connection is not None else ""
    client, identity = attribution(connection, connection_name)
    return Consumer(
        vhost=str(queue.get("vhost", "")),
        queue=str(queue.get("name", "")),
        consumer_tag=str(raw.get("consumer_tag", "")),
        channel=str(chan.get("name", "")),
        connection=conn,
        connection_name=connection_name,
        user=str(chan.get("user", "")),
        prefetch_count=as_int(raw.get("prefetch_count")),
        ack_required=as_bool(raw.get("ack_required")),
        exclusive=as_bool(raw.get("exclusive")),
        active=as_bool(raw.get("active")),
        client=client,
        identity=identity,
        consumer_timeout_ms=as_int(raw.get("consumer_timeout")),
    )


def consumer_channel(raw: dict) -> str:
    """The name of the channel a consumer of /api/consumers is on ("" while the stats DB does not know it)."""
    return str(as_dict(raw.get("channel_details")).get("name", ""))


def queue(raw: dict) -> Queue:
    utilisation = raw.get("consumer_utilisation")
    if utilisation is None:  # the newer name; both may be null when nothing was measured yet
        utilisation = raw.get("consumer_capacity")
    return Queue(
        vhost=str(raw.get("vhost", "")),
        name=str(raw.get("name", "")),
        type=as_str(raw.get("type")) or "classic",
        durable=as_bool(raw.get("durable")),
        auto_delete=as_bool(raw.get("auto_delete")),
        exclusive=as_bool(raw.get("exclusive")),
        state=as_str(raw.get("state")),
        node=as_str(raw.get("node")) or as_str(raw.get("leader")),
        messages_ready=as_int(raw.get("messages_ready")),
        messages_unacked=as_int(raw.get("messages_unacknowledged")),
        messages_persistent=as_int(raw.get("messages_persistent")),
        consumers=as_int(raw.get("consumers")),
        consumer_utilisation=as_float(utilisation),
        message_stats=message_stats(raw.get("message_stats")),
        members=as_names(raw.get("members")),
        online=as_names(raw.get("online")),
        mirrors=as_names(raw.get("slave_nodes")),
        synchronised_mirrors=as_names(raw.get("synchronised_slave_nodes")),
        delivery_limit=delivery_limit(raw),
        dead_letter_exchange=dead_letter_exchange(raw),
        messages_delayed=as_int(raw.get("messages_delayed")),
        consumer_timeout_ms=queue_consumer_timeout(raw),
        arguments=queue_arguments(raw),
        head_message_timestamp=as_float(raw.get("head_message_timestamp")),
        messages_dlx=as_int(raw.get("messages_dlx")),
        dead_letter_strategy=_setting(raw, "dead-letter-strategy"),
        dead_letter_routing_key=_setting(raw, "dead-letter-routing-key"),
        max_length=_lowest(raw, "max-length"),
        max_length_bytes=_lowest(raw, "max-length-bytes"),
        overflow=_setting(raw, "overflow"),
        message_ttl_ms=_lowest(raw, "message-ttl"),
        settings_shown=settings_shown(raw),
    )


def settings_shown(raw: dict) -> bool:
    """Whether a queue of /api/queues comes with its arguments: without them (a listing that leaves them out)
    its settings are not known, which is not the same as not set."""
    return isinstance(raw.get("arguments"), (dict, list))


def _setting(raw: dict, key: str) -> str | None:
    """A queue's string setting as its x- argument or, where none, a policy's key (the argument wins, as the broker
    has it); None where neither sets it (or the answer does not show the queue's arguments: settings_shown)."""
    value = as_dict(raw.get("arguments")).get(f"x-{key}", as_dict(raw.get("effective_policy_definition")).get(key))
    return value if isinstance(value, str) else None


def _lowest(raw: dict, key: str) -> int | None:
    """A queue's numeric limit: the lower of its x- argument and a policy's key, as the broker applies them (an
    operator policy's lower value is in the effective definition); None for none."""
    limits = [v for v in (as_dict(raw.get("arguments")).get(f"x-{key}"),
                          as_dict(raw.get("effective_policy_definition")).get(key))
              if is_number(v) and v >= 0]
    return int(min(limits)) if limits else None


def as_pairs(raw: Any, leave_out: tuple[str, ...] = ()) -> tuple[tuple[str, str], ...]:
    """An object of arguments or policy keys as sorted (name, JSON value) pairs: comparable, hashable, and
    what the broker holds, whatever the type of each value."""
    return tuple(sorted((str(k), json.dumps(v, sort_keys=True)) for k, v in as_dict(raw).items()
                        if k not in leave_out))


def queue_arguments(raw: dict) -> tuple[tuple[str, str], ...]:
    return as_pairs(raw.get("arguments"), ("x-queue-type",))


def policy(raw: dict, operator: bool = False) -> Policy:
    return Policy(vhost=str(raw.get("vhost", "")), name=str(raw.get("name", "")),
                  pattern=str(raw.get("pattern", "")), apply_to=str(raw.get("apply-to", "")),
                  definition=as_pairs(raw.get("definition")), operator=operator)


def deprecated_feature(raw: dict) -> DeprecatedFeature:
    return DeprecatedFeature(name=str(raw.get("name", "")), phase=str(raw.get("deprecation_phase", "")),
                             doc_url=as_str(raw.get("doc_url")) or "")


def queue_consumer_timeout(raw: dict) -> int | None:
    """The queue's own consumer timeout, in ms: its x-consumer-timeout argument, else a policy's
    consumer-timeout (RabbitMQ 3.12 and later apply them); None where neither is set."""
    arguments, policy = as_dict(raw.get("arguments")), as_dict(raw.get("effective_policy_definition"))
    for timeout in (arguments.get("x-consumer-timeout"), policy.get("consumer-timeout")):
        if is_number(timeout) and timeout > 0:
            return int(timeout)
    return None


def delivery_limit(raw: dict) -> int | None:
    """The queue's delivery limit: RabbitMQ 4's `delivery_limit` (a number, or "unlimited"), else 3.x's
    x-delivery-limit argument or delivery-limit policy key; None for none (a negative limit disables it)."""
    arguments, policy = as_dict(raw.get("arguments")), as_dict(raw.get("effective_policy_definition"))
    for limit in (raw.get("delivery_limit"), policy.get("delivery-limit"), arguments.get("x-delivery-limit")):
        if limit == "unlimited":
            return None
        if is_number(limit):
            return int(limit) if limit >= 0 else None
    return None


def dead_letter_exchange(raw: dict) -> str | None:
    """Where the queue dead-letters: its x-dead-letter-exchange argument, or a policy's dead-letter-exchange; ""
    is the default exchange (a working target with a routing key); None when neither is set (or the answer does
    not show the queue's arguments: settings_shown)."""
    return _setting(raw, "dead-letter-exchange")


def objects(raw: Any, endpoint: str) -> list[dict]:
    if not isinstance(raw, list) or not all(isinstance(item, dict) for item in raw):
        raise MalformedResponse(endpoint, "answer is not a JSON list of objects")
    return raw


class Built:
    """The channels and consumers of the last snapshot with what each was built from (its JSON, its connection,
    its consumers' prefetch), kept by a source from one poll to the next: one whose inputs are unchanged is the
    same record again, not built anew, and model.snapshot.sharing finds it without hashing it. At 5,000 mostly
    idle channels that is most of them."""

    def __init__(self) -> None:
        self.channels: dict[str, tuple[tuple, Channel]] = {}
        self.consumers: dict[tuple[str, str], tuple[tuple, Consumer]] = {}


def _again(last: dict, now: dict, key, inputs: tuple, build):
    """The record built from `inputs` at the last poll if they are equal now, else build(); kept in `now`."""
    held = last.get(key)
    record = held[1] if held is not None and held[0] == inputs else build()
    now[key] = (inputs, record)
    return record


def snapshot(raw: dict[str, Any], taken_at: float, selection: Selection = Selection(),
             built: Built | None = None) -> Snapshot:
    """Build the attributed snapshot from one poll's JSON, keyed by endpoint name; with `built`, the last
    poll's records where their inputs are unchanged (the same snapshot either way), and `built` updated."""
    ov = overview(raw["overview"])
    connections = [connection(c) for c in objects(raw["connections"], "connections")]
    connections = [c for c in connections if selection.vhost(c.vhost)]
    by_name = {c.name: c for c in connections}
    # A consumer can be listed a moment before the stats DB knows its channel (channel_details is
    # empty): leave it to the next poll rather than export a series that would lose its culprit.
    if built is None:
        consumers = [consumer(c, by_name) for c in objects(raw["consumers"], "consumers") if consumer_channel(c)]
        own_prefetch = consumer_prefetch(consumers)
        channels = [channel(c, by_name, own_prefetch) for c in objects(raw["channels"], "channels")]
    else:
        made: dict = {}
        consumers = []
        for c in objects(raw["consumers"], "consumers"):
            if consumer_channel(c):
                conn = by_name.get(str(as_dict(c.get("channel_details")).get("connection_name", "")))
                consumers.append(_again(built.consumers, made, (consumer_channel(c), str(c.get("consumer_tag", ""))),
                                        (c, conn), lambda c=c: consumer(c, by_name)))
        built.consumers, made = made, {}
        own_prefetch = consumer_prefetch(consumers)
        channels = []
        for c in objects(raw["channels"], "channels"):
            name = str(c.get("name", ""))
            conn = by_name.get(str(as_dict(c.get("connection_details")).get("name", "")))
            channels.append(_again(built.channels, made, name, (c, conn, own_prefetch.get(name)),
                                   lambda c=c: channel(c, by_name, own_prefetch)))
        built.channels = made
    queues = [queue(q) for q in objects(raw["queues"], "queues")]
    notes = []
    if ov.statistics_disabled:
        notes.append("management statistics are disabled on the broker: no message counters are reported")
    fsync_reported = reports_fsync(ov.rabbitmq_version)
    if not fsync_reported:
        notes.append("RabbitMQ 4 reports fsync statistics as zeros: node fsync metrics are not exported")
    return Snapshot(
        taken_at=taken_at,
        overview=ov,
        nodes=tuple(node(n, fsync_reported) for n in objects(raw["nodes"], "nodes")),
        vhosts=tuple(sorted(str(v.get("name", "")) for v in objects(raw["vhosts"], "vhosts")
                            if selection.vhost(str(v.get("name", ""))))),
        connections=tuple(connections),
        channels=tuple(c for c in channels if selection.vhost(c.vhost)),
        consumers=tuple(c for c in consumers if selection.vhost(c.vhost) and selection.queue(c.queue)),
        queues=tuple(q for q in queues if selection.vhost(q.vhost) and selection.queue(q.name)),
        exchanges=tuple(x for x in exchanges(raw.get("exchanges", []), raw.get("bindings", []))
                        if selection.vhost(x.vhost)),
        notes=tuple(notes),
    )
