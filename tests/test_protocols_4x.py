"""RabbitMQ 4's other half, on the 4.x releases of the matrix (4.0 from Debian 13, the newest from unstable): AMQP
1.0 clients of two code bases (RabbitMQ's own rabbitmq-amqp-python-client, Qpid Proton's python binding) and a
stream-protocol client (rstream) beside an AMQP 0-9-1 consumer of the same stream, each a process of its own,
judged by an exporter watching the node as a user runs it: statistics on, and off as the container image sets
them."""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Iterator

import pika
import pytest
import requests
from client_processes import Clients
from dashboard_helpers import frames, page
from helpers import (
    findings,
    only_vhost,
    own_vhost,
    polls_seen,
    private_broker,
    scrape,
    value,
    wait_for,
    wait_for_sample,
)
from probe_helpers import probe_config, probe_samples, quick, running_probes, wait_probe

from ackscope.diagnosis.thresholds import Thresholds
from ackscope.workloads.private_broker import ADMIN_PASSWORD, ADMIN_USER, LocalBroker
from ackscope.workloads.rabbitmq_release import Release
from ackscope_testkit.fault_proxy import FaultProxy

MATRIX = {"4.0": "trixie", "newest": "sid"}
WINDOW = 20.0
PLUGINS = ("rabbitmq_management", "rabbitmq_prometheus", "rabbitmq_stream", "rabbitmq_stream_management",
           "rabbitmq_mqtt", "rabbitmq_stomp")


@pytest.fixture(scope="module", params=list(MATRIX))
def release(request) -> Release:
    found = Release.in_root(MATRIX[request.param])
    if request.param == "4.0":
        assert found.name == "4.0", f"the 4.0 slot of the matrix holds RabbitMQ {found.version}"
    return found


@pytest.fixture(scope="module")
def node(release) -> Iterator[LocalBroker]:
    with private_broker(f"ackscope-p{release.name.replace('.', '')}", release=release, plugins=PLUGINS) as broker:
        yield broker


@pytest.fixture
def vhost(node) -> Iterator[str]:
    with own_vhost(node) as name:
        yield name


def _watching(start_exporter, broker: LocalBroker, vhost: str, **options):
    return start_exporter(broker.management_url, interval=0.5, thresholds=Thresholds(window_seconds=WINDOW),
                          selection=only_vhost(vhost), **options)


def _clients(broker: LocalBroker, vhost: str, tmp_path) -> Clients:
    running = Clients(broker.amqp_url(vhost), tmp_path)
    running.env["STREAM_PORT"] = str(broker.ports.stream)
    return running


def _links_unknown(exporter, why: str) -> None:
    """The link rules say they could not run, and the snapshot says why (`why` is part of its note)."""
    unevaluated = wait_for(lambda: {n["rule"]: n for n in requests.get(
        exporter.url + "/api/findings", timeout=5).json()["not_evaluated"]}, timeout=30,
        what="the rules that cannot run")
    for rule in ("receiver-unsettled-unbounded", "receiver-presettled", "sender-presettled"):
        assert "the AMQP 1.0 sessions and links" in unevaluated[rule]["needs"], unevaluated
    notes = requests.get(exporter.url + "/api/snapshot", timeout=5).json()["snapshot"]["notes"]
    assert any(why in n for n in notes), notes


def _fires(exporter, clients: Clients, rule: str, queue: str, severity: str, timeout: float = 60.0) -> dict:
    """Wait for `rule` at `severity` on a link of `queue` (an AMQP 1.0 link's object names its address)."""
    def found():
        clients.check()
        return next((f for f in findings(exporter) if f["rule"] == rule and f"/queues/{queue}'" in f["object"]
                     and f["severity"] == severity), None)
    f = wait_for(found, timeout, lambda: f"{rule} ({severity}) on /queues/{queue}: "
                 f"{sorted({(g['rule'], g['severity'], g['object']) for g in findings(exporter)})}")
    # Neither library sends connection properties: the container-id and the peer say who it is, nothing made up.
    assert f["connection_name"] == "" and f["identity"].startswith("AMQP 1.0 client (container ")
    return f


