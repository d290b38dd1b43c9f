"""Brokers whose management statistics are off (the official container image's default): the exporter and
`ackscope diagnose` read the counts from the broker's Prometheus plugin, and say so."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import uuid

import pytest
import requests
from client_processes import Clients
from helpers import (
    FIELD_SCENARIOS,
    from_the_log,
    markdown_table,
    only_vhost,
    own_vhost,
    polls_seen,
    scenarios_running,
    scrape,
    suspended_queue,
    value,
    wait_for,
    wait_for_sample,
)
from probe_helpers import captured_log

from ackscope.diagnosis.thresholds import Thresholds
from ackscope.diagnosis.traced_messages import RULES as TRACED
from ackscope.sources import Selection
from ackscope.workloads.private_broker import ADMIN_PASSWORD, ADMIN_USER
from ackscope.workloads.scenarios import PREFIX, SCENARIOS
from ackscope_testkit.fault_proxy import FaultProxy


@pytest.fixture
def off_vhost(statsoff_broker):
    with own_vhost(statsoff_broker, "off") as name:
        yield name


# Every scenario of a rule (the blocked publisher needs an alarm: the alarm test below), all at once; not those only
# the broker's log tells (no --broker-log here: tests/test_diagnosis.py and test_versions.py follow it).
SCENARIO_RULES = [s for s in SCENARIOS if s.rule and s.rule != "connection-blocked" and not from_the_log(s)
                  and s.name not in FIELD_SCENARIOS]
# What the plugin alone cannot give these rules; with --cli only the persistent counts stay out of reach. (A
# publisher without confirms is named on the plugin alone, as maybe transactional: its own test below.)
NEED_THE_CLI = {"transactional-publisher", "heartbeat-disabled"}
NOT_AVAILABLE = {"transient-in-durable-queue", "dead-lettering-stuck"}
# Whatever the source: what only the broker's log tells (no --broker-log here), and what 3.10 neither does nor
# reports (4.3's silent cancel, a shovel's blocked status, the deprecated features in use).
WHATEVER_THE_SOURCE = {"consumer-timed-out", "closed-on-error", "dead-letter-cycle-dropped",
                       "consumer-cancelled-by-broker", "shovel-blocked", "deprecated-feature-used",
                       # No application sends spans here: tests/test_traces_clients.py.
                       *(r.id for r in TRACED)}


@pytest.mark.parametrize("with_cli", [False, True], ids=["plugin", "plugin-and-cli"])
def test_every_rule_the_data_allows_fires_on_its_culprit_named_by_what_it_touches(statsoff_broker, off_vhost,
                                                                                  start_exporter, with_cli):
    exporter = start_exporter(statsoff_broker.management_url, prometheus_url=statsoff_broker.prometheus_url,
                              cli=statsoff_broker.cli_command() if with_cli else None, interval=0.5, timeout=5.0,
                              # The plugin gives no head message's timestamp: messages-waiting is the bound's,
                              # which grows only as fast as the clock.
                              thresholds=Thresholds(unconfirmed_backlog=250, oldest_message_seconds=10),
                              selection=only_vhost(off_vhost))
    expected = {s.rule for s in SCENARIO_RULES} - NOT_AVAILABLE - (set() if with_cli else NEED_THE_CLI)

    def on_its_culprit(f: dict) -> bool:
        """The finding names its scenario's queue or exchange (plugin), or its client (CLI)."""
        scenario = next(s for s in SCENARIO_RULES if s.rule == f["rule"])
        touched = f"{PREFIX}{scenario.name}"
        return (f["object"] == f"queue {touched}" or touched in json.dumps(f["evidence"])
                or (with_cli and f["connection_name"] == f"ackscope-scenario {scenario.name}"))

    def fired():
        doc = requests.get(exporter.url + "/api/findings", timeout=5).json()
        found = {f["rule"] for f in doc["findings"] if f["rule"] in expected and on_its_culprit(f)}
        return doc if found == expected else None

    last: dict = {}

    def missing() -> str:
        doc = requests.get(exporter.url + "/api/findings", timeout=5).json()
        last["seen"] = sorted((f["rule"], f["object"], json.dumps(f["evidence"])) for f in doc["findings"])
        return f"{sorted(expected)} on their culprits; seen: {last['seen']}"

    with scenarios_running(statsoff_broker, off_vhost, *(s.name for s in SCENARIO_RULES)):
        with suspended_queue(statsoff_broker, off_vhost, f"{PREFIX}unconfirmed-backlog"):
            # Bounded at three minutes: with the CLI, a loaded clean-clone run had not read every rule's facts within
            # 90 s (each rabbitmqctl call boots an Erlang VM).
            doc = wait_for(fired, timeout=180, what=missing)
            s = scrape(exporter)
    # The series the rules read are exported too: depths, and per channel prefetch, unacked, unconfirmed.
    assert value(s, "ackscope_queue_messages_ready", vhost=off_vhost, queue=f"{PREFIX}no-consumers-backlog") == 150
    in_vhost = {name.removeprefix("ackscope_channel_"): [v for lbl, v in s.get(name, []) if lbl["vhost"] == off_vhost]
                for name in ("ackscope_channel_messages_unconfirmed", "ackscope_channel_messages_unacked",
                             "ackscope_channel_prefetch_count")}
    assert max(in_vhost["messages_unconfirmed"]) >= 250
    assert 10 in in_vhost["prefetch_count"] and max(in_vhost["messages_unacked"]) >= 50
    not_evaluated = {n["rule"] for n in doc["not_evaluated"]}
    assert not_evaluated == NOT_AVAILABLE | WHATEVER_THE_SOURCE | (set() if with_cli else
                                                               NEED_THE_CLI | {"connection-blocked"})
    if not with_cli:  # channels are known by process id, and named by the queues and exchanges they touch
        channel_findings = [f for f in doc["findings"] if f["object"].startswith("channel <")]
        assert channel_findings and all(f["evidence"].get("queues") or f["evidence"].get("exchanges")
                                        or f["evidence"].get("queue") for f in channel_findings)
        # The unsafe publisher is named on the plugin alone, with the doubt the plugin leaves said.
        unsafe = [f for f in doc["findings"] if f["rule"] == "publisher-without-confirms" and on_its_culprit(f)]
        assert unsafe and all("--cli" in f["evidence"]["transactional"] for f in unsafe)


