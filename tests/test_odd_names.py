"""Names that break naive code, made on the real broker: a vhost, a user, queues and connection names with
quotes, backslashes, newlines, braces, Markdown and HTML, non-Latin text and 255 bytes. The exposition still
passes promtool and reads back to the same names, the JSON documents stay valid, the findings name them, and
the dashboard shows them as text."""

from __future__ import annotations

import subprocess

import pika
import pytest
import requests
from dashboard_helpers import page
from helpers import only_vhost, parse, wait_for

from ackscope.workloads.private_broker import ADMIN_USER

VHOST = 'odd "v\\host" {x}'
USER = 'odd-user "q" \\ {u}'
QUEUES = (
    'quote"d \\back\\slash {brace}',
    # Control characters, but no line break: RabbitMQ 3.10 gave no answer to a queue.declare of such a name, and
    # its management API dropped the line break. A client's connection name keeps one (below).
    "tab\there\x07bell",
    "| pipe | **bold** <b>html</b> `code` [link](x)",
    "ünïcödé — 队列 — 🐇",
    "q" * 255,  # the longest name the broker takes (AMQP short string)
)
CONNECTION = 'worker "7"\n\\ {prod} | <i>x</i>'


@pytest.fixture
def odd_broker(broker):
    quoted = requests.utils.quote(VHOST, safe="")
    broker.api("PUT", f"/vhosts/{quoted}")
    broker.api("PUT", f"/users/{requests.utils.quote(USER, safe='')}",
               json={"password": "odd-pw", "tags": ""})
    for user in (ADMIN_USER, USER):
        broker.api("PUT", f"/permissions/{quoted}/{requests.utils.quote(user, safe='')}",
                   json={"configure": ".*", "write": ".*", "read": ".*"})
    yield broker
    broker.api("DELETE", f"/vhosts/{quoted}")
    broker.api("DELETE", f"/users/{requests.utils.quote(USER, safe='')}")


def test_odd_names_stay_valid_and_intact_in_metrics_json_findings_and_the_dashboard(odd_broker, start_exporter,
                                                                                     promtool, monkeypatch):
    broker = odd_broker
    params = pika.URLParameters(broker.amqp_url(VHOST, user=USER, password="odd-pw"))
    params.client_properties = {"connection_name": CONNECTION}
    conn = pika.BlockingConnection(params)
    try:
        ch = conn.channel()
        for q in QUEUES:
            ch.queue_declare(q)
            ch.basic_publish("", q, b"x")
        # Unacked at its prefetch with nothing acked: a finding that names this client and queue.
        ch.basic_qos(prefetch_count=1)
        ch.basic_consume(QUEUES[0], on_message_callback=lambda *a: None)
        for _ in range(3):
            ch.basic_publish("", QUEUES[0], b"x")
        ch.basic_consume(QUEUES[3], on_message_callback=lambda *a: None, auto_ack=True)
        exporter = start_exporter(broker.management_url, interval=0.5,
                                  selection=only_vhost(VHOST))

        seen: set = set()
        clients: set = set()

        def listed():
            # Queues and channels are separate endpoints whose statistics arrive at their own times: wait for both.
            samples = parse(requests.get(exporter.url + "/metrics", timeout=5).text)
            seen.clear()
            seen.update(labels.get("queue") for labels, _ in samples.get("ackscope_queue_messages_ready", []))
            clients.clear()
            clients.update(labels.get("connection_name")
                           for labels, _ in samples.get("ackscope_channel_messages_unacked", []))
            return samples if set(QUEUES) <= seen and CONNECTION in clients else None
        samples = wait_for(listed, 30, lambda: f"every odd queue and the odd client's channel in /metrics, read back "
                                               f"to their own names; queues missing {sorted(set(QUEUES) - seen)!r}, "
                                               f"seen {sorted(seen)!r}; channels' clients {sorted(map(str, clients))!r}")
        assert {labels.get("vhost") for labels, _ in samples["ackscope_queue_messages_ready"]} == {VHOST}

        text = requests.get(exporter.url + "/metrics", timeout=5).content
        lint = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True)
        problems = [line for line in (lint.stdout + lint.stderr).decode().splitlines()
                    if line.strip() and 'should not have "_count" suffix' not in line]
        assert problems == []

        snapshot = requests.get(exporter.url + "/api/snapshot", timeout=5).json()["snapshot"]
        assert {q["name"] for q in snapshot["queues"]} == set(QUEUES)
        assert {c["user"] for c in snapshot["connections"]} == {USER}
        found = wait_for(lambda: [f for f in requests.get(exporter.url + "/api/findings", timeout=5).json()["findings"]
                                  if CONNECTION in f.values()], 30, "a finding that names the odd client")
        assert {f["rule"] for f in found} >= {"auto-ack-consumer"}

        # The dashboard shows the names as text: the Markdown and HTML in them are not rendered.
        consumers = page(monkeypatch, "consumers", exporter.url)
        shown = [frame for frame in (d.value for d in consumers.dataframe)
                 if "client" in frame.columns and CONNECTION in set(frame["client"])]
        assert shown, "the odd client's name, verbatim, in the consumers table"
        overview = page(monkeypatch, "overview", exporter.url)
        rendered = "\n".join(m.value for m in overview.markdown)
        assert "<b>html</b>" not in rendered and "<i>x</i>" not in rendered
        tables = [m.value for m in overview.markdown if m.value.startswith("| ")]
        assert tables and all(line.startswith("|") and line.endswith("|") for t in tables for line in t.split("\n")), \
            "a name's line break split a row of a Markdown table"
    finally:
        conn.close()
