"""Diagnosis against a real broker: each rule fires on its scenario and names the culprit; a healthy
workload raises nothing; alarms are critical; `ackscope diagnose` exits as on-call checks expect."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator

import pytest
import requests
from helpers import (
    findings,
    from_the_log,
    memory_alarm,
    only_vhost,
    own_vhost,
    parse,
    polls_seen,
    private_broker,
    scenarios_running,
    suspended_queue,
    value,
    wait_for,
)

from ackscope.diagnosis.rules import RULES
from ackscope.diagnosis.thresholds import Thresholds
from ackscope.workloads.private_broker import ADMIN_PASSWORD, LocalBroker
from ackscope.workloads.scenarios import BY_NAME, PREFIX, SCENARIOS

# Rules a client cannot cause from a scenario: alarms are the broker's (the alarm test raises one).
# The broker's own state, not a client's doing: alarms, and the cluster's (on real nodes in test_cluster.py).
NOT_FROM_SCENARIOS = {"memory-alarm", "disk-alarm", "node-down", "network-partition", "quorum-queue-degraded",
                      "quorum-queue-no-quorum", "queue-leaders-unbalanced", "mirrored-queue-unsynchronised",
                      # AMQP 1.0 links and streams need RabbitMQ 4 and their own clients: tests/test_protocols_4x.py.
                      "receiver-unsettled-unbounded", "receiver-presettled", "sender-presettled",
                      "receiver-requeue-loop", "receiver-rejects",
                      "stream-consumer-lagging",
                      # Shovels and federation need their plugins and a second broker: tests/test_shovels.py.
                      "shovel-without-confirms", "shovel-not-running", "shovel-blocked", "federation-link-not-running",
                      # A publisher busy on purpose (scenarios publish a few a second): real clients on every
                      # release in tests/test_confirm_waits.py.
                      "publisher-waits-each-confirm",
                      # A consumer timed out takes 30 minutes or a node set otherwise; a cancel needs 4.3: on real
                      # clients and every release in tests/test_breaks.py.
                      "consumer-timed-out", "consumer-cancelled-by-broker",
                      # Listed by RabbitMQ 3.13 and later only: on real clients in tests/test_field_cases.py (the
                      # non-durable-queue-backlog scenario makes it too on 4.x).
                      "deprecated-feature-used",
                      # A dead-letter topology with no client to it: tests/test_field_cases.py (the dead-letter-cycle
                      # scenario makes it too, beside the drop its rule is named for).
                      "dead-letter-cycle",
                      # The applications' own spans: real instrumented clients in tests/test_traces_clients.py.
                      "trace-queue-time-high", "trace-messages-unprocessed", "trace-duplicate-deliveries",
                      "trace-clock-skew", "trace-sampling-incomplete"}


@pytest.fixture
def watching(broker, vhost, start_exporter):
    # A stalled queue holds a channel at about 500 unconfirmed (credit flow stops it there): the
    # unconfirmed-backlog scenario's size, below the production default of 1,000.
    # A consumer that has acked nothing for 10 s is stalled here (a minute by default): a test waits 30 s at most.
    # A get storm from 20 empty gets a second (50 by default): the scenario's hundred a second, round trips of a
    # blocking client, fall below 50 on a loaded machine.
    return start_exporter(broker.management_url, interval=0.5,
                          thresholds=Thresholds(unconfirmed_backlog=250, stalled_consumer_seconds=10,
                                                get_empty_rate=20.0),
                          selection=only_vhost(vhost))


SCENARIO_RULES = [s for s in SCENARIOS if s.rule and s.rule != "connection-blocked" and not from_the_log(s)]
# What only the broker's log tells (a channel closed on a double ack, a connection per message, a message dropped in
# a dead-letter cycle): judged by an exporter that follows the log of a node logging connections (info).
LOG_SCENARIOS = [s for s in SCENARIOS if from_the_log(s)]


@pytest.fixture(scope="module")
def logging_broker() -> Iterator[LocalBroker]:
    with private_broker("ackscope-diag-log", config=("log.file.level = info",)) as node:
        yield node


@pytest.mark.parametrize("scenario", SCENARIO_RULES, ids=[s.name for s in SCENARIO_RULES])
def test_each_rule_fires_on_its_scenario_and_names_the_culprit(broker, vhost, watching, scenario):
    with scenarios_running(broker, vhost, scenario.name):
        if scenario.name == "unconfirmed-backlog":
            with suspended_queue(broker, vhost, PREFIX + scenario.name):
                found = wait_for(lambda: _on_its_culprit(watching, scenario), timeout=30,
                                 what=f"{scenario.rule} on {scenario.name}")
        else:
            found = wait_for(lambda: _on_its_culprit(watching, scenario), timeout=30,
                             what=f"{scenario.rule} on {scenario.name}")
    f = found[0]
    assert f["vhost"] == vhost and f["severity"] in ("info", "warning", "critical")
    assert f["evidence"] and f["explanation"] and f["remedy"]


@pytest.mark.parametrize("scenario", LOG_SCENARIOS, ids=[s.name for s in LOG_SCENARIOS])
def test_each_rule_from_the_log_fires_on_its_scenario_and_names_the_culprit(logging_broker, start_exporter,
                                                                           scenario):
    node = logging_broker
    with own_vhost(node, "log") as vhost:
        exporter = start_exporter(node.management_url, interval=0.5, selection=only_vhost(vhost),
                                  broker_log=str(node.log_file))
        with scenarios_running(node, vhost, scenario.name):
            # 60 s: a connection per message is churn once six came and went (30 a minute, counted over a minute).
            found = wait_for(lambda: _on_its_culprit(exporter, scenario), timeout=60,
                             what=lambda: f"{scenario.rule} on {scenario.name}; seen: "
                                          f"{sorted((f['rule'], f['object']) for f in findings(exporter))}")
    f = found[0]
    assert f["vhost"] == vhost and f["severity"] in ("warning", "critical")
    assert f["evidence"]["source"] == "broker log" and f["explanation"] and f["remedy"]


def _on_its_culprit(exporter, scenario) -> list[dict]:
    """The findings of the scenario's rule that name its client or its queue."""
    client, queue = f"ackscope-scenario {scenario.name}", f"queue {PREFIX}{scenario.name}"
    return [f for f in findings(exporter)
            if f["rule"] == scenario.rule and (f["connection_name"] == client or f["object"] == queue)]


