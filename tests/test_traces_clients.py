"""The applications' own traces, from real clients with the real instrumentations and the SDK's OTLP/HTTP exporter
sending to the exporter's /v1/traces, on the suite's broker: each figure held to the clients' own records and to the
broker's counters in the same run."""

from __future__ import annotations

import base64
import io
import json
import os
import signal
import sys
from collections.abc import Iterator

import pyarrow.dataset as ds
import pytest
import requests
from client_processes import Clients
from dashboard_helpers import frames, page
from helpers import only_vhost, scrape, value, wait_for

from ackscope.core.http_server import WebSecurity
from ackscope.core.secret import Secret
from ackscope.pipeline.run import PipelineConfig, Progress, execute

WEB_USER, WEB_PASSWORD = "scraper", "s3cret-web"


@pytest.fixture
def watching(broker, vhost, start_exporter):
    # A short deadline, so that a test sees messages become unprocessed; the web endpoints behind basic auth, as
    # the traces must be; the node's log, for what the broker did beside the spans.
    return start_exporter(broker.management_url, interval=0.5, selection=only_vhost(vhost), trace_deadline=8.0,
                          web=WebSecurity(WEB_USER, Secret(WEB_PASSWORD)), broker_log=str(broker.log_file))


@pytest.fixture
def traced(broker, vhost, tmp_path, watching) -> Iterator[Clients]:
    with Clients(broker.amqp_url(vhost), tmp_path) as running:
        running.env.update(OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=watching.url + "/v1/traces",
                           OTEL_EXPORTER_OTLP_HEADERS="Authorization=Basic%20"
                           + base64.b64encode(f"{WEB_USER}:{WEB_PASSWORD}".encode()).decode())
        yield running


def declare(broker, vhost: str, queue: str) -> None:
    broker.api("PUT", f"/queues/{vhost}/{queue}", json={"durable": True, "arguments": {"x-expires": 600_000}})


def metrics(exporter):
    return scrape(exporter, auth=(WEB_USER, WEB_PASSWORD))