def test_the_management_api_refuses_channels_with_its_reason_when_statistics_are_off(statsoff_broker):
    r = requests.get(statsoff_broker.management_url + "/api/channels", auth=(ADMIN_USER, ADMIN_PASSWORD), timeout=5)
    assert r.status_code == 400 and "disabled" in r.json()["reason"]  # the premise of this file


def test_exporter_reads_the_plugin_and_finds_the_saturated_and_the_hoarding_consumer(statsoff_broker, off_vhost,
                                                                                      start_exporter):
    with captured_log() as lines:
        exporter = start_exporter(statsoff_broker.management_url, prometheus_url=statsoff_broker.prometheus_url,
                                  selection=only_vhost(off_vhost))
        with scenarios_running(statsoff_broker, off_vhost, "prefetch-saturated", "prefetch-unlimited"):
            last: list[str] = []

            def findings():
                found = requests.get(exporter.url + "/api/findings", timeout=5).json()["findings"]
                last[:] = sorted(f["rule"] for f in found)
                return {f["rule"]: f for f in found} if {"prefetch-saturated", "prefetch-unlimited"} <= {
                    f["rule"] for f in found} else None
            # The plugin's per-channel counts come at its own scrape cadence: on a loaded machine, over 40 s once.
            found = wait_for(findings, timeout=90,
                             what=lambda: f"prefetch findings from the plugin's counts (last seen: {last})")
            s = wait_for_sample(exporter, "ackscope_up", 1)
    assert value(s, "ackscope_source_info", source="prometheus") == 1
    # What the plugin cannot say is said, in the metrics and the JSON, never left as a silent "healthy".
    assert value(s, "ackscope_rule_not_evaluated", rule="transactional-publisher") == 1
    document = requests.get(exporter.url + "/api/findings", timeout=5).json()
    assert {"rule": "heartbeat-disabled", "needs": ["the connection's heartbeat"]} in document["not_evaluated"]
    saturated = found["prefetch-saturated"]
    assert saturated["object"].startswith("channel <") and saturated["evidence"]["queue"] == \
        f"{PREFIX}prefetch-saturated"
    assert saturated["evidence"]["prefetch_limit"] == 10 and saturated["evidence"]["unacked"] == 10
    channel = saturated["object"].removeprefix("channel ")
    assert value(s, "ackscope_channel_messages_unacked", vhost=off_vhost, channel=channel) == 10
    assert value(s, "ackscope_channel_prefetch_count", vhost=off_vhost, channel=channel) == 10
    assert value(s, "ackscope_queue_messages_ready", vhost=off_vhost, queue=f"{PREFIX}prefetch-saturated") > 0
    said = [line for line in lines if line.startswith("source: ")]
    assert said == [f"source: the Prometheus plugin at {statsoff_broker.prometheus_url} (management statistics "
                    "are disabled on the broker)"], lines