@pytest.mark.parametrize("library", ["rabbitmq", "proton"])
def test_amqp10_receivers_and_senders_are_judged_in_amqp10s_terms(release, node, vhost, start_exporter, tmp_path,
                                                                    library, monkeypatch):
    """A receiver that never settles holds 300 deliveries against a credit of 10 and is named, and the dashboard's
    consumers page shows it against its credit; one that settles stays quiet; a sender publishing pre-settled is a
    warning while it publishes."""
    for queue in ("settled", "held", "read"):  # durable quorum queues, as the library's own declare makes them
        node.api("PUT", f"/queues/{vhost}/{queue}", json={"durable": True, "arguments": {"x-queue-type": "quorum"}})
    exporter = _watching(start_exporter, node, vhost)
    with _clients(node, vhost, tmp_path) as clients:
        client = (sys.executable, "amqp10_client.py", library)
        clients.start(*client, "settling", "settled")
        clients.start(*client, "holding", "held")
        clients.start(*client, "presettled-sender", "read")
        if not release.at_least(4, 1):
            _links_unknown(exporter, "has no sessions endpoint (it came in 4.1)")
            return
        held = _fires(exporter, clients, "receiver-unsettled-unbounded", "held", "warning")
        assert held["evidence"]["credit"] <= 10 < held["evidence"]["unsettled"] <= 300, held["evidence"]
        assert held["evidence"]["queue"] == "held" and "credit bounds nothing" in held["explanation"]
        app = page(monkeypatch, "consumers", exporter.url)
        receivers = next(d for d in frames(app) if "credit" in d.columns)
        shown = receivers[receivers["queue"] == "held"].iloc[0]
        assert shown["unsettled"] > shown["credit"] and shown["mark"] == "credit bounds nothing", receivers
        assert receivers[receivers["queue"] == "settled"].iloc[0]["mark"] == ""
        sender = _fires(exporter, clients, "sender-presettled", "read", "warning", timeout=WINDOW + 60)
        assert sender["evidence"]["transfers"] > 0 and sender["evidence"]["snd_settle_mode"] == "settled"
        seen = polls_seen(exporter.url, 4)
        clients.check()
    loud = {(f["rule"], f["object"]) for doc in seen for f in doc["findings"] if f["severity"] != "info"}
    assert not [f for f in loud if "/queues/settled'" in f[1]], loud
    # Nothing consumes what the pre-settled sender publishes: that queue's backlog is true, and said.
    assert {rule for rule, _ in loud} <= {"receiver-unsettled-unbounded", "sender-presettled",
                                          "no-consumers-backlog"}, loud
    samples = scrape(exporter)
    assert value(samples, "ackscope_link_presettled", role="sender", vhost=vhost, address="/queues/read") == 1
    assert value(samples, "ackscope_link_presettled", role="receiver", vhost=vhost, address="/queues/held") == 0
    assert value(samples, "ackscope_connections", protocol="AMQP 1-0", vhost=vhost) == 3