def records(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def consumer_records(process) -> list[dict]:
    os.killpg(process.pid, signal.SIGTERM)
    out, _ = process.communicate(timeout=20)
    return records(out)


def flow(exporter, destination: str, service: str, figure: str, **labels) -> float | None:
    return value(metrics(exporter), f"ackscope_trace_{figure}", destination=destination, service=service, **labels)


def broker_counted(broker, vhost: str, queue: str, **expected: int) -> None:
    """Wait until the broker's counters of the queue say `expected` (they lag by a statistics interval). Read
    while the consumer is still connected: on a loaded clean-clone run, read after it was ended, the queue's counts
    stayed at 0 deliveries of 8 for the whole minute."""
    def counts():
        stats = broker.api("GET", f"/queues/{vhost}/{queue}").json().get("message_stats", {})
        return {k: stats.get(k, 0) for k in expected}
    # Bounded well past the lag: a loaded clean-clone run's Celery client took over 20 s to publish and be counted.
    wait_for(lambda: counts() == expected, 60, lambda: f"the broker to count {expected} on {queue} ({counts()})")


def test_pika_queue_time_grows_as_a_consumer_sleeping_2_s_a_message_says(broker, vhost, watching, traced):
    """pika's instrumentation nests two send spans per message: five messages are five publishes. With prefetch 1
    and 2 s per message, the n-th waits about 2n s: ackscope's queue time is the clients' own clocks' figure."""
    declare(broker, vhost, "orders")
    consumer = traced.start(sys.executable, "traced.py", "pika-consume", "orders", "2",
                            env={"OTEL_SERVICE_NAME": "billing"})
    published = records(traced.run(sys.executable, "traced.py", "pika-publish", "orders", "5",
                                   env={"OTEL_SERVICE_NAME": "shop"}))
    wait_for(lambda: flow(watching, "orders", "shop", "delivered_total") == 5, 40,
             lambda: f"five deliveries traced (scrape: {flow(watching, 'orders', 'shop', 'delivered_total')})")
    broker_counted(broker, vhost, "orders", publish=5, deliver=5, redeliver=0)
    got = consumer_records(consumer)
    received = {r["received"]: r["at"] for r in got if "received" in r}
    waits = [received[f"message {r['published']}"] - r["at"] for r in published]
    assert sorted(waits) == pytest.approx([0, 2, 4, 6, 8], abs=0.6)  # the clients' own record
    samples = metrics(watching)
    labels = dict(destination="orders", service="shop")
    assert value(samples, "ackscope_trace_published_total", **labels) == 5
    assert value(samples, "ackscope_trace_queue_time_seconds_count", **labels) == 5
    # The publish span starts a little before the client's own record of the publish, never after.
    assert value(samples, "ackscope_trace_queue_time_seconds_sum", **labels) == pytest.approx(sum(waits), abs=0.5)
    assert value(samples, "ackscope_trace_queue_time_seconds_bucket", le="5.0", **labels) == 3
    assert value(samples, "ackscope_trace_processing_seconds_sum", **labels) == pytest.approx(10, abs=0.5)
    assert value(samples, "ackscope_trace_duplicate_deliveries_total", **labels) == 0
    assert value(samples, "ackscope_trace_clock_skewed_total", **labels) is None
    assert value(samples, "ackscope_trace_spans_received_total", shape="older") == 15  # 2 sends + 1 receive each


def test_aio_pika_publishes_and_deliveries_pair_and_name_their_queue(broker, vhost, watching, traced):
    declare(broker, vhost, "invoices")
    consumer = traced.start(sys.executable, "traced.py", "aio-pika-consume", "invoices", "0",
                            env={"OTEL_SERVICE_NAME": "ledger"})
    published = records(traced.run(sys.executable, "traced.py", "aio-pika-publish", "invoices", "20",
                                   env={"OTEL_SERVICE_NAME": "shop"}))
    wait_for(lambda: flow(watching, ",invoices", "shop", "delivered_total") == 20, 40, "twenty deliveries traced")
    broker_counted(broker, vhost, "invoices", publish=20, deliver=20)
    got = consumer_records(consumer)
    assert len(published) == 20 and len([r for r in got if "received" in r]) == 20
    samples = metrics(watching)
    assert value(samples, "ackscope_trace_published_total", destination=",invoices", service="shop") == 20
    assert value(samples, "ackscope_trace_unprocessed_messages", destination=",invoices", service="shop",
                 state="gone") == 0


def test_an_auto_ack_consumer_killed_mid_batch_leaves_its_messages_unprocessed_and_gone(monkeypatch, broker, vhost,
                                                                                        watching, traced):
    """The broker handed all ten over at once (no prefetch limit, auto-ack): the queue holds none of them. The
    consumer processed some, 2 s each, and was killed. The rest are gone: the spans say no delivery came, the
    broker says the queue does not hold them."""
    declare(broker, vhost, "jobs")
    consumer = traced.start(sys.executable, "traced.py", "aio-pika-consume", "jobs", "2", "auto-ack",
                            env={"OTEL_SERVICE_NAME": "worker"})
    traced.run(sys.executable, "traced.py", "aio-pika-publish", "jobs", "10", env={"OTEL_SERVICE_NAME": "shop"})
    wait_for(lambda: (flow(watching, ",jobs", "shop", "delivered_total") or 0) >= 2, 30, "two deliveries traced")
    os.killpg(consumer.pid, signal.SIGKILL)
    out, _ = consumer.communicate(timeout=10)
    traced.running.remove(next(r for r in traced.running if r[1] is consumer))
    processed = len([r for r in records(out) if "received" in r])
    assert 2 <= processed < 10

    def gone():
        n = flow(watching, ",jobs", "shop", "unprocessed_messages", state="gone")
        return n if n else None
    # A delivery the killed process began but whose span it never sent counts as unprocessed: ackscope knows
    # only the spans.
    traced_deliveries = flow(watching, ",jobs", "shop", "delivered_total")
    assert wait_for(gone, 30, "the unprocessed messages placed as gone") == 10 - traced_deliveries
    assert traced_deliveries <= processed
    assert flow(watching, ",jobs", "shop", "unprocessed_messages", state="waiting") == 0
    assert broker.api("GET", f"/queues/{vhost}/jobs").json()["messages"] == 0
    broker_counted(broker, vhost, "jobs", deliver_no_ack=10)

    # The finding joins the spans with the broker: the queue, what it holds, what the broker delivered from it.
    def finding():
        found = requests.get(watching.url + "/api/findings", auth=(WEB_USER, WEB_PASSWORD), timeout=5).json()
        return next((f for f in found["findings"] if f["rule"] == "trace-messages-unprocessed"
                     and f["object"] == "queue jobs, published by shop" and f["evidence"].get("gone")), None)
    found = wait_for(finding, 30, "the trace-messages-unprocessed finding")
    assert (found["severity"], found["vhost"], found["evidence"]["queue_holds"]) == ("warning", vhost, 0)
    assert found["evidence"]["broker_deliveries_in_window"] == 10
    assert "died before its span ended" in found["evidence"]["inferred"]
    # Beside it, from the node's log: the killed consumer's connection (aio-pika's, by its library), dropped.
    assert any(e.startswith("a connection closed: aiormq") and e.endswith("(dropped)")
               for e in found["evidence"]["broker_events"]), \
        found["evidence"]["broker_events"]

    # The dashboard's page of traced messages: the destination first, with its gone messages, and the finding.
    app = page(monkeypatch, "traces", watching.url, ACKSCOPE_WEB_USERNAME=WEB_USER,
               ACKSCOPE_WEB_PASSWORD=WEB_PASSWORD)
    table, findings = frames(app)[:2]
    assert (table.iloc[0]["destination"], table.iloc[0]["gone"]) == (",jobs", 10 - traced_deliveries)
    assert "no longer in their queue" in app.error[0].value
    assert "trace-messages-unprocessed" in set(findings["rule"])


def test_a_requeue_shows_each_message_delivered_twice_to_the_same_service(broker, vhost, watching, traced):
    """aio-pika's spans name the queue (the default exchange's ",retries"), so the duplicates are joined with the
    broker's count of the queue's redeliveries; they carry no redelivered flag of their own."""
    declare(broker, vhost, "retries")
    consumer = traced.start(sys.executable, "traced.py", "aio-pika-consume", "retries", "0", "requeue",
                            env={"OTEL_SERVICE_NAME": "billing"})
    traced.run(sys.executable, "traced.py", "aio-pika-publish", "retries", "4", env={"OTEL_SERVICE_NAME": "shop"})
    wait_for(lambda: flow(watching, ",retries", "shop", "duplicate_deliveries_total") == 4, 40,
             "four duplicate deliveries traced")
    broker_counted(broker, vhost, "retries", deliver=8, redeliver=4)
    got = consumer_records(consumer)
    assert sorted(r["redelivered"] for r in got if "received" in r) == [False] * 4 + [True] * 4
    assert flow(watching, ",retries", "shop", "delivered_total") == 4

    # The finding names the duplicates as redeliveries by the broker's own count, the spans flagging none.
    def finding():
        found = requests.get(watching.url + "/api/findings", auth=(WEB_USER, WEB_PASSWORD), timeout=5).json()
        return next((f for f in found["findings"] if f["rule"] == "trace-duplicate-deliveries"
                     and f["evidence"].get("broker_redeliveries_in_window") == 4), None)
    found = wait_for(finding, 30, "the trace-duplicate-deliveries finding with the broker's four redeliveries")
    assert (found["evidence"]["duplicate_deliveries"], found["evidence"]["flagged_redelivered_by_span"]) == (4, 0)
    assert found["evidence"]["queue"] == "retries" and "4 redeliveries on retries" in found["explanation"]


def test_celery_tasks_pair_their_apply_async_with_their_run(broker, vhost, watching, traced):
    """Celery's instrumentation: apply_async/{task} on the sender, run/{task} on the worker, a child of it."""
    worker = traced.start(sys.executable, "-m", "celery", "-A", "traced_celery", "worker", "--pool=solo",
                          "--loglevel=WARNING", ready=False, env={"OTEL_SERVICE_NAME": "worker"})
    wait_for(lambda: any(c["name"] == "celery" and c.get("consumers") for c in
                         broker.api("GET", f"/queues/{vhost}").json()), timeout=60, what="the worker to consume")
    sent = records(traced.run(sys.executable, "traced_celery.py", "6", env={"OTEL_SERVICE_NAME": "web"}))
    wait_for(lambda: flow(watching, "celery", "web", "delivered_total") == 6, 40,
             lambda: f"six task runs traced ({flow(watching, 'celery', 'web', 'delivered_total')})")
    ran = consumer_records(worker)
    assert len(sent) == 6 and sorted(r["ran"] for r in ran if "ran" in r) == list(range(6))
    samples = metrics(watching)
    assert value(samples, "ackscope_trace_published_total", destination="celery", service="web") == 6
    assert value(samples, "ackscope_trace_processing_seconds_count", destination="celery", service="web") == 6
    assert value(samples, "ackscope_trace_spans_received_total", shape="celery") == 12
    broker_counted(broker, vhost, "celery", publish=6)


def test_the_pipeline_audits_the_traced_messages_the_exporter_kept(spark, broker, vhost, start_exporter, tmp_path):
    """Real traffic, per message, on Spark: the requeue client's four messages, each delivered twice to one
    service, and one published to a queue nobody consumes; the exporter keeps each message past its deadline when
    it stops, and the pipeline's trace audit says what the clients' own records say."""
    data = tmp_path / "data"
    exporter = start_exporter(broker.management_url, interval=0.5, selection=only_vhost(vhost), trace_deadline=3.0,
                              data_dir=str(data))
    declare(broker, vhost, "retries")
    declare(broker, vhost, "nobody")
    with Clients(broker.amqp_url(vhost), tmp_path) as clients:
        clients.env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = exporter.url + "/v1/traces"
        consumer = clients.start(sys.executable, "traced.py", "pika-consume", "retries", "0", "requeue",
                                 env={"OTEL_SERVICE_NAME": "billing"})
        clients.run(sys.executable, "traced.py", "pika-publish", "retries", "4", env={"OTEL_SERVICE_NAME": "shop"})
        clients.run(sys.executable, "traced.py", "pika-publish", "nobody", "1", env={"OTEL_SERVICE_NAME": "shop"})
        wait_for(lambda: value(scrape(exporter), "ackscope_trace_duplicate_deliveries_total", destination="retries",
                               service="shop") == 4, 40, "four duplicate deliveries traced")
        wait_for(lambda: value(scrape(exporter), "ackscope_trace_unprocessed_messages", destination="nobody",
                               service="shop", state="unplaced") == 1, 20, "the unconsumed message unprocessed")
        assert value(scrape(exporter), "ackscope_trace_unprocessed_total", destination="nobody", service="shop") == 1
        assert value(scrape(exporter), "ackscope_trace_unprocessed_total", destination="retries", service="shop") == 0
        got = consumer_records(consumer)
    exporter.stop()  # every message is past its deadline: all written
    assert len([r for r in got if "received" in r]) == 8

    summary = execute(PipelineConfig(str(data), str(tmp_path / "out")), Progress(io.StringIO()))
    assert summary["inputs"]["traces/messages"]["rows"] == 5 and summary["files_skipped"] == 0
    audit = {r["destination"]: r for r in ds.dataset(tmp_path / "out" / "trace_audit", format="parquet")
             .to_table().to_pylist()}
    retries, nobody = audit["retries"], audit["nobody"]
    assert (retries["published"], retries["delivered"], retries["duplicated"], retries["duplicate_deliveries"],
            retries["unprocessed"]) == (4, 4, 4, 4, 0)
    assert (nobody["published"], nobody["delivered"], nobody["unprocessed"]) == (1, 0, 1)
    times = ds.dataset(tmp_path / "out" / "trace_queue_time", format="parquet", partitioning="hive").to_table()
    assert sum(r["delivered"] for r in times.to_pylist() if r["destination"] == "retries") == 4


def test_the_endpoint_wants_the_web_credentials_and_refuses_bad_bodies_in_a_line(monkeypatch, watching):
    app = page(monkeypatch, "traces", watching.url, ACKSCOPE_WEB_USERNAME=WEB_USER,
               ACKSCOPE_WEB_PASSWORD=WEB_PASSWORD)
    assert "/v1/traces" in app.info[0].value  # no spans yet: the page says where to send them
    url = watching.url + "/v1/traces"
    assert requests.post(url, data=b"", headers={"Content-Type": "application/x-protobuf"}, timeout=5).status_code \
        == 401
    auth = (WEB_USER, WEB_PASSWORD)
    bad = requests.post(url, data=b"\xff\xff", auth=auth, headers={"Content-Type": "application/x-protobuf"},
                        timeout=5)
    assert (bad.status_code, bad.text.count("\n")) == (400, 1) and "malformed OTLP protobuf" in bad.text
    big = requests.post(url, data=b"\0" * (17 << 20), auth=auth, headers={"Content-Type": "application/x-protobuf"},
                        timeout=10)
    assert big.status_code == 413
    good = requests.post(url, data=b"", auth=auth, headers={"Content-Type": "application/x-protobuf"}, timeout=5)
    assert good.status_code == 200
    looked = requests.get(url, auth=auth, timeout=5)  # an on-call checking the endpoint is there
    assert (looked.status_code, looked.headers["Allow"]) == (405, "POST")
    # Rendered at the next poll.
    wait_for(lambda: value(metrics(watching), "ackscope_trace_requests_rejected_total") == 2, 10,
             "the two refused requests counted")