def test_diagnose_reports_findings_not_unreachable_when_statistics_are_off(statsoff_broker, off_vhost):
    with scenarios_running(statsoff_broker, off_vhost, "prefetch-saturated"):
        def diagnosed():
            done = subprocess.run(
                [sys.executable, "-m", "ackscope", "diagnose", "--management-url", statsoff_broker.management_url,
                 "--prometheus-url", statsoff_broker.prometheus_url, "--include-vhosts", re.escape(off_vhost),
                 "--window", "1s", "--format", "json"], capture_output=True, text=True, timeout=120,
                env=dict(os.environ, ACKSCOPE_PASSWORD=ADMIN_PASSWORD))
            return done if "prefetch-saturated" in done.stdout else None
        done = wait_for(diagnosed, timeout=60, what="ackscope diagnose to find the saturated consumer")
    assert done.returncode == 1, done.stderr  # a warning: not 3, "cannot read"
    report = json.loads(done.stdout)
    assert "transactional-publisher" in {n["rule"] for n in report["not_evaluated"]}
    assert "Traceback" not in done.stderr


def test_auto_keeps_the_management_api_where_statistics_are_on(broker, vhost, start_exporter):
    exporter = start_exporter(broker.management_url, prometheus_url=broker.prometheus_url,
                              selection=only_vhost(vhost))
    s = wait_for_sample(exporter, "ackscope_source_info", 1, source="management")
    assert value(s, "ackscope_source_info", source="prometheus") is None
    # Every rule runs on the management API but those only the broker's log can feed (and 4.3's on 3.10).
    assert {labels["rule"] for labels, _ in s["ackscope_rule_not_evaluated"]} == WHATEVER_THE_SOURCE


# What stays exported when one plugin endpoint fails, and the rules that wait for it.
STILL_EXPORTED = {"metrics/detailed": ("ackscope_node_memory_used_bytes", "prefetch-saturated"),
                  "metrics": ("ackscope_queue_messages_ready", "memory-alarm")}


@pytest.mark.parametrize("endpoint", ["metrics/detailed", "metrics"])
@pytest.mark.parametrize("fault, reason", [("hang", "timeout"), ("html", "malformed"), ("malformed", "malformed"),
                                           ("500", "server_error")])
