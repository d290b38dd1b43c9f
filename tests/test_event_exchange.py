"""--event-exchange on a real node with the rabbitmq_event_exchange plugin, read through a probe user allowed
^ackscope\\.probe\\. and read on amq.rabbitmq.event, without the broker's log: Node's amqplib connecting per message
is churn named by its library, with no log line read; ackscope's queue is its own, bounded, and gone with the
exporter; a probe user that may not read the exchange, or a vhost without it, is one line and the rest goes on.
On 3.10 and the newest 4.x (4.0 reads the exchange beside the log in tests/test_breaks.py)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import requests
from client_processes import Clients
from dashboard_helpers import page
from helpers import findings_document, matrix_release, private_broker, scrape, value, wait_for, wait_for_sample
from probe_helpers import probe_config, quick

from ackscope.workloads.node_files import PLUGINS
from ackscope.workloads.private_broker import LocalBroker
from ackscope.workloads.rabbitmq_release import Release

PROBE_USER, PROBE_PASSWORD = "ackscope-probe", "probe-secret"
NAMESPACE = r"^ackscope\.probe\."


@pytest.fixture(scope="module", params=["3.10", "newest"])
def release(request) -> Release:
    return matrix_release(request.param)


@pytest.fixture(scope="module")
def node(release) -> Iterator[LocalBroker]:
    with private_broker(f"ackscope-events{release.name.replace('.', '')}", release=release,
                        plugins=PLUGINS + ("rabbitmq_event_exchange",)) as broker:
        broker.api("PUT", f"/users/{PROBE_USER}", json={"password": PROBE_PASSWORD, "tags": ""})
        yield broker


def _probe_user(node: LocalBroker, read: str) -> str:
    """The probe user's AMQP URL on /, its permissions ^ackscope\\.probe\\. but for `read`."""
    node.api("PUT", f"/permissions/%2F/{PROBE_USER}", json={"configure": NAMESPACE, "write": NAMESPACE, "read": read})
    return node.amqp_url("/", user=PROBE_USER, password=PROBE_PASSWORD)


def _watching(start_exporter, node: LocalBroker, url: str):
    return start_exporter(node.management_url, interval=0.5, event_exchange=True,
                          probes=probe_config(node, "/", (quick("evx", rate=2.0, burst_size=10),), url=url))


def _event_queues(node: LocalBroker) -> list[dict]:
    return [q for q in node.api("GET", "/queues/%2F").json() if q["name"].startswith("ackscope.probe.events.")]


def test_amqplib_connecting_per_message_is_churn_named_by_its_library_from_the_event_exchange_alone(
        node, start_exporter, tmp_path):
    exporter = _watching(start_exporter, node, _probe_user(node, NAMESPACE + r"|^amq\.rabbitmq\.event$"))
    wait_for_sample(exporter, "ackscope_event_exchange_consuming", 1)
    (queue,) = wait_for(lambda: _event_queues(node), timeout=20, what="ackscope's queue on the event exchange")
    assert queue["exclusive"] and queue["arguments"] == {"x-expires": 60000, "x-max-length": 10000,
                                                         "x-queue-type": "classic"}
    with Clients(node.amqp_url(), tmp_path) as clients:
        clients.amqplib("connection-per-message", "evx.churn")

        def churn():
            clients.check()
            return next((f for f in findings_document(exporter)["findings"] if f["rule"] == "connection-churn"
                         and f["severity"] == "warning"), None)
        f = wait_for(churn, timeout=60, what="connection-churn from the event exchange")
    assert f["evidence"]["source"] == "event exchange" and f["client"].startswith("amqplib"), f
    samples = scrape(exporter)
    opened = sum(v for labels, v in samples["ackscope_broker_connections_opened_total"])
    channels = sum(v for labels, v in samples["ackscope_broker_channels_opened_total"])
    assert opened >= 3 and channels >= 3, samples["ackscope_broker_channels_opened_total"]
    assert value(samples, "ackscope_event_exchange_messages_total") >= opened + channels  # each event, a message
    # Why a channel was closed, only the log says: those rules still wait for it.
    document = findings_document(exporter)
    assert {"consumer-timed-out", "closed-on-error"} <= {n["rule"] for n in document["not_evaluated"]}
    exporter.stop()
    wait_for(lambda: not _event_queues(node), timeout=20, what="ackscope's queue gone with its connection")


@pytest.mark.parametrize("read, said", [
    # 3.10 refuses the binding, 4.3 the passive declare (naming configure): either way, read is what to give.
    (NAMESPACE, (f"access to exchange 'amq.rabbitmq.event' in vhost '/' refused for user '{PROBE_USER}'",
                 "give the probes' user read permission on amq.rabbitmq.event")),
    # 3.10 says the exchange is not there; 4.3 refuses a user without permission on it before it looks.
    (None, ("evx-other", "the vhost the plugin publishes in (rabbitmq_event_exchange.vhost, / by default)")),
], ids=["no-read-permission", "another-vhost"])
def test_an_event_exchange_that_cannot_be_read_is_one_line_and_the_rest_goes_on(node, start_exporter, caplog,
                                                                                 monkeypatch, read, said):
    caplog.set_level(logging.INFO, logger="ackscope")
    if read is None:  # the probes' vhost holds no event exchange (the plugin declares it in / only)
        node.api("PUT", "/vhosts/evx-other")
        node.api("PUT", f"/permissions/evx-other/{PROBE_USER}",
                 json={"configure": NAMESPACE, "write": NAMESPACE, "read": NAMESPACE})
        url = node.amqp_url("evx-other", user=PROBE_USER, password=PROBE_PASSWORD)
    else:
        url = _probe_user(node, read)
    exporter = _watching(start_exporter, node, url)
    problems = wait_for(lambda: requests.get(exporter.url + "/api/breaks", timeout=5).json()["problems"],
                        timeout=30, what="the event exchange's problem")
    assert len(problems) == 1 and all(words in problems[0] for words in said), problems
    samples = wait_for_sample(exporter, "ackscope_up", 1)
    assert value(samples, "ackscope_event_exchange_consuming") == 0
    said_lines = [r.getMessage() for r in caplog.records if "event exchange" in r.getMessage()]
    assert len(said_lines) == 1 and all(words in said_lines[0] for words in said), said_lines
    assert "Traceback" not in caplog.text
    # The dashboard's Breaks page says it too, and what the log would add.
    app = page(monkeypatch, "breaks", exporter.url)
    assert [w.value for w in app.warning] == [f"Not read: {problems[0]}"]
    assert "--broker-log" in app.info[0].value and "event exchange names the clients" in app.info[0].value