def test_every_client_rule_has_a_scenario():
    covered = {s.rule for s in SCENARIOS}
    assert {r.id for r in RULES if not r.id.startswith("probe-")} - NOT_FROM_SCENARIOS <= covered


def test_a_healthy_workload_raises_no_warning(broker, vhost, watching):
    with scenarios_running(broker, vhost, "healthy"):
        wait_for(lambda: requests.get(f"{broker.management_url}/api/queues/{vhost}/{PREFIX}healthy",
                                      auth=("guest", ADMIN_PASSWORD), timeout=5).json()
                 .get("message_stats", {}).get("ack", 0) > 20, what="the healthy workload to flow")
        # Six polls in a row (the rate rules compare each with the one before), none with a warning.
        polls = polls_seen(watching.url, 6)
    for poll in polls:
        assert [f for f in poll["findings"] if f["severity"] != "info"] == [], poll


def _diagnose(broker, vhost, *extra, password=ADMIN_PASSWORD, url=None):
    env = dict(os.environ, ACKSCOPE_PASSWORD=password, COLUMNS="200")
    return subprocess.run([sys.executable, "-m", "ackscope", "diagnose", "--management-url",
                           url or broker.management_url, "--include-vhosts", re.escape(vhost), "--window", "1.5s",
                           *extra], capture_output=True, text=True, timeout=120, env=env)


def test_memory_alarm_is_critical_blocks_the_publisher_and_exits_2(broker, vhost):
    with scenarios_running(broker, vhost, "blocked-publisher"):
        with memory_alarm(broker):
            last: list[object] = []

            def blocked():
                done = _diagnose(broker, vhost, "--format", "json")
                report = json.loads(done.stdout)
                rules = {(f["rule"], f["severity"], f["connection_name"]) for f in report["findings"]}
                last[:] = [done.returncode, sorted(rules)]
                return (done.returncode, rules) if ("connection-blocked", "warning",
                                                    "ackscope-scenario blocked-publisher") in rules else None
            # Each diagnose is a process of its own that polls twice: a few seconds each on a loaded machine.
            code, rules = wait_for(blocked, timeout=120,
                                   what=lambda: f"the scenario's publisher to be blocked (last: exit {last})")
    assert code == 2
    assert any(r == "memory-alarm" and s == "critical" for r, s, _ in rules)


def test_diagnose_text_names_the_culprit_and_the_remedy_and_exits_1_on_a_warning(broker, vhost):
    with scenarios_running(broker, vhost, "prefetch-unlimited"):
        wait_for(lambda: requests.get(f"{broker.management_url}/api/consumers/{vhost}",
                                      auth=("guest", ADMIN_PASSWORD), timeout=5).json(), what="the consumer")
        done = wait_for(lambda: (d := _diagnose(broker, vhost)).returncode == 1 and d, timeout=30,
                        what="diagnose to see the warning")
    head = next(line for line in done.stdout.splitlines() if "prefetch-unlimited" in line)
    assert head.startswith("WARNING") and f"vhost={vhost}" in head and "(ackscope-scenario prefetch-unlimited)" in head
    # The evidence a row a line, in words: the 50 it holds unacked, not a key=value run.
    assert re.search(r"^  evidence\s.*$", done.stdout, re.M) and re.search(r"^ +unacked +50$", done.stdout, re.M), \
        done.stdout
    assert "unacked=50" not in done.stdout and "Channel Prefetch Setting" in done.stdout
    assert done.stderr == ""


def test_diagnose_json_has_findings_and_broker(broker, vhost):
    done = _diagnose(broker, vhost, "--format", "json")
    report = json.loads(done.stdout)
    assert (done.returncode, report["findings"]) == (0, [])
    assert report["broker"]["rabbitmq_version"] == "3.10.8" and report["broker"]["vhosts"] == [vhost]