def test_a_broken_plugin_endpoint_costs_only_its_part_is_counted_said_once_and_recovered_from(
        statsoff_broker, start_exporter, caplog, endpoint, fault, reason):
    caplog.set_level(logging.INFO, logger="ackscope")
    proxy = FaultProxy(statsoff_broker.prometheus_url)
    kept, waiting_rule = STILL_EXPORTED[endpoint]
    queue = f"{PREFIX}partial-{uuid.uuid4().hex[:8]}"  # a queue with a message, so queue depths are exported
    statsoff_broker.api("PUT", f"/queues/%2F/{queue}", json={"durable": True})
    statsoff_broker.api("POST", "/exchanges/%2F/amq.default/publish", json={
        "properties": {}, "routing_key": queue, "payload": "x", "payload_encoding": "string"})
    try:
        # The request times out (1 s) well inside the poll's deadline (3 s): one reason, hence one line.
        exporter = start_exporter(statsoff_broker.management_url, prometheus_url=proxy.url, source="prometheus",
                                  timeout=1.0, deadline=3.0)
        wait_for_sample(exporter, "ackscope_up", 1)
        proxy.faults["/" + endpoint] = fault
        s = wait_for_sample(exporter, "ackscope_poll_errors_total", lambda v: v >= 2, endpoint=endpoint,
                            reason=reason)
        assert value(s, "ackscope_up") == 1  # partial: what the other endpoints give is exported
        assert kept in s, f"{kept} should still be exported without {endpoint}"
        assert value(s, "ackscope_rule_not_evaluated", rule=waiting_rule) == 1
        del proxy.faults["/" + endpoint]
        wait_for(lambda: value(scrape(exporter), "ackscope_rule_not_evaluated", rule=waiting_rule) is None,
                 what=f"{waiting_rule} evaluated again")
        wait_for(lambda: any(r.getMessage() == "every endpoint answers again" for r in caplog.records),
                 what="the all-clear, once the endpoint has answered for five intervals")
        # Read before the proxy closes: the exporter keeps polling until the fixture stops it.
        records = list(caplog.records)
    finally:
        proxy.close()
        statsoff_broker.api("DELETE", f"/queues/%2F/{queue}")
    said = [r.getMessage() for r in records if r.getMessage().startswith("poll partial")]
    assert len(said) == 1 and endpoint in said[0], said  # once, not once per poll
    assert not any(r.exc_info for r in records), "no traceback in the log"


def test_without_either_plugin_endpoint_the_poll_fails_and_says_why(statsoff_broker, start_exporter):
    proxy = FaultProxy(statsoff_broker.prometheus_url)
    try:
        proxy.faults.update({"/metrics/detailed": "500", "/metrics": "500"})
        exporter = start_exporter(statsoff_broker.management_url, prometheus_url=proxy.url, source="prometheus",
                                  timeout=1.0, deadline=3.0)
        s = wait_for_sample(exporter, "ackscope_poll_errors_total", lambda v: v >= 1, endpoint="metrics",
                            reason="server_error")
        assert value(s, "ackscope_up") == 0
        assert "ackscope_queue_messages_ready" not in s
    finally:
        proxy.close()


def test_a_broker_with_only_the_prometheus_plugin_is_read_from_the_plugin_alone(plugin_only_broker, start_exporter):
    queue = f"{PREFIX}prefetch-saturated"
    with captured_log() as lines:
        exporter = start_exporter(plugin_only_broker.management_url, prometheus_url=plugin_only_broker.prometheus_url,
                                  selection=Selection(include_queues=re.compile(re.escape(queue))))
        with scenarios_running(plugin_only_broker, "/", "prefetch-saturated"):
            wait_for(lambda: "prefetch-saturated" in {f["rule"] for f in requests.get(
                exporter.url + "/api/findings", timeout=5).json()["findings"]}, timeout=40,
                what="the saturated consumer, from the plugin alone")
            s = wait_for_sample(exporter, "ackscope_queue_messages_ready", lambda v: v > 0, queue=queue)
    assert value(s, "ackscope_up") == 1 and value(s, "ackscope_source_info", source="prometheus") == 1
    assert value(s, "ackscope_rule_not_evaluated", rule="non-durable-queue-backlog") == 1  # no durability here
    assert any(line.startswith("source: the Prometheus plugin") and "no management API answers" in line
               for line in lines), lines


