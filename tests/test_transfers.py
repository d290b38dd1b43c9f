"""Shovels and federation links: the plugins' answers recorded from real nodes (tests/data/record_transfers.py)
read into the model with every password taken out, and the rules that judge them, on small snapshots."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from snapshot_builders import OVERVIEW, node, queue, snapshot

from ackscope.core.amqp import without_password
from ackscope.diagnosis.rules import Context, evaluate
from ackscope.diagnosis.shovels import here
from ackscope.model.snapshot import Exchange, FederationLink, MessageStats, Shovel
from ackscope.sources.management import shovels as normalise

DATA = Path(__file__).parent / "data"
RELEASES = ("3.10.8", "4.0.5", "4.3.6")


def _recorded(version: str) -> dict:
    return json.loads((DATA / f"transfers-{version}.json").read_text())


def _read(version: str) -> tuple[list[Shovel], list[FederationLink]]:
    got = _recorded(version)["with_plugins"]
    defined = normalise.definitions(got["/parameters/shovel"]["body"])
    return (normalise.shovels(got["/shovels"]["body"], defined),
            normalise.federation_links(got["/federation-links"]["body"]))


@pytest.mark.parametrize("version", RELEASES)
def test_each_shovel_has_the_ack_mode_of_its_definition_and_no_password(version):
    shovels, links = _read(version)
    by_name = {v.name: v for v in shovels}
    assert {n: v.ack_mode for n, v in by_name.items()} == {
        "to-b-no-ack": "no-ack", "to-b-on-publish": "on-publish", "to-b-on-confirm": "on-confirm",
        "to-nowhere": "on-confirm"}  # the broker's default where the definition says none
    assert all(v.state == "running" and v.source_queue == "src" and v.destination_queue == "dst"
               for n, v in by_name.items() if n.startswith("to-b"))
    # The definitions hold the passwords as declared (guest's, and "secretpw"); no record does.
    assert "secretpw" in json.dumps(_recorded(version))
    text = repr(shovels) + repr(links)
    assert "secretpw" not in text and "guest:guest" not in text
    assert by_name["to-nowhere"].destination_uri == "amqp://u@no-such-host.invalid:5672"


def test_a_shovel_that_cannot_connect_is_starting_on_3_10_and_4_0_and_terminated_with_its_reason_on_4_3():
    assert [v.state for v in _read("3.10.8")[0] if v.name == "to-nowhere"] == ["starting"]
    assert [v.state for v in _read("4.0.5")[0] if v.name == "to-nowhere"] == ["starting"]
    [v] = [v for v in _read("4.3.6")[0] if v.name == "to-nowhere"]
    assert (v.state, v.reason) == ("terminated", '"failed to connect to destination"')


def test_forwarded_and_pending_are_counted_from_4_1_only():
    assert {v.name: v.forwarded for v in _read("4.3.6")[0] if v.moving}["to-b-on-publish"] == 100
    assert all(v.forwarded is None and v.pending is None for version in ("3.10.8", "4.0.5")
               for v in _read(version)[0])


@pytest.mark.parametrize("version", RELEASES)
def test_a_federation_upstream_that_does_not_resolve_shows_the_brokers_error(version):
    [k] = [k for k in _read(version)[1] if k.upstream == "nowhere"]
    assert (k.status, k.error, k.type, k.local, k.uri) == ("error", "unknown_host", "exchange", "fedx",
                                                            "amqp://no-such-host.invalid")


def test_without_the_plugins_the_status_endpoints_answer_404_and_no_shovel_is_defined():
    for version in RELEASES:
        without = _recorded(version)["without_plugins"]
        assert {p: a["status"] for p, a in without.items()} == {"/shovels": 404, "/parameters/shovel": 200,
                                                               "/federation-links": 404}
        assert normalise.definitions(without["/parameters/shovel"]["body"]) == {}


def test_4_x_flow_control_on_a_running_shovel_is_its_state():
    running = {"name": "s", "vhost": "/", "type": "dynamic", "state": "running", "blocked_status": "blocked"}
    [v] = normalise.shovels([running], {})
    assert v.state == "blocked" and v.moving


def test_a_malformed_shovel_answer_is_named():
    with pytest.raises(normalise.MalformedTransfers, match="shovels are not a JSON list"):
        normalise.shovels({"error": "x"}, {})


@pytest.mark.parametrize("uri, shown", [
    ("amqp://user:pw@host:5672/%2F", "amqp://user@host:5672/%2F"),
    ("amqp://host", "amqp://host"),
    ("amqp://", "amqp://"),
    ("amqps://u:p%40ss@h/v?cacertfile=/c.pem&password=topsecret", "amqps://u@h/v?cacertfile=/c.pem&password=[redacted]"),
    ("amqp://u:pw@h:notaport/v", "amqp://u@h:notaport/v"),
])
def test_a_uri_is_shown_without_its_password(uri, shown):
    assert without_password(uri) == shown


def test_a_uri_without_a_host_is_this_broker_in_the_vhost_it_names_or_the_shovels():
    assert here("amqp://", "orders") == "orders"
    assert here("amqp:///billing", "orders") == "billing"
    assert here("amqp://", None) == "/"
    assert here("amqp://127.0.0.1:5672/%2F", "/") is None


# -- the rules -------------------------------------------------------------------------------------------------
def _shovel(name="s", **kw) -> Shovel:
    base = Shovel(name=name, type="dynamic", vhost="/", state="running", node="rabbit@test", ack_mode="no-ack",
                  source_uri="amqp://", source_queue="src", destination_uri="amqp://", destination_queue="dst")
    return replace(base, **kw)


def _findings(ctx: Context, rule: str):
    return [f for f in evaluate(ctx) if f.rule == rule]


def test_a_no_ack_shovel_into_a_durable_queue_is_a_warning_naming_what_a_failure_loses():
    s = snapshot(queues=[queue("src"), queue("dst", messages_ready=10, messages_persistent=10)],
                 shovels=[_shovel()])
    [f] = _findings(Context(s), "shovel-without-confirms")
    assert f.severity == "warning" and f.object == "shovel s" and f.connection_name == "Shovel s"
    assert "forgot each on delivery" in f.evidence["loses_on_failure"]
    assert f.evidence["at_stake"][0]["queue"] == "dst"


def test_an_on_confirm_shovel_is_not_named_and_an_on_publish_one_is():
    s = snapshot(queues=[queue("src"), queue("dst")],
                 shovels=[_shovel("safe", ack_mode="on-confirm"), _shovel("fast", ack_mode="on-publish")])
    assert [f.object for f in _findings(Context(s), "shovel-without-confirms")] == ["shovel fast"]


def test_a_shovel_into_a_queue_that_keeps_nothing_is_info_and_one_into_another_broker_a_warning():
    s = snapshot(queues=[queue("src"), queue("dst", durable=False)],
                 shovels=[_shovel("local"), _shovel("remote", destination_uri="amqp://other.example/%2F")])
    found = {f.object: f for f in _findings(Context(s), "shovel-without-confirms")}
    assert found["shovel local"].severity == "info"
    assert found["shovel remote"].severity == "warning"
    assert "another broker" in found["shovel remote"].evidence["stakes"]


def test_a_shovel_into_an_exchange_is_judged_by_the_queues_it_is_bound_to():
    s = snapshot(queues=[queue("src"), queue("audit", messages_ready=3, messages_persistent=3)],
                 exchanges=[Exchange("/", "events", MessageStats(), bindings=(("queue", "audit", ""),))],
                 shovels=[_shovel(destination_queue=None, destination_exchange="events")])
    [f] = _findings(Context(s), "shovel-without-confirms")
    assert f.severity == "warning" and f.evidence["at_stake"][0]["queue"] == "audit"


def _stopped(depths: tuple[int, int], max_length=None, alarm=False, state="terminated"):
    start, now = (snapshot(taken_at=t, queues=[queue("src", messages_ready=d, max_length=max_length)],
                           nodes=[node(mem_alarm=alarm and t > 0)],
                           shovels=[_shovel(state=state, reason="failed to connect")])
                  for t, d in zip((0.0, 60.0), depths))
    return _findings(Context(now, start), "shovel-not-running")


def test_a_stopped_shovel_whose_source_grows_is_a_warning_and_critical_near_its_length_limit_or_an_alarm():
    [f] = _stopped((10, 50))
    assert f.severity == "warning" and f.evidence["source_grew_in_window"] == 40
    assert "failed to connect" in f.explanation
    assert _stopped((10, 95), max_length=100)[0].severity == "critical"
    assert _stopped((10, 50), alarm=True)[0].severity == "critical"
    assert _stopped((50, 50))[0].severity == "info"


def test_a_shovel_seen_stopped_once_or_running_is_not_named():
    assert _stopped((10, 50), state="running") == []
    s = snapshot(queues=[queue("src", messages_ready=50)], shovels=[_shovel(state="starting")])
    assert _findings(Context(s), "shovel-not-running") == []  # one poll: it may be starting a moment


def test_a_shovel_blocked_for_two_polls_is_a_warning():
    on_4 = replace(OVERVIEW, rabbitmq_version="4.3.6", management_version="4.3.6")
    before, now = (snapshot(taken_at=t, overview=on_4, shovels=[_shovel(state="blocked", pending=7)])
                   for t in (0.0, 10.0))
    [f] = _findings(Context(now, before), "shovel-blocked")
    assert f.severity == "warning" and "7 messages wait" in f.explanation


def test_a_federation_link_in_error_at_the_window_start_and_now_is_named_with_the_brokers_error():
    link = FederationLink("/", "nowhere", "exchange", "fedx", "fedx", "error", "amqp://no-such-host.invalid",
                          error="unknown_host")
    start, now = (snapshot(taken_at=t, federation_links=[link]) for t in (0.0, 60.0))
    [f] = _findings(Context(now, start), "federation-link-not-running")
    assert f.severity == "warning" and f.explanation.endswith(": unknown_host.")
    assert _findings(Context(now, snapshot(taken_at=0.0, federation_links=[replace(link, status="running")])),
                     "federation-link-not-running") == []