@pytest.mark.parametrize("release", ["newest"], indirect=True)  # 4.0 has no sessions endpoint
def test_idle_connections_are_not_asked_again_and_a_receiver_that_starts_holding_is_named_within_two_polls(
        release, node, vhost, start_exporter, tmp_path):
    """Sessions are asked again only of AMQP 1.0 connections whose octets moved (session_reads.py). Among idle
    receivers, one idle until its queue fills is named within two polls of the deliveries, while the idle
    connections' links are carried from an earlier poll's answer."""
    interval = 2.0
    for queue in ("idle", "later"):
        node.api("PUT", f"/queues/{vhost}/{queue}", json={"durable": True, "arguments": {"x-queue-type": "quorum"}})
    exporter = start_exporter(node.management_url, interval=interval, selection=only_vhost(vhost))
    with _clients(node, vhost, tmp_path) as clients:
        for _ in range(5):
            clients.start(sys.executable, "amqp10_client.py", "proton", "settling", "idle", env={"FILL": "0"})
        clients.start(sys.executable, "amqp10_client.py", "proton", "holding", "later", env={"FILL": "0"})

        def carried():
            doc = requests.get(exporter.url + "/api/snapshot", timeout=5).json()["snapshot"]
            receivers = [k for k in doc["links"] if k["role"] == "receiver"]
            return len(receivers) == 6 and all(k["read_at"] < doc["taken_at"] for k in receivers) and doc
        wait_for(carried, 60, "every idle receiver's links carried from an earlier poll")
        assert not [f for f in findings(exporter) if f["rule"] == "receiver-unsettled-unbounded"]
        with pika.BlockingConnection(pika.URLParameters(node.amqp_url(vhost))) as publisher:
            channel = publisher.channel()
            channel.confirm_delivery()
            for i in range(300):
                channel.basic_publish("", "later", f"job {i}".encode(), pika.BasicProperties(delivery_mode=2))

        def held():
            return node.api("GET", f"/queues/{vhost}/later").json().get("messages_unacknowledged", 0) > 0
        # Polls count from when the broker says the receiver holds deliveries: on a loaded machine the client may
        # take seconds to take them (the clean-clone run of 5ec58f1 named it in the third poll after the publish).
        wait_for(held, 30, "the broker's word that the receiver holds deliveries")
        published = time.time()
        after: list[dict] = []  # the polls that started after the deliveries, each once, in order

        def holding(doc: dict) -> bool:
            return any(f["rule"] == "receiver-unsettled-unbounded" and "/queues/later'" in f["object"]
                       for f in doc["findings"])

        def named():
            clients.check()
            doc = requests.get(exporter.url + "/api/findings", timeout=5).json()
            if (doc["taken_at"] or 0) > published and doc["taken_at"] not in [d["taken_at"] for d in after]:
                after.append(doc)
            return any(holding(d) for d in after)
        wait_for(named, 30, lambda: f"the holding receiver named ({len(after)} polls since the deliveries)")
    assert [holding(d) for d in after].index(True) < 2, [d["taken_at"] - published for d in after]



    exporter = _watching(start_exporter, node, vhost)
    with _clients(node, vhost, tmp_path) as clients:
        clients.start(sys.executable, "amqp10_client.py", "rabbitmq", "presettled-receiver", "fast")
        if not release.at_least(4, 1):
            _links_unknown(exporter, "has no sessions endpoint (it came in 4.1)")
            return
        f = wait_for(lambda: next((f for f in findings(exporter) if f["rule"] == "receiver-presettled"), None),
                     timeout=60, what="the pre-settled receiver to be named")
        clients.check()
    assert f["evidence"]["send_settled"] is True and f["evidence"]["queue"] == "fast" and "/queues/fast'" in f["object"]


def test_a_stream_consumer_falling_behind_is_named_and_a_streams_retention_is_no_backlog(release, node, vhost,
                                                                                          start_exporter, tmp_path):
    """rstream publishes 100 messages a second into a stream, confirmed; a consumer handling 10 a second falls
    behind and is named, by the broker's lag or by its stored offset (said which); one keeping up, and an AMQP
    0-9-1 consumer with its prefetch and acks, stay quiet while the stream retains thousands of messages."""
    exporter = _watching(start_exporter, node, vhost)
    with _clients(node, vhost, tmp_path) as clients:
        clients.start(sys.executable, "stream_client.py", "producer", "events", "100")
        clients.start(sys.executable, "stream_client.py", "slow", "events")
        clients.start(sys.executable, "stream_client.py", "keeping-up", "events")
        clients.start(sys.executable, "stream_client.py", "amqp091", "events")

        def lagging():
            clients.check()
            return [f for f in findings(exporter) if f["rule"] == "stream-consumer-lagging"]
        found = wait_for(lagging, timeout=WINDOW + 90, what="the slow stream consumer to be named")
        seen = polls_seen(exporter.url, 4)
        samples = scrape(exporter)
        clients.check()
    def who(f: dict) -> str:
        return f"{f['identity']} {f['evidence']['consumer']}"
    assert any("stream-slow" in who(f) or "slow-reader" in who(f) for f in found), found
    assert all(f["severity"] == "warning" and f["object"] == "stream events" for f in found)
    loud = [f for doc in seen for f in doc["findings"] if f["severity"] != "info"]
    assert {f["rule"] for f in loud} == {"stream-consumer-lagging"}, loud
    assert not [f for f in loud if "keeping-up" in who(f)], loud
    # The stream retains what it was sent: thousands "ready", and no rule calls it a backlog.
    assert value(samples, "ackscope_queue_messages_ready", queue="events", vhost=vhost) > 1000
    published = value(samples, "ackscope_stream_publisher_published_total", stream="events", vhost=vhost)
    confirmed = value(samples, "ackscope_stream_publisher_confirmed_total", stream="events", vhost=vhost)
    assert published > 1000 and confirmed > 0.9 * published
    assert value(samples, "ackscope_stream_consumer_offset_lag", stream="events", identity="stream-slow") > 0
    assert value(samples, "ackscope_stream_stored_offset_lag", stream="events", reference="slow-reader") > 0