def test_with_the_cli_the_culprit_is_named_and_publishers_without_confirms_are_found(statsoff_broker, off_vhost,
                                                                                       start_exporter):
    cli = statsoff_broker.cli_command()
    # rabbitmqctl starts an Erlang VM at each poll: beside the suite's other workers it can take longer than 5 s,
    # and an enrichment that times out names nobody.
    exporter = start_exporter(statsoff_broker.management_url, prometheus_url=statsoff_broker.prometheus_url, cli=cli,
                              interval=1.0, timeout=15.0,
                              selection=only_vhost(off_vhost))
    with scenarios_running(statsoff_broker, off_vhost, "prefetch-saturated", "publisher-without-confirms"):
        # Each finding names its client (the saturated consumer published its backlog without confirms too).
        expected = {("prefetch-saturated", "ackscope-scenario prefetch-saturated"),
                    ("publisher-without-confirms", "ackscope-scenario publisher-without-confirms")}

        def findings():
            doc = requests.get(exporter.url + "/api/findings", timeout=5).json()
            return doc if expected <= {(f["rule"], f["connection_name"]) for f in doc["findings"]} else None
        doc = wait_for(findings, timeout=120, what=f"findings naming their clients: {sorted(expected)}")
    assert {n["rule"] for n in doc["not_evaluated"]} == NOT_AVAILABLE | WHATEVER_THE_SOURCE
    # The node's own consumer_timeout, which nothing but its CLI tells: RabbitMQ's default here.
    assert value(scrape(exporter), "ackscope_node_consumer_timeout_seconds", node=statsoff_broker.nodename) == 1800


@pytest.mark.parametrize("cli, said", [(["bash", "-c", "sleep 30"], "no answer within"), (["false"], "exit status 1")])
def test_a_hanging_or_failing_cli_drops_the_enrichment_only_and_says_so_once(statsoff_broker, start_exporter, caplog,
                                                                              cli, said):
    caplog.set_level(logging.INFO, logger="ackscope")
    exporter = start_exporter(statsoff_broker.management_url, prometheus_url=statsoff_broker.prometheus_url, cli=cli,
                              source="prometheus", interval=0.5, timeout=1.0, deadline=2.0)
    polls_seen(exporter.url, 3)  # three polls, each without the CLI
    s = wait_for_sample(exporter, "ackscope_up", 1)
    assert value(s, "ackscope_poll_duration_seconds") < 2.0 + 0.5  # the deadline holds
    dropped = [r.getMessage() for r in caplog.records if "CLI enrichment" in r.getMessage()]
    assert len(dropped) == 1 and said in dropped[0], dropped
    if said == "exit status 1":  # the node's settings, read in the background, are missed once too (a hang is
        # said at the end of the CLI's own 30 s)
        unread = [r.getMessage() for r in caplog.records if "node's settings" in r.getMessage()]
        assert unread == ["the node's settings (false) not read: exit status 1"], unread
    assert value(s, "ackscope_rule_not_evaluated", rule="heartbeat-disabled") == 1  # without the CLI, unknown again


