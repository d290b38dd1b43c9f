"""`ackscope upgrade-check` on each release of the matrix, with the same workload declared on each as its
applications would: a policy that mirrors, a quorum queue whose consumer nacks with requeue, a transient queue,
queues declared with x-queue-version 1 and x-queue-master-locator, a channel with a global prefetch over two
consumers, and Celery's worker (global QoS) consuming a queue it declares with x-consumer-timeout. On 3.10 (and on
4.0 for 4.3) the command predicts, per client; on 4.0 and the newest 4.x each predicted change is seen to happen,
and what a later release changes is seen not to happen yet: a prediction the target contradicts fails here."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pika
import pytest
import requests
from ackscope_testkit.fault_proxy import FaultProxy
from client_processes import Clients
from dashboard_helpers import frames, page
from helpers import matrix_release, parse, private_broker, wait_for

from ackscope.diagnosis.release_changes import PHASES, PROOF, change
from ackscope.workloads.private_broker import ADMIN_PASSWORD, ADMIN_USER, LocalBroker
from ackscope.workloads.rabbitmq_release import Release

# Each queue of the workload: (durable, arguments); declared each on a connection of its own, as the application
# that owns it would at start (4.3 closes the whole connection of a queue_master_locator declare).
QUEUES = {"mirrored.orders": (True, {}), "poison.orders": (True, {"x-queue-type": "quorum"}),
          "scratch": (False, {}), "cqv1": (True, {"x-queue-version": 1}),
          "located": (True, {"x-queue-master-locator": "min-masters"}), "fanout.a": (True, {}), "fanout.b": (True, {})}
GLOBAL_PREFETCH = 3  # the channel consuming fanout.a and fanout.b with basic.qos(global=true)


@dataclass
class Upgrading:
    release: Release
    node: LocalBroker
    declared: dict[str, str]  # each object: "ok", or what the broker said refusing it
    celery_err: Path  # the Celery worker's stderr


def _api(node: LocalBroker, method: str, path: str, **kw) -> requests.Response:
    return requests.request(method, f"{node.management_url}/api{path}", auth=(ADMIN_USER, ADMIN_PASSWORD),
                            timeout=30, **kw)


def _declared(node: LocalBroker) -> dict[str, str]:
    said = {}
    r = _api(node, "PUT", "/policies/%2F/ha-all", json={"pattern": r"^mirrored\.", "definition": {"ha-mode": "all"},
                                                       "apply-to": "queues"})
    said["policy ha-all"] = "ok" if r.ok else r.text
    for name, (durable, arguments) in QUEUES.items():
        conn = pika.BlockingConnection(pika.URLParameters(node.amqp_url()))
        try:
            conn.channel().queue_declare(name, durable=durable, arguments=arguments)
            said[name] = "ok"
        except (pika.exceptions.ChannelClosedByBroker, pika.exceptions.ConnectionClosedByBroker) as e:
            said[name] = f"{e.reply_code} {e.reply_text}"
        finally:
            if conn.is_open:
                conn.close()
    return said


class _Apps(threading.Thread):
    """The workload's pika applications, each on a connection named for it, served on a thread: a consumer on
    mirrored.orders and one on scratch that hold what they get, one on poison.orders that nacks each delivery with
    requeue (ten a second at most), and one channel with a global prefetch consuming fanout.a and fanout.b."""

    def __init__(self, node: LocalBroker, declared: dict[str, str]):
        super().__init__(daemon=True)
        self.node, self.declared = node, declared
        self.connections: list[pika.BlockingConnection] = []
        self.ready, self._stopping = threading.Event(), threading.Event()

    def _connect(self, name: str) -> pika.adapters.blocking_connection.BlockingChannel:
        params = pika.URLParameters(self.node.amqp_url())
        params.client_properties = {"connection_name": name}
        conn = pika.BlockingConnection(params)
        self.connections.append(conn)
        return conn.channel()

    def run(self) -> None:
        for queue in ("mirrored.orders", "scratch"):
            if self.declared[queue] == "ok":
                ch = self._connect(f"{queue.split('.')[0]}-consumer")
                ch.basic_qos(prefetch_count=10)
                ch.basic_consume(queue, lambda *a: None)
        poison = self._connect("poison-consumer")
        poison.basic_qos(prefetch_count=1)
        for i in range(5):
            poison.basic_publish("", "poison.orders", b"order %d" % i, pika.BasicProperties(delivery_mode=2))

        def give_back(c, m, p, b):
            time.sleep(0.1)
            c.basic_nack(m.delivery_tag, requeue=True)
        poison.basic_consume("poison.orders", give_back)
        fanout = self._connect("fanout-consumer")
        for q in ("fanout.a", "fanout.b"):
            for i in range(5):
                fanout.basic_publish("", q, b"job %d" % i)
        fanout.basic_qos(prefetch_count=GLOBAL_PREFETCH, global_qos=True)
        for q in ("fanout.a", "fanout.b"):
            fanout.basic_consume(q, lambda *a: None)
        self.ready.set()
        while not self._stopping.is_set():
            for conn in self.connections:
                conn.process_data_events(time_limit=0.05)

    def stop(self) -> None:
        self._stopping.set()
        self.join(timeout=10)
        for conn in self.connections:
            if conn.is_open:
                conn.close()


@pytest.fixture(scope="module", params=["3.10", "4.0", "newest"])
def release(request) -> Release:
    return matrix_release(request.param)


@pytest.fixture(scope="module")
def upgrading(release, tmp_path_factory) -> Iterator[Upgrading]:
    with private_broker(f"ackscope-upgrade{release.name.replace('.', '')}", release=release) as node:
        declared = _declared(node)
        apps = _Apps(node, declared)
        apps.start()
        try:
            assert apps.ready.wait(30), "the workload's applications did not start"
            with Clients(node.amqp_url(), tmp_path_factory.mktemp("clients")) as clients:
                clients.celery_worker("consumer-timeout")
                celery_err = clients.workdir / "0.err"
                if not release.at_least(4, 3):  # 4.3 refuses its queue: it never consumes (checked there)
                    wait_for(lambda: _consumed(node, ("celery", "reports")), timeout=60,
                             what="Celery's worker to consume celery and reports")
                wait_for(lambda: (_api(node, "GET", "/queues/%2F/poison.orders").json().get("message_stats") or {})
                         .get("redeliver", 0) > 0, timeout=60, what="the poison consumer's redeliveries counted")
                yield Upgrading(release, node, declared, celery_err)
        finally:
            apps.stop()


def _consumed(node: LocalBroker, names: tuple[str, ...]) -> bool:
    queues = {q["name"]: q for q in _api(node, "GET", "/queues/%2F").json()}
    return all(queues.get(name, {}).get("consumers") for name in names)


def _channel_of(node: LocalBroker, connection_name: str) -> dict | None:
    """The channel of the connection the client named `connection_name`, once the broker counts its unacked."""
    names = {c["name"] for c in _api(node, "GET", "/connections").json()
             if c.get("user_provided_name") == connection_name}
    return next((c for c in _api(node, "GET", "/channels").json() if c["connection_details"]["name"] in names
                 and c.get("messages_unacknowledged")), None)


def _check(node: LocalBroker, to: str, fmt: str = "json", url: str | None = None,
           password: str = ADMIN_PASSWORD) -> tuple[int, str, str]:
    done = subprocess.run([sys.executable, "-m", "ackscope", "upgrade-check", "--to", to, "--management-url",
                           url or node.management_url, "--username", ADMIN_USER, "--format", fmt],
                          env={"ACKSCOPE_PASSWORD": password, "PATH": "/usr/bin:/bin"}, capture_output=True,
                          text=True, timeout=120)
    return done.returncode, done.stdout, done.stderr


def _findings(document: dict) -> dict[str, dict[str, dict]]:
    """rule -> object -> finding"""
    found: dict[str, dict[str, dict]] = {}
    for f in document["findings"]:
        found.setdefault(f["rule"], {})[f["object"]] = f
    return found


@pytest.mark.parametrize("release", ["3.10"], indirect=True)
def test_on_3_10_upgrade_check_names_each_change_by_its_client_and_object(upgrading):
    code, out, err = _check(upgrading.node, "4.0")
    assert code == 2, err
    found = _findings(json.loads(out))
    assert set(found) == {"classic-queue-mirroring-removed", "quorum-delivery-limit",
                          "transient-nonexclusive-queue", "management-metrics-collection"}, found.keys()
    mirroring = found["classic-queue-mirroring-removed"]["policy ha-all"]
    assert mirroring["severity"] == "critical" and mirroring["connection_name"] == "mirrored-consumer"
    limit = found["quorum-delivery-limit"]["queue poison.orders"]
    assert limit["severity"] == "critical" and limit["connection_name"] == "poison-consumer"
    assert found["transient-nonexclusive-queue"]["queue scratch"]["connection_name"] == "scratch-consumer"

    code, out, err = _check(upgrading.node, "4.3")
    assert code == 2, err
    found = _findings(json.loads(out))
    # Celery's worker: its channel's global prefetch over its two queues, and the queue it declares.
    celery = [f for f in found["global-qos-per-consumer"].values() if f["client"].startswith("py-amqp")]
    assert [f["evidence"]["consumers"] for f in celery] == [2], found["global-qos-per-consumer"]
    fanout = next(f for f in found["global-qos-per-consumer"].values() if f["connection_name"] == "fanout-consumer")
    assert fanout["evidence"]["unacked_at_most_on_target"] == 2 * GLOBAL_PREFETCH
    reports = found["consumer-timeout-argument-on-classic-queue"]["queue reports"]
    assert reports["severity"] == "critical" and reports["client"].startswith("py-amqp")
    assert set(found["classic-queue-version-1"]) == {"queue cqv1"}
    assert set(found["queue-master-locator"]) == {"queue located"}
    # The classic queues' lost consumer timeout: a warning for the queue Celery gives its own timeout, one info item
    # for the rest, whose healthy consumers lose only a safety net.
    ignored = found["classic-queue-consumer-timeout-ignored"]
    assert set(ignored) == {"queue reports", "classic queues with manual-ack consumers"}, ignored.keys()
    own = ignored["queue reports"]
    assert own["severity"] == "warning" and own["client"].startswith("py-amqp")
    assert own["evidence"]["own_timeout_ms"] == 3_600_000
    rest = ignored["classic queues with manual-ack consumers"]
    assert rest["severity"] == "info" and rest["evidence"]["classic_queues"] == 5, rest
    assert rest["evidence"]["queues"] == "celery, fanout.a, fanout.b and 2 more", rest
    assert "queue poison.orders" in found["quorum-delivery-limit"]
    # The text, as on call: one block a finding, the worst first, and the exit code the same.
    code, out, err = _check(upgrading.node, "newest", "text")
    assert code == 2 and "Traceback" not in out + err
    assert out.splitlines()[0].endswith("RabbitMQ 3.10.8 → 4.3: 12 change(s) between them checked"), out[:300]
    assert out.index("CRITICAL") < out.index("WARNING")


@pytest.mark.parametrize("release", ["3.10"], indirect=True)
def test_the_exporter_and_the_dashboard_s_upgrade_page_list_what_upgrade_check_lists(upgrading, start_exporter,
                                                                                     monkeypatch):
    predicted = {}
    for to in ("4.0", "4.3"):
        _, out, _ = _check(upgrading.node, to)
        predicted[to] = {(f["rule"], f["object"], f["severity"]) for f in json.loads(out)["findings"]}
    # An info item (the healthy classic queues' lost consumer timeout) is on the dashboard, and no blocker.
    blocking = {to: {item for item in items if item[2] != "info"} for to, items in predicted.items()}
    assert blocking["4.3"] != predicted["4.3"] and blocking["4.0"] == predicted["4.0"]
    exporter = start_exporter(upgrading.node.management_url)

    def served() -> dict:
        scrape = parse(requests.get(exporter.url + "/metrics", timeout=5).text)
        blockers: dict[str, set] = {}
        for labels, v in scrape.get("ackscope_upgrade_blocker", []):
            assert v == 1
            blockers.setdefault(labels["to"], set()).add((labels["kind"], labels["object"], labels["severity"]))
        return blockers
    # Consumers come and go (Celery's worker reconnects): the two reads agree once both saw the same broker.
    wait_for(lambda: served() == blocking, timeout=30, what="the exporter's upgrade blockers to be upgrade-check's")
    assert "ackscope_upgrade_not_evaluated" not in parse(requests.get(exporter.url + "/metrics", timeout=5).text)
    app = page(monkeypatch, "upgrade", exporter.url)
    assert [h.value for h in app.subheader] == [
        f"To RabbitMQ {to}: {len(predicted[to])} item(s), "
        f"{sum(1 for *_, severity in predicted[to] if severity == 'critical')} refused or losing messages"
        for to in ("4.0", "4.3")]
    tables = frames(app)
    assert {(r["change"], r["culprit"].split(" · ")[-1]) for r in tables[1].to_dict("records")} == {
        (rule, obj) for rule, obj, _ in predicted["4.3"]}
    assert tables[0].iloc[0]["severity"] == "critical" and tables[0].iloc[0]["remedy"]


@pytest.mark.parametrize("release", ["3.10"], indirect=True)
def test_what_cannot_be_read_is_said_and_never_taken_for_nothing_to_change(upgrading):
    proxy = FaultProxy(upgrading.node.management_url)
    try:
        proxy.faults["policies"] = "500"
        code, out, err = _check(upgrading.node, "4.0", url=proxy.url)
        document = json.loads(out)
        assert code == 2 and "classic-queue-mirroring-removed" not in _findings(document), err
        assert [n["rule"] for n in document["not_evaluated"]] == ["classic-queue-mirroring-removed"]
        assert [(u["endpoint"], u["reason"]) for u in document["unread"]] == [("policies", "server_error")]
        # What could not be judged is said beside what was found (the statistics' deprecation, from the overview),
        # never taken for nothing (exit 3 when nothing else is found: tests/test_upgrade_predict.py).
        proxy.faults["queues"] = proxy.faults["channels"] = "500"
        code, out, err = _check(upgrading.node, "4.0", "text", url=proxy.url)
        assert code == 1 and "Traceback" not in out + err, out + err
        assert "not read: policies: HTTP 500 from /api/policies" in out and "nothing this upgrade" not in out
        assert "not evaluated quorum-delivery-limit: needs the queues' depths and counters" in out, out
    finally:
        proxy.close()
    code, out, err = _check(upgrading.node, "4.0", password="wrong")
    assert code == 3 and out == "" and len(err.strip().splitlines()) == 1 and "wrong" not in err, err
    code, out, err = _check(upgrading.node, "3.13")
    assert code == 3 and err.strip() == ("ackscope upgrade-check: no rules for RabbitMQ 3.13: ackscope predicts for "
                                         "4.0, 4.3 (newest: 4.3), the releases it measures"), err


def test_on_3_10_a_ram_node_is_named_deprecated_for_4_0_and_unable_to_run_on_4_3(ram_node_cluster):
    first, ram = ram_node_cluster.nodes
    for to, severity in (("4.0", "warning"), ("4.3", "critical")):
        code, out, err = _check(first, to)
        found = _findings(json.loads(out)).get("ram-node-type", {})
        assert list(found) == [f"node {ram.nodename}"], (to, found, err)
        assert found[f"node {ram.nodename}"]["severity"] == severity
        assert found[f"node {ram.nodename}"]["evidence"]["said_by"] == "the broker (/api/nodes)"


@pytest.mark.parametrize("release", ["4.0"], indirect=True)
def test_on_4_0_upgrade_check_to_4_3_names_only_what_changes_between_them(upgrading):
    code, out, err = _check(upgrading.node, "4.3")
    assert code == 2, err
    document = json.loads(out)
    found = _findings(document)
    assert "classic-queue-mirroring-removed" not in found and "quorum-delivery-limit" not in found
    assert set(found["delivery-limit-ignores-nack"]) == {"queue poison.orders"}
    assert set(found["queue-master-locator"]) == {"queue located"} and set(found["classic-queue-version-1"]) == {
        "queue cqv1"}
    assert found["consumer-timeout-argument-on-classic-queue"]["queue reports"]["client"].startswith("py-amqp")
    # 4.0's API shows no channel's global prefetch: said, not taken for none.
    assert {n["rule"]: n["needs"] for n in document["not_evaluated"]} == {
        "global-qos-per-consumer": ["the channels' global prefetch (RabbitMQ 4.x's API does not show it)"]}
    code, out, _ = _check(upgrading.node, "4.0", "text")
    assert code == 0 and "already at or past 4.0" in out.splitlines()[0]


@pytest.mark.parametrize("release", ["4.0", "newest"], indirect=True)
def test_on_the_target_release_each_predicted_change_happens(upgrading):
    release, node, declared = upgrading.release, upgrading.node, upgrading.declared
    happens = {c: release.at_least(*change(c).release) for c in (
        "classic-queue-mirroring-removed", "consumer-timeout-argument-on-classic-queue", "classic-queue-version-1",
        "queue-master-locator", "global-qos-per-consumer")}
    assert all(change(c).proof == PROOF for c in happens)
    # Refused where the table says, accepted before.
    assert ("not recognised policy settings" in declared["policy ha-all"]) == happens[
        "classic-queue-mirroring-removed"], declared
    assert ("unsupported queue version '1'" in declared["cqv1"]) == happens["classic-queue-version-1"], declared
    assert ("541" in declared["located"] and "queue_master_locator" in declared["located"]) == happens[
        "queue-master-locator"], declared
    # Celery's worker, declaring its queue with x-consumer-timeout: refused on 4.3, consuming before.
    if happens["consumer-timeout-argument-on-classic-queue"]:
        wait_for(lambda: "invalid arg 'x-consumer-timeout'" in upgrading.celery_err.read_text(), timeout=60,
                 what="Celery's worker to be refused its queue")
    else:
        assert "reports" in [q["name"] for q in _api(node, "GET", "/queues/%2F").json()]
    # The global prefetch: channel-wide before 4.3, per consumer from it.
    per_consumer = happens["global-qos-per-consumer"]
    expected = (2 if per_consumer else 1) * GLOBAL_PREFETCH
    wait_for(lambda: (_channel_of(node, "fanout-consumer") or {}).get("messages_unacknowledged") == expected,
             timeout=30, what=lambda: f"the fanout channel to hold {expected} unacked (RabbitMQ {release.version}): "
             f"{_channel_of(node, 'fanout-consumer')}")
    # The transient queue: accepted on both, listed as a deprecated feature in use.
    assert declared["scratch"] == "ok"
    assert "transient_nonexcl_queues" in [f["name"] for f in _api(node, "GET", "/deprecated-features/used").json()]
    # Each deprecated feature's phase as the table holds it for this release.
    phases = {f["name"]: f["deprecation_phase"] for f in _api(node, "GET", "/deprecated-features").json()}
    assert phases == PHASES[tuple(int(x) for x in release.name.split("."))], phases