def test_with_statistics_off_what_the_release_lists_is_read_and_what_it_does_not_is_said(release, start_exporter,
                                                                                        tmp_path):
    """The container image's configuration: the exporter reads the Prometheus plugin. 4.0 has no sessions endpoint,
    and 4.3 lists no connections with statistics off (measured on 4.3.6): the link rules say they could not run, and
    why. The stream plugin lists no consumers with statistics off (HTTP 400): the Prometheus plugin's largest lag
    per stream stands for them."""
    with private_broker(f"ackscope-p{release.name.replace('.', '')}-off", release=release, plugins=PLUGINS,
                        statistics=False) as broker, own_vhost(broker) as name:
        broker.api("PUT", f"/queues/{name}/held", json={"durable": True, "arguments": {"x-queue-type": "quorum"}})
        # With statistics off no release lists its listeners: the plugin's port is said, as a user would.
        exporter = _watching(start_exporter, broker, name, prometheus_url=broker.prometheus_url)
        with _clients(broker, name, tmp_path) as clients:
            clients.start(sys.executable, "amqp10_client.py", "rabbitmq", "holding", "held")
            clients.start(sys.executable, "stream_client.py", "producer", "events", "100")
            clients.start(sys.executable, "stream_client.py", "slow", "events")
            if release.at_least(4, 3):
                _links_unknown(exporter, "lists no connections with their protocol with management statistics off")
            elif not release.at_least(4, 1):
                _links_unknown(exporter, "has no sessions endpoint (it came in 4.1)")
            # The stream plugin lists no consumers with statistics off: the Prometheus plugin's largest lag tells.
            lagging = wait_for(lambda: next((f for f in findings(exporter) if f["rule"] == "stream-consumer-lagging"),
                                            None), timeout=WINDOW + 90, what="the slow stream consumer, statistics off")
            samples = scrape(exporter)
    assert value(samples, "ackscope_source_info", source="prometheus") == 1
    assert value(samples, "ackscope_stream_max_offset_lag", stream="events") > 0
    assert "Prometheus plugin's largest" in lagging["evidence"]["figure"] and lagging["object"] == "stream events"


@pytest.mark.parametrize("fault,reason", [("500", "server_error"), ("malformed", "malformed")])
def test_a_session_list_that_cannot_be_read_costs_only_the_amqp10_part(release, node, vhost, start_exporter, tmp_path,
                                                                        caplog, fault, reason):
    caplog.set_level(logging.INFO, logger="ackscope")
    node.api("PUT", f"/queues/{vhost}/held", json={"durable": True, "arguments": {"x-queue-type": "quorum"}})
    proxy = FaultProxy(node.management_url)
    proxy.faults["*/sessions"] = fault
    try:
        exporter = start_exporter(proxy.url, interval=0.3,
                                  selection=only_vhost(vhost))
        with _clients(node, vhost, tmp_path) as clients:
            clients.start(sys.executable, "amqp10_client.py", "rabbitmq", "holding", "held")
            # The rest of the poll stands: the queue's unacknowledged deliveries are exported all along.
            s = wait_for_sample(exporter, "ackscope_queue_messages_unacked", lambda v: v > 10, queue="held",
                                vhost=vhost)
            if not release.at_least(4, 1):  # no endpoint to fail: never asked
                assert not [r for r in proxy.requests if r.endswith("/sessions")], proxy.requests
                return
            s = wait_for_sample(exporter, "ackscope_poll_errors_total", lambda v: v >= 2, endpoint="sessions",
                                reason=reason)
            assert value(s, "ackscope_up") == 1 and value(s, "ackscope_link_credit", vhost=vhost) is None
            waiting = {n["rule"]: n["needs"] for n in requests.get(exporter.url + "/api/findings", timeout=5).json()[
                "not_evaluated"]}
            assert waiting.get("receiver-unsettled-unbounded") == ["the AMQP 1.0 sessions and links"], waiting
            partial = [r.getMessage() for r in caplog.records if "poll partial" in r.getMessage()]
            assert len(partial) == 1 and "sessions" in partial[0] and "\n" not in partial[0], partial
            assert not any(r.exc_info for r in caplog.records), "no traceback in the log"
            del proxy.faults["*/sessions"]
            _fires(exporter, clients, "receiver-unsettled-unbounded", "held", "warning")
    finally:
        proxy.close()