def test_the_queue_list_is_read_once_then_for_new_queues_and_a_deleted_queue_leaves(statsoff_broker, start_exporter):
    management = FaultProxy(statsoff_broker.management_url)  # here only to count the requests
    first, second = (f"{PREFIX}list-{uuid.uuid4().hex[:8]}" for _ in range(2))
    statsoff_broker.api("PUT", f"/queues/%2F/{first}", json={"durable": True})
    try:
        exporter = start_exporter(management.url, prometheus_url=statsoff_broker.prometheus_url, source="prometheus",
                                  interval=0.3, selection=Selection(include_queues=re.compile(f"{PREFIX}list-.*")))
        wait_for_sample(exporter, "ackscope_queue_consumers", 0, queue=first, durable="true", type="classic")
        polls_seen(exporter.url, 5)
        assert management.requests.count("queues") == 1  # five polls, one list
        statsoff_broker.api("PUT", f"/queues/%2F/{second}", json={"durable": False})
        # A new queue is listed in the poll that first sees it in the plugin, with its type and durability.
        wait_for_sample(exporter, "ackscope_queue_consumers", 0, queue=second, durable="false", type="classic")
        assert management.requests.count("queues") == 2
        statsoff_broker.api("DELETE", f"/queues/%2F/{first}")
        wait_for(lambda: value(scrape(exporter), "ackscope_queue_consumers", queue=first) is None,
                 what=f"deleted queue {first} to leave the metrics")
        assert management.requests.count("queues") == 2
    finally:
        management.close()
        statsoff_broker.api("DELETE", f"/queues/%2F/{second}")
        requests.delete(f"{statsoff_broker.management_url}/api/queues/%2F/{first}", timeout=5,
                        auth=(ADMIN_USER, ADMIN_PASSWORD))


def _run_overview() -> None:
    from ackscope.dashboard.pages import one
    one("overview")


def test_the_dashboard_names_its_source_the_rules_it_cannot_run_and_channels_by_process_id(
        statsoff_broker, off_vhost, start_exporter, monkeypatch):
    from streamlit.testing.v1 import AppTest

    exporter = start_exporter(statsoff_broker.management_url, prometheus_url=statsoff_broker.prometheus_url,
                              selection=only_vhost(off_vhost))
    with scenarios_running(statsoff_broker, off_vhost, "prefetch-saturated"):
        wait_for(lambda: "prefetch-saturated" in {f["rule"] for f in requests.get(
            exporter.url + "/api/findings", timeout=5).json()["findings"]}, timeout=40,
            what="the saturated consumer, from the plugin")
        monkeypatch.setenv("ACKSCOPE_EXPORTER_URL", exporter.url)
        app = AppTest.from_function(_run_overview, default_timeout=30)
        app.run()
    assert not app.exception, [e.value for e in app.exception]
    assert any("read from the broker's Prometheus plugin (management statistics off)" in c.value
               for c in app.caption), [c.value for c in app.caption]
    said = " ".join(i.value for i in app.info).replace("\\", "")  # without markdown's escapes
    assert "transactional-publisher" in said and "transactional flag" in said, said
    saturated = next(row for row in markdown_table(app, "client") if row["queues"] == f"{PREFIX}prefetch-saturated")
    assert saturated["channel"].startswith("<0.") and saturated["unacked"] == saturated["prefetch limit"] == "10"


def test_a_memory_alarm_is_critical_and_with_the_cli_the_blocked_publisher_is_named(statsoff_broker, off_vhost):
    cli = " ".join(statsoff_broker.cli_command())
    with scenarios_running(statsoff_broker, off_vhost, "blocked-publisher"):
        statsoff_broker.ctl("set_vm_memory_high_watermark", "0.000001")
        last = {}
        try:
            def blocked():
                # rabbitmqctl boots a VM of its own for each listing: under the parallel phase's load it took longer
                # than the 5 s a request may take by default, and every run dropped the CLI's part.
                done = subprocess.run(
                    [sys.executable, "-m", "ackscope", "diagnose", "--management-url", statsoff_broker.management_url,
                     "--prometheus-url", statsoff_broker.prometheus_url, "--cli", cli, "--include-vhosts",
                     re.escape(off_vhost), "--window", "1s", "--timeout", "20", "--format", "json"],
                    capture_output=True, text=True, timeout=120, env=dict(os.environ, ACKSCOPE_PASSWORD=ADMIN_PASSWORD))
                report = json.loads(done.stdout)
                found = {(f["rule"], f["severity"], f["connection_name"]) for f in report["findings"]}
                last.update(code=done.returncode, found=sorted(found, key=str), said=done.stderr.strip()[-600:])
                return (done.returncode, found) if ("connection-blocked", "warning",
                                                    "ackscope-scenario blocked-publisher") in found else None
            code, found = wait_for(blocked, timeout=120,
                                   what=lambda: f"the scenario's publisher, blocked, named by the CLI (last run {last})")
        finally:
            statsoff_broker.ctl("set_vm_memory_high_watermark", "0.4")
    assert code == 2  # critical: the node's alarm, from its Prometheus plugin
    assert any(rule == "memory-alarm" and severity == "critical" for rule, severity, _ in found)


