"""The normaliser on JSON recorded from a real RabbitMQ 3.10 node, and on the shapes other versions send."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from ackscope.diagnosis.rules import Context, evaluate
from ackscope.sources import Selection, cli
from ackscope.sources.management import normalise
from ackscope.sources.management.normalise import MalformedResponse

RECORDED = Path(__file__).parent / "data" / "rabbitmq-3.10.8"


@pytest.fixture
def raw() -> dict:
    return {p.stem: json.loads(p.read_text()) for p in RECORDED.glob("*.json")}


def test_channels_and_consumers_are_attributed_to_the_client_connection_name(raw):
    snap = normalise.snapshot(raw, taken_at=1.0)
    by_client = {c.connection_name: c for c in snap.channels}
    assert set(by_client) == {"orders-publisher", "orders-worker", "payments-hoarder"}
    publisher = by_client["orders-publisher"]
    assert publisher.confirm is True and publisher.transactional is False
    assert publisher.message_stats.publish == 91 and publisher.message_stats.return_unroutable == 1
    assert publisher.message_stats.deliver_get is None, "a publish-only channel reports no delivery counts"
    worker = by_client["orders-worker"]
    assert worker.prefetch_count == 10 and worker.messages_unacked == 10 and worker.prefetch_limit == 10
    consumers = {c.connection_name: c for c in snap.consumers}
    assert consumers["orders-worker"].queue == "orders" and consumers["orders-worker"].ack_required is True
    assert consumers["payments-hoarder"].prefetch_count == 0


def test_queue_types_and_absent_fields_survive_normalising(raw):
    queues = {q.name: q for q in normalise.snapshot(raw, taken_at=1.0).queues}
    assert {q.type for q in queues.values()} == {"classic", "quorum", "stream"}
    assert queues["orders"].messages_persistent == 30
    assert queues["audit"].messages_persistent is None, "streams do not report it"
    assert queues["audit"].consumer_utilisation is None


def test_heartbeat_and_node_facts_are_read(raw):
    snap = normalise.snapshot(raw, taken_at=1.0)
    heartbeats = {c.connection_name: c.heartbeat_seconds for c in snap.connections}
    assert heartbeats["orders-worker"] == 0 and heartbeats["orders-publisher"] == 60
    (node,) = snap.nodes
    assert node.mem_alarm is False and node.mem_used > 0 and node.io_sync_count is not None
    assert snap.overview.rabbitmq_version == "3.10.8"


def test_rabbitmq_4_fsync_zeros_are_not_taken_as_data(raw):
    raw["overview"]["rabbitmq_version"] = "4.1.0"
    raw["nodes"][0].update(io_sync_count=0, io_sync_avg_time=0.0)
    snap = normalise.snapshot(raw, taken_at=1.0)
    assert snap.nodes[0].io_sync_count is None and snap.nodes[0].io_sync_avg_seconds is None
    assert any("fsync" in note for note in snap.notes)


def test_newer_consumer_capacity_name_is_used_when_utilisation_is_missing(raw):
    q = dict(raw["queues"][0])
    q.pop("consumer_utilisation", None)
    q["consumer_capacity"] = 0.75
    assert normalise.queue(q).consumer_utilisation == 0.75


def test_missing_fields_become_none_never_zero_and_never_crash(raw):
    stripped = copy.deepcopy(raw)
    for endpoint in ("nodes", "connections", "channels", "consumers", "queues"):
        stripped[endpoint] = [{k: v for k, v in item.items() if k in ("name", "vhost", "channel_details", "queue")}
                              for item in stripped[endpoint]]
    stripped["overview"] = {}
    snap = normalise.snapshot(stripped, taken_at=1.0)
    assert all(c.prefetch_count is None and c.confirm is None for c in snap.channels)
    assert all(q.messages_ready is None and q.message_stats.publish is None for q in snap.queues)
    assert snap.overview.message_stats.publish is None


def test_non_finite_or_boolean_numbers_are_not_counts():
    q = normalise.queue({"name": "q", "messages_ready": float("inf"), "messages_unacknowledged": float("nan"),
                         "consumers": True, "consumer_utilisation": 0.5})
    assert (q.messages_ready, q.messages_unacked, q.consumers, q.consumer_utilisation) == (None, None, None, 0.5)


def test_empty_stats_sent_as_a_list_read_as_no_stats():
    ch = normalise.channel({"name": "c", "message_stats": []}, {})
    assert ch.message_stats.publish is None


@pytest.mark.parametrize("endpoint,bad", [("channels", {"items": []}), ("queues", [1, 2]),
                                          ("overview", ["not", "an", "object"])])
def test_wrong_shapes_raise_malformed_response(raw, endpoint, bad):
    raw[endpoint] = bad
    with pytest.raises(MalformedResponse, match=endpoint):
        normalise.snapshot(raw, taken_at=1.0)


def test_include_and_exclude_match_whole_names(raw):
    only = Selection(include_queues=re.compile("pay.*"))
    snap = normalise.snapshot(raw, taken_at=1.0, selection=only)
    assert [q.name for q in snap.queues] == ["payments"]
    assert [c.queue for c in snap.consumers] == ["payments"]
    none = Selection(exclude_vhosts=re.compile("/"))
    snap = normalise.snapshot(raw, taken_at=1.0, selection=none)
    assert not snap.queues and not snap.channels and not snap.connections and snap.vhosts == ()
    partial = Selection(include_queues=re.compile("pay"))  # a prefix is not the whole name
    assert not normalise.snapshot(raw, taken_at=1.0, selection=partial).queues


def test_columns_cover_every_field_the_parsers_read(raw):
    """The recorded answers were fetched with COLUMNS: a parser reading an unrequested field would see None."""
    snap = normalise.snapshot(raw, taken_at=1.0)
    worker = next(c for c in snap.channels if c.connection_name == "orders-worker")
    assert None not in (worker.number, worker.user, worker.state, worker.consumer_count, worker.global_prefetch_count)
    orders = next(q for q in snap.queues if q.name == "orders")
    assert None not in (orders.durable, orders.auto_delete, orders.exclusive, orders.state, orders.node,
                        orders.consumers, orders.message_stats.publish)


def test_an_unnamed_client_gets_an_identity_from_its_properties_and_peer(raw):
    conn = copy.deepcopy(raw["connections"][0])
    conn["client_properties"] = {"product": "py-amqp", "product_version": "5.4.2", "platform": "CPython 3.11.7"}
    conn.pop("user_provided_name", None)
    conn.update(peer_host="10.0.3.7", peer_port=51234, user="celery")
    raw["connections"][0] = conn
    snap = normalise.snapshot(raw, taken_at=1.0)
    c = next(c for c in snap.connections if c.name == conn["name"])
    assert (c.connection_name, c.client, c.platform) == ("", "py-amqp 5.4.2", "CPython 3.11.7")
    assert c.identity == "py-amqp 5.4.2 from 10.0.3.7:51234 as celery"
    # Its channels and consumers carry the same identity and client: findings and labels name it.
    mine = [ch for ch in snap.channels if ch.connection == c.name] + \
        [co for co in snap.consumers if co.connection == c.name]
    assert mine and {(r.identity, r.client) for r in mine} == {(c.identity, "py-amqp 5.4.2")}


def test_unchanged_channels_and_consumers_are_the_last_polls_records_and_changed_ones_are_built_anew(raw):
    built = normalise.Built()
    first = normalise.snapshot(raw, 1.0, built=built)
    assert first.channels and first.consumers
    again = copy.deepcopy(raw)  # equal JSON, as the next poll reads it
    name = again["channels"][0]["name"]
    again["channels"][0]["messages_unacknowledged"] = 12345
    second = normalise.snapshot(again, 2.0, built=built)
    assert second == normalise.snapshot(again, 2.0)  # the same snapshot as without what was built
    changed = next(c for c in second.channels if c.name == name)
    assert changed.messages_unacked == 12345 and changed not in first.channels
    assert all(c is next(o for o in first.channels if o.name == c.name) for c in second.channels if c.name != name)
    assert all(a is b for a, b in zip(second.consumers, first.consumers))
    renamed = copy.deepcopy(again)
    conn = next(c["connection_details"]["name"] for c in renamed["channels"])
    next(c for c in renamed["connections"] if c["name"] == conn)["user_provided_name"] = "renamed"
    third = normalise.snapshot(renamed, 3.0, built=built)
    assert third == normalise.snapshot(renamed, 3.0)
    assert {c.connection_name for c in third.channels if c.connection == conn} == {"renamed"}


def test_a_quorum_queue_listed_before_its_statistics_has_its_leader_as_its_node_and_its_members():
    # As a 3.10 node listed it (columns=) a moment after one member's node was killed: no node, no state.
    raw = {"leader": "rabbit-1@localhost", "name": "qq", "type": "quorum", "vhost": "/",
           "members": ["rabbit-1@localhost", "rabbit-3@localhost", "rabbit-2@localhost"],
           "online": ["rabbit-1@localhost", "rabbit-2@localhost"]}
    q = normalise.queue(raw)
    assert q.node == "rabbit-1@localhost" and q.state is None
    assert q.members == ("rabbit-1@localhost", "rabbit-2@localhost", "rabbit-3@localhost")
    assert q.online == ("rabbit-1@localhost", "rabbit-2@localhost")


@pytest.mark.parametrize("fields, limit, dead_letters, target", [
    ({"delivery_limit": 20, "arguments": {"x-queue-type": "quorum"}, "effective_policy_definition": {}}, 20, False,
     "no dead-letter exchange"),
    ({"delivery_limit": "unlimited", "arguments": {"x-delivery-limit": -1}}, None, False, "no dead-letter exchange"),
    ({"arguments": {"x-delivery-limit": 5}}, 5, False, "no dead-letter exchange"),  # 3.x: the argument
    ({"arguments": {}, "effective_policy_definition": {"delivery-limit": 3, "dead-letter-exchange": "dlx"}}, 3, True,
     "exchange 'dlx' with each message's own routing key"),
    ({"arguments": {"x-dead-letter-exchange": "mine"}, "effective_policy_definition": {"dead-letter-exchange": "p"}},
     None, True, "exchange 'mine' with each message's own routing key"),  # the argument wins over a policy
    # The default exchange with a routing key is a working target, not "none" (issue 55's K1).
    ({"arguments": {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "fld.dlq"}}, None, True,
     "the default exchange with routing key 'fld.dlq'"),
    ({"arguments": []}, None, False, "no dead-letter exchange"),  # an empty argument table, as 3.10 may write it
    ({}, None, None, "not shown by the source"),  # arguments not shown: unknown, not absent
])
def test_a_queues_delivery_limit_and_dead_letter_target_as_each_release_shows_them(fields, limit, dead_letters,
                                                                                    target):
    q = normalise.queue({"name": "q", "vhost": "/", "type": "quorum", **fields})
    assert (q.delivery_limit, q.dead_letters, q.dead_letter_target) == (limit, dead_letters, target)


@pytest.mark.parametrize("fields, shown, overflow, max_length, max_bytes, ttl", [
    ({"arguments": {"x-max-length": 2}}, True, "drop-head", 2, None, None),  # not set: the broker drops the head
    ({"arguments": {"x-max-length": 10, "x-overflow": "reject-publish"},
      "effective_policy_definition": {"max-length": 5, "overflow": "drop-head"}}, True, "reject-publish", 5, None, None),
    ({"arguments": {"x-max-length-bytes": 1024, "x-message-ttl": 5000}}, True, "drop-head", None, 1024, 5000),
    ({"arguments": {}, "effective_policy_definition": {"overflow": "reject-publish-dlx", "message-ttl": 60000}}, True,
     "reject-publish-dlx", None, None, 60000),
    ({}, False, None, None, None, None),  # not shown: none of them is known
])
def test_a_queues_length_limits_overflow_and_ttl_keep_not_set_apart_from_not_shown(fields, shown, overflow,
                                                                                  max_length, max_bytes, ttl):
    q = normalise.queue({"name": "q", "vhost": "/", **fields})
    assert (q.settings_shown, q.overflow_mode, q.max_length, q.max_length_bytes, q.message_ttl_ms) == (
        shown, overflow, max_length, max_bytes, ttl)


def test_the_plugins_place_is_read_from_the_listeners_per_node():
    from ackscope.sources.prometheus_plugin.listeners import default_url, plugin_urls
    overview = {"node": "rabbit@a", "listeners": [
        {"node": "rabbit@a", "protocol": "http/prometheus", "ip_address": "::", "port": 15693},
        {"node": "rabbit@b", "protocol": "http/prometheus", "ip_address": "::", "port": 15692,
         "socket_opts": {"ip": "10.0.0.2"}},  # 3.10: bound to one address, listed as '::'
        {"node": "rabbit@c", "protocol": "https/prometheus", "ip_address": "0.0.0.0", "port": 15691},
        {"node": "rabbit@a", "protocol": "amqp", "ip_address": "::", "port": 5672}]}
    assert plugin_urls(overview, "https://rabbit.example:15671") == {
        "rabbit@a": "http://rabbit.example:15693", "rabbit@b": "http://10.0.0.2:15692",
        "rabbit@c": "https://c:15691"}
    assert plugin_urls({"listeners": "nonsense"}, "http://h:15672") == {}
    assert default_url("https://[::1]:15671") == "https://[::1]:15692"


VOID_NAME = Path(__file__).parent / "data" / "void-connection-name"  # recorded from 3.10.8: void, long string, number


def test_a_connection_is_named_only_by_the_name_the_broker_took():
    # A void connection_name is shown as "undefined" in client_properties, a number as a number; the broker
    # took neither as a name (no user_provided_name), so neither is one. Recorded from a real node.
    connections = [normalise.connection(c) for c in json.loads((VOID_NAME / "connections.json").read_text())]
    assert sorted(c.connection_name for c in connections) == ["", "", "billing"]
    assert all(c.identity.startswith("Pika Python Client Library 1.4.4 from 127.0.0.1:")
               for c in connections if not c.connection_name)
    enrichment = cli.parse("[]", (VOID_NAME / "cli_list_connections.json").read_text())
    assert sorted(c.connection_name for c in enrichment.connections.values()) == ["", "", "billing"]


ROUTES = Path(__file__).parent / "data" / "routes-3.10.8"  # recorded: a producer and an event publisher, no confirms


def test_where_publishers_without_confirms_publish_is_read_from_the_vhosts_exchanges_and_bindings(raw):
    recorded = {name: json.loads((ROUTES / f"{name}.json").read_text())
                for name in ("channels", "queues", "exchanges", "bindings")}
    assert normalise.publishing_at_risk(recorded["channels"]) == ["/"]
    assert normalise.publishing_at_risk(raw["channels"]) == []  # every publisher confirms: nothing more is read
    s = normalise.snapshot({**raw, **recorded, "connections": [], "consumers": []}, 1000.0)
    routes = {x.name: (x.message_stats.publish, x.bindings) for x in s.exchanges if x.message_stats.publish}
    assert routes == {"tasks": (6, (("queue", "tasks", ""),)), "events": (10, (("queue", "events.gossip", ""),))}
    assert next(x for x in s.exchanges if x.name == "").bindings == ()  # "routes by queue name" is not a binding
    # The API does not say which channel published where; the counts do: 6 tasks, 10 events.
    found = {f.evidence["published"]: f for f in evaluate(Context(s)) if f.rule == "publisher-without-confirms"}
    assert (found[6].severity, found[10].severity) == ("warning", "info")
    assert found[6].evidence["at_stake"] == [{"queue": "tasks", "durable": True,
                                              "persistent": "6 of the 6 messages it holds"}]
    assert found[10].evidence["queues"][0] == {"queue": "events.gossip", "durable": False, "auto_delete": True,
                                               "persistent": "0 of the 10 messages it holds"}


def test_the_exchanges_are_read_where_a_queue_holds_dead_letters_at_least_once_no_target_confirmed():
    """A quorum queue without a length limit, TTL or delivery limit (3.x's default) that holds dead-lettered
    messages: where they should go is only known from its vhost's exchanges and bindings."""
    def held(vhost: str, dlx: str, messages_dlx: int) -> dict:
        return {"vhost": vhost, "messages_dlx": messages_dlx, "arguments": {
            "x-queue-type": "quorum", "x-dead-letter-exchange": dlx, "x-dead-letter-strategy": "at-least-once",
            "x-overflow": "reject-publish"}}
    assert normalise.dead_lettering_by_exchange([held("stuck", "dlx", 3), held("healthy", "dlx", 0),
                                                 held("default", "", 3)]) == ["stuck"]


def test_exchanges_that_took_nothing_carry_no_counter_and_that_is_no_missing_field():
    recorded = {name: json.loads((ROUTES / f"{name}.json").read_text()) for name in ("exchanges", "bindings")}
    assert any("message_stats" not in x for x in recorded["exchanges"])  # amq.direct and the like took nothing
    assert normalise.missing_fields(recorded) == ()


def test_a_channel_that_counted_confirms_is_in_confirm_mode_even_when_its_flag_lags(raw):
    publisher = next(c for c in raw["channels"] if c["confirm"] is True)
    publisher["confirm"] = False  # as one poll of a 3.10 node sent it, while the channel had counted 20 confirms
    snap = normalise.snapshot(raw, taken_at=1.0)
    channel = next(c for c in snap.channels if c.name == publisher["name"])
    assert channel.message_stats.confirm and channel.confirm is True
    assert normalise.publishing_at_risk([publisher]) == []
    publisher["message_stats"]["confirm"] = 0
    assert normalise.channel(publisher, {}).confirm is False, "no confirm counted: the flag is taken as it is"


def test_the_consumer_timeout_in_force_is_read_per_consumer_and_per_queue_as_4x_shows_it():
    # As RabbitMQ 4.0.5 answered: a consumer's consumer_timeout, from its queue's argument or policy or the node's.
    raw = {"queue": {"name": "jobs", "vhost": "/"}, "consumer_tag": "c1", "channel_details": {"name": "ch"},
           "prefetch_count": 5, "ack_required": True, "consumer_timeout": 90000}
    assert normalise.consumer(raw, {}).consumer_timeout_ms == 90000
    assert normalise.consumer({**raw, "consumer_timeout": False}, {}).consumer_timeout_ms is None  # AMQP 1.0, 4.3
    by_argument = {"name": "jobs", "arguments": {"x-consumer-timeout": 70000}, "effective_policy_definition": {}}
    by_policy = {"name": "jobs", "arguments": {}, "effective_policy_definition": {"consumer-timeout": 120000}}
    assert normalise.queue(by_argument).consumer_timeout_ms == 70000
    assert normalise.queue(by_policy).consumer_timeout_ms == 120000
    assert normalise.queue({"name": "jobs", "arguments": {}}).consumer_timeout_ms is None


def test_the_churn_is_read_from_the_overview_and_unknown_where_the_broker_keeps_none(raw):
    raw["overview"]["churn_rates"] = {"connection_created": 116, "connection_closed": 115, "channel_created": 120,
                                      "channel_closed": 118, "connection_created_details": {"rate": 2.0}}
    churn = normalise.snapshot(raw, taken_at=1.0).overview.churn
    assert (churn.connections_opened, churn.connections_closed, churn.channels_opened) == (116, 115, 120)
    for absent in ({}, None):  # a node just started; statistics off
        raw["overview"]["churn_rates"] = absent
        assert normalise.snapshot(raw, taken_at=1.0).overview.churn is None