def test_outcomes_a_receiver_settles_with_are_judged_where_the_broker_counts_them(release, node, vhost,
                                                                                   start_exporter, tmp_path):
    """A receiver that releases every delivery loops (how long: the release's delivery limit says); one that rejects
    every delivery of a queue without a dead-letter exchange drops them. The broker counts both per node and queue
    type: the receivers are named where the release lists links (4.1 and later), and said unnamed where not."""
    for queue in ("poison", "refused"):
        node.api("PUT", f"/queues/{vhost}/{queue}", json={"durable": True, "arguments": {"x-queue-type": "quorum"}})
    exporter = _watching(start_exporter, node, vhost)

    def judged(mode: str, queue: str, rule: str) -> dict:
        (tmp_path / mode).mkdir()
        with _clients(node, vhost, tmp_path / mode) as clients:
            clients.start(sys.executable, "amqp10_client.py", "rabbitmq", mode, queue)

            def found():
                clients.check()
                return next((f for f in findings(exporter) if f["rule"] == rule), None)
            return wait_for(found, timeout=WINDOW + 60, what=f"{rule} of a receiver {mode}")
    loop = judged("releasing", "poison", "receiver-requeue-loop")
    rejects = judged("rejecting", "refused", "receiver-rejects")
    assert loop["evidence"]["queue_type"] == "quorum" and loop["evidence"]["redeliver_rate"] > 1
    assert ("loops forever" if release.at_least(4, 3) else "delivery limit") in loop["explanation"]
    assert rejects["severity"] == "warning" and rejects["evidence"]["dropped"] >= 1
    if release.at_least(4, 1):
        assert loop["object"] == "queue poison" and loop["identity"].startswith("AMQP 1.0 client"), json.dumps(loop)
        assert rejects["object"] == "queue refused"
    else:
        assert "not named" in loop["evidence"]["attribution"] and "not named" in rejects["evidence"]["attribution"]


def test_the_probes_measure_a_stream_beside_classic_and_quorum_queues(release, node, vhost):
    """A stream target publishes with confirms into a stream and consumes from the next offset: its confirm and
    end-to-end (publish to delivery) latency are reported as the classic and quorum targets' are, nothing lost."""
    targets = (quick("classic", "classic"), quick("quorum", "quorum"), quick("events", "stream"))
    with running_probes(probe_config(node, vhost, targets)) as probes:
        for t in targets:
            wait_probe(probes, "ackscope_probe_confirm_latency_seconds_count", t.name, 40, timeout=60)
            wait_probe(probes, "ackscope_probe_delivery_latency_seconds_count", t.name, 40, timeout=60)
        s = probe_samples(probes)
    for t in targets:
        assert value(s, "ackscope_probe_up", target=t.name, queue_type=t.queue_type) == 1
        assert (value(s, "ackscope_probe_lost_total", target=t.name) or 0) == 0
    stream = node.api("GET", f"/queues/{vhost}/ackscope.probe.events").json()
    assert stream["type"] == "stream" and stream["arguments"]["x-max-age"] == "1h"


def test_mqtt_and_stomp_connections_are_counted_by_protocol_and_never_break_the_poll(release, node, start_exporter):
    """paho-mqtt and stomp.py connected beside the rest: /api/connections lists them with their protocol; the poll
    counts them by it, asks them for no AMQP 1.0 sessions, and fails nowhere."""
    import paho.mqtt.client as mqtt
    import stomp

    exporter = start_exporter(node.management_url, interval=0.5)  # their vhost is the default one
    publisher = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="ackscope-test-sensor")
    publisher.username_pw_set(ADMIN_USER, ADMIN_PASSWORD)
    publisher.connect("127.0.0.1", node.ports.mqtt)
    publisher.loop_start()
    subscriber = stomp.Connection([("127.0.0.1", node.ports.stomp)])
    subscriber.connect(ADMIN_USER, ADMIN_PASSWORD, wait=True)
    try:
        def counted():
            samples = scrape(exporter)
            by_protocol = {labels["protocol"]: v for labels, v in samples.get("ackscope_connections", [])}
            return (samples, by_protocol) if any(p.startswith("MQTT") for p in by_protocol) and any(
                p.startswith("STOMP") for p in by_protocol) else None
        samples, by_protocol = wait_for(counted, timeout=30, what="MQTT and STOMP connections counted by protocol")
    finally:
        publisher.loop_stop()
        publisher.disconnect()
        subscriber.disconnect()
    assert value(samples, "ackscope_up") == 1 and not samples.get("ackscope_poll_errors_total"), samples.get(
        "ackscope_poll_errors_total")
    assert all(v == 1 for p, v in by_protocol.items() if p.startswith(("MQTT", "STOMP"))), by_protocol