def test_a_family_the_plugin_does_not_answer_is_counted_and_its_rules_wait(statsoff_broker, start_exporter, caplog):
    caplog.set_level(logging.INFO, logger="ackscope")
    proxy = FaultProxy(statsoff_broker.prometheus_url)
    try:
        # As a version without per-channel families answers: not a word about them, only their absence.
        proxy.faults["/metrics/detailed"] = "without:rabbitmq_detailed_channel_"
        exporter = start_exporter(statsoff_broker.management_url, prometheus_url=proxy.url, source="prometheus")
        s = wait_for_sample(exporter, "ackscope_poll_errors_total", lambda v: v >= 1, endpoint="metrics/detailed",
                            reason="incomplete")
        assert value(s, "ackscope_up") == 1
        assert value(s, "ackscope_rule_not_evaluated", rule="prefetch-saturated") == 1
        assert value(s, "ackscope_rule_not_evaluated", rule="memory-alarm") is None  # /metrics still answers
        records = list(caplog.records)  # before the proxy closes under the still polling exporter
    finally:
        proxy.close()
    said = [r.getMessage() for r in records if r.getMessage().startswith("poll partial")]
    assert len(said) == 1 and "channel_metrics" in said[0], said


def test_a_detailed_answer_cut_short_is_counted_never_read_as_whole(statsoff_broker, start_exporter):
    proxy = FaultProxy(statsoff_broker.prometheus_url)
    try:
        proxy.faults["/metrics/detailed"] = "truncated"  # half the body, with a Content-Length to match
        exporter = start_exporter(statsoff_broker.management_url, prometheus_url=proxy.url, source="prometheus")

        def counted():
            samples = scrape(exporter)
            # Cut mid-line it is malformed; cut between lines, the families after the cut are missing.
            return samples if any(lbl["endpoint"] == "metrics/detailed" and lbl["reason"] in ("malformed",
                                                                                             "incomplete")
                                  for lbl, _ in samples.get("ackscope_poll_errors_total", [])) else None
        s = wait_for(counted, what="the cut answer counted as malformed or incomplete")
        assert value(s, "ackscope_rule_not_evaluated", rule="prefetch-saturated") == 1
    finally:
        proxy.close()


def test_a_slow_celery_producer_without_confirms_is_a_warning_from_the_plugin_alone(statsoff_broker, off_vhost,
                                                                                    start_exporter, tmp_path):
    # Celery's defaults on a statistics-off broker (the container image's): 0.3 tasks a second without confirms.
    # The plugin counts where each channel's publishes went, and the queue list says the queue is durable.
    exporter = start_exporter(statsoff_broker.management_url, prometheus_url=statsoff_broker.prometheus_url,
                              interval=0.5, thresholds=Thresholds(window_seconds=20.0),
                              selection=only_vhost(off_vhost))
    with Clients(statsoff_broker.amqp_url(off_vhost), tmp_path) as producer:
        producer.start(sys.executable, "celery_app.py", "fine", "0")

        def warned():
            producer.check()
            return next((f for f in requests.get(exporter.url + "/api/findings", timeout=5).json()["findings"]
                         if f["rule"] == "publisher-without-confirms" and f["severity"] == "warning"), None)
        f = wait_for(warned, timeout=60, what="the producer's warning")
    assert f["evidence"]["routing"] == "counted by the broker per channel and queue"
    assert [(q["queue"], q["durable"]) for q in f["evidence"]["at_stake"]] == [("celery", True)]
    assert (f["evidence"]["publish_rate"] or 0) < 1 and "--cli" in f["evidence"]["transactional"]