@pytest.mark.parametrize("case", ["unreachable", "wrong-password"])
def test_unreachable_broker_or_refused_login_exits_3_with_one_line(broker, vhost, case):
    from ackscope.workloads.ports import free_port
    if case == "unreachable":
        done = _diagnose(broker, vhost, url=f"http://127.0.0.1:{free_port()}")
    else:
        done = _diagnose(broker, vhost, password="not-the-password")
    assert done.returncode == 3
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ackscope diagnose: cannot read")
    assert ("Connection refused" if case == "unreachable" else "login failed") in lines[0]
    assert "not-the-password" not in done.stderr and "Traceback" not in done.stderr


def test_exporter_exports_findings_as_metrics(broker, vhost, watching):
    with scenarios_running(broker, vhost, "heartbeat-disabled"):
        def exported():
            samples = parse(requests.get(watching.url + "/metrics", timeout=5).text)
            return value(samples, "ackscope_finding", rule="heartbeat-disabled", severity="warning", vhost=vhost,
                         connection_name="ackscope-scenario heartbeat-disabled") == 1
        wait_for(exported, timeout=30, what="ackscope_finding for heartbeat-disabled")


def test_probe_rules_fire_from_live_probes_in_the_exporter(broker, vhost, start_exporter):
    from dataclasses import replace as with_

    from probe_helpers import probe_config, quick

    from ackscope.probes.targets import REJECT_PUBLISH
    nacking = with_(REJECT_PUBLISH, burst_interval=2.0)
    exporter = start_exporter(broker.management_url, interval=0.5,
                              probes=probe_config(broker, vhost, (nacking, quick("classic-persistent"))),
                              selection=only_vhost(vhost))
    found = wait_for(lambda: [f for f in findings(exporter) if f["rule"] == "probe-nacked"], timeout=30,
                     what="probe-nacked from the reject-publish target")
    assert (found[0]["object"], found[0]["severity"]) == ("probe reject-publish", "info")
    assert not [f for f in findings(exporter) if f["rule"] in ("probe-down", "probe-message-lost")]


def test_exporter_serves_the_probes_counters_gauges_and_histograms_as_json(broker, vhost, start_exporter):
    from probe_helpers import probe_config, quick
    exporter = start_exporter(broker.management_url, interval=0.5,
                              probes=probe_config(broker, vhost, (quick("quorum", "quorum"),)),
                              selection=only_vhost(vhost))

    def confirmed():
        probes = requests.get(exporter.url + "/api/probes", timeout=5).json()["probes"]
        return probes if probes and probes[0]["counters"].get("confirmed", 0) >= 20 else None

    (quorum,) = wait_for(confirmed, timeout=30, what="20 confirms in /api/probes")
    assert (quorum["target"], quorum["queue_type"], quorum["persistent"], quorum["up"]) == \
        ("quorum", "quorum", True, True)
    latency = quorum["histograms"]["confirm_latency_seconds"]
    assert latency[-1][0] == "+Inf" and latency[-1][1] >= 20
    assert quorum["gauges"]["consumer_prefetch"] == 20


def test_probe_that_cannot_log_in_is_reported_down(broker, vhost, start_exporter):
    from probe_helpers import probe_config, quick
    bad = broker.amqp_url(vhost, password="not-the-password")
    exporter = start_exporter(broker.management_url, interval=0.5,
                              probes=probe_config(broker, vhost, (quick("quorum", "quorum"),), url=bad),
                              selection=only_vhost(vhost))
    found = wait_for(lambda: [f for f in findings(exporter) if f["rule"] == "probe-down"], timeout=20,
                     what="probe-down")
    assert found[0]["object"] == "probe quorum"


def test_scenario_command_lists_runs_for_a_duration_and_refuses_unknown_names(broker, vhost):
    def cli(*args):
        return subprocess.run([sys.executable, "-m", "ackscope", "scenario", *args], capture_output=True,
                              text=True, timeout=60, env=dict(os.environ, ACKSCOPE_AMQP_PASSWORD=ADMIN_PASSWORD))
    listed = cli("--list")
    assert listed.returncode == 0 and [line.split()[0] for line in listed.stdout.splitlines()] == list(BY_NAME)
    url = broker.amqp_url(vhost).replace(f":{ADMIN_PASSWORD}@", "@")
    done = cli("no-consumers-backlog", "--amqp-url", url, "--duration", "2")
    assert done.returncode == 0, done.stderr
    queue = requests.get(f"{broker.management_url}/api/queues/{vhost}/{PREFIX}no-consumers-backlog",
                         auth=("guest", ADMIN_PASSWORD), timeout=5).json()
    assert queue["arguments"]["x-expires"] == 600_000 and queue["durable"] is True
    unknown = cli("no-such-thing", "--amqp-url", url)
    assert unknown.returncode == 2 and "unknown scenario 'no-such-thing'" in unknown.stderr
    assert "Traceback" not in unknown.stderr + done.stderr
