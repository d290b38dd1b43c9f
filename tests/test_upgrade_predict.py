"""The upgrade's predictions as pure functions of a snapshot: each change of the table met by the objects and
clients that show it, only between the broker's release and the target; what was not read named, never taken for
nothing to change; the answers recorded from each release read into the model."""

from __future__ import annotations

import ast
import json
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from snapshot_builders import OVERVIEW, channel, consumer, node, queue, snapshot, stats

from ackscope.diagnosis.release_changes import CHANGES, PHASES, TARGETS
from ackscope.diagnosis.upgrade import DEPRECATED_USED, GLOBAL_PREFETCH, POLICIES, PREDICTIONS, outlooks, predict
from ackscope.exporter.cardinality import Limits
from ackscope.exporter.collectors.upgrades import ITEMS_PER_KIND
from ackscope.exporter.exposition import render
from ackscope.exporter.status import PollStatus
from ackscope.model.events import BROKER_LOG, CONSUMER_TIMEOUT, Breaks, BrokerEvent
from ackscope.model.findings import Diagnosis
from ackscope.model.snapshot import DeprecatedFeature, Overview, Policy
from ackscope.sources.management import normalise

DATA = Path(__file__).parent / "data"
REPO = Path(__file__).parent.parent


def _overview(version: str) -> Overview:
    return replace(OVERVIEW, rabbitmq_version=version)


def _mirroring_policy() -> Policy:
    return Policy("/", "ha-all", "^mirrored\\.", "queues", (("ha-mode", '"all"'), ("ha-sync-mode", '"manual"')))


def _broker_3_10(**kw):
    """A 3.10 broker with one of each object the table names, each consumed by a client of its own."""
    queues = [queue("mirrored.orders"), queue("poison.orders", type="quorum", message_stats=stats(redeliver=400)),
              queue("scratch", durable=False),
              queue("reports", arguments=(("x-consumer-timeout", "3600000"),), consumer_timeout_ms=3_600_000),
              queue("cqv1", arguments=(("x-queue-version", "1"),)),
              queue("located", arguments=(("x-queue-master-locator", '"min-masters"'),))]
    channels = [channel(f"ch {q.name}", connection_name=f"{q.name}-app") for q in queues]
    channels[3] = replace(channels[3], global_prefetch_count=4, consumer_count=2, client="py-amqp 5.3")
    consumers = [consumer(q.name, f"ch {q.name}", connection_name=f"{q.name}-app") for q in queues]
    s = snapshot(overview=_overview("3.10.8"), queues=queues, channels=channels, consumers=consumers,
                 nodes=[node("rabbit@a", node_type="disc")])
    return replace(s, policies=(_mirroring_policy(),), deprecated_used=None, **kw)


def _by_rule(prediction) -> dict[str, list]:
    found: dict[str, list] = {}
    for f in prediction.findings:
        found.setdefault(f.rule, []).append(f)
    return found


def test_from_3_10_to_4_0_only_what_4_0_changes_is_named_each_with_its_client():
    p = predict(_broker_3_10(), TARGETS["4.0"])
    found = _by_rule(p)
    assert set(found) == {"classic-queue-mirroring-removed", "quorum-delivery-limit", "transient-nonexclusive-queue",
                          "management-metrics-collection"}
    (mirroring,) = found["classic-queue-mirroring-removed"]
    assert mirroring.severity == "critical" and mirroring.object == "policy ha-all"
    assert mirroring.evidence["ha_keys"] == ["ha-mode", "ha-sync-mode"] and mirroring.evidence["queues_matched"] == 1
    assert mirroring.connection_name == "mirrored.orders-app" and "an inference" in mirroring.evidence["matched_by"]
    (limit,) = found["quorum-delivery-limit"]
    assert limit.severity == "critical" and "dropped" in limit.explanation and "400 redeliveries" in limit.explanation
    assert limit.evidence["source"].startswith("release notes 4.0.0") and limit.evidence["changes_in"] == "4.0"
    assert [f.severity for f in found["transient-nonexclusive-queue"]] == ["warning"]
    assert not p.not_evaluated


def test_from_3_10_to_4_3_adds_what_4_3_refuses_and_changes():
    found = _by_rule(predict(_broker_3_10(), TARGETS["4.3"]))
    assert {f.object for f in found["consumer-timeout-argument-on-classic-queue"]} == {"queue reports"}
    assert {f.object for f in found["classic-queue-version-1"]} == {"queue cqv1"}
    assert {f.object for f in found["queue-master-locator"]} == {"queue located"}
    assert all(f.severity == "critical" for rule in ("consumer-timeout-argument-on-classic-queue",
                                                     "classic-queue-version-1", "queue-master-locator")
               for f in found[rule])
    (qos,) = found["global-qos-per-consumer"]
    assert qos.evidence["unacked_at_most_today"] == 4 and qos.evidence["unacked_at_most_on_target"] == 8
    assert qos.client == "py-amqp 5.3"
    # The classic queues with a manual-ack consumer lose their consumer timeout: a warning for the one that sets
    # its own, one info item for the rest, with what applies today; the quorum queue keeps it.
    ignored = {f.object: f for f in found["classic-queue-consumer-timeout-ignored"]}
    assert set(ignored) == {"queue reports", "classic queues with manual-ack consumers"}
    assert ignored["queue reports"].severity == "warning"
    assert ignored["queue reports"].evidence["own_timeout_set_by"] == "its x-consumer-timeout argument"
    rest = ignored["classic queues with manual-ack consumers"]
    assert rest.severity == "info" and rest.evidence["classic_queues"] == 4
    assert rest.evidence["queues"] == "cqv1, located, mirrored.orders and 1 more"
    assert rest.evidence["timeout_today"].startswith("1800 s (inferred: RabbitMQ's default")
    assert "nack" in found["quorum-delivery-limit"][0].explanation  # 4.3 counts reject, not nack
    assert "delivery-limit-ignores-nack" not in found  # from 3.x the 4.0 change says it


def test_a_quorum_queue_with_a_dead_letter_exchange_or_its_own_limit_loses_nothing():
    s = _broker_3_10()
    kept = replace(s, queues=(queue("dl", type="quorum", dead_letter_exchange="dlx", message_stats=stats(redeliver=9)),
                              queue("limited", type="quorum", delivery_limit=50)))
    (found,) = _by_rule(predict(kept, TARGETS["4.0"]))["quorum-delivery-limit"]
    assert found.object == "queue dl" and found.severity == "warning" and "dead-lettered to exchange 'dlx'" in found.explanation


def test_from_4_0_to_4_3_names_what_changes_between_them_and_what_4_0_cannot_show():
    base = _broker_3_10()
    s = replace(base, overview=_overview("4.0.5"), policies=(),
                queues=tuple(replace(q, delivery_limit=20) if q.type == "quorum" else q for q in base.queues),
                channels=tuple(replace(c, global_prefetch_count=None) for c in base.channels),
                deprecated_used=(DeprecatedFeature("transient_nonexcl_queues", "permitted_by_default"),
                                 DeprecatedFeature("amqp_address_v1", "permitted_by_default", "https://example")))
    p = predict(s, TARGETS["4.3"])
    found = _by_rule(p)
    assert "classic-queue-mirroring-removed" not in found and "quorum-delivery-limit" not in found
    assert [f.object for f in found["delivery-limit-ignores-nack"]] == ["queue poison.orders"]
    (amqp,) = found["deprecated-feature-in-use"]  # transient queues have a change of their own
    assert amqp.severity == "critical" and amqp.evidence["phase_on_target"] == "denied_by_default"
    assert [(n.rule, n.needs) for n in p.not_evaluated] == [("global-qos-per-consumer", (GLOBAL_PREFETCH,))]


def test_what_was_not_read_is_named_and_a_broker_at_the_target_has_nothing_to_predict():
    p = predict(replace(_broker_3_10(), policies=None), TARGETS["4.0"])
    assert ("classic-queue-mirroring-removed", (POLICIES,)) in [(n.rule, n.needs) for n in p.not_evaluated]
    later = replace(_broker_3_10(), overview=_overview("4.3.6"), deprecated_used=None)
    assert predict(later, TARGETS["4.0"]).changes == () and predict(later, TARGETS["4.3"]).changes == ()
    unknown = predict(replace(_broker_3_10(), overview=_overview(None)), TARGETS["4.0"])
    assert unknown.current is None and "classic-queue-mirroring-removed" in _by_rule(unknown)
    assert ("deprecated-feature-in-use", (DEPRECATED_USED,)) in [(n.rule, n.needs) for n in unknown.not_evaluated]


def test_the_probes_own_queues_are_never_an_upgrade_item():
    s = replace(_broker_3_10(), queues=(queue("ackscope.probe.q", durable=False),), channels=(), consumers=())
    assert "transient-nonexclusive-queue" not in _by_rule(predict(s, TARGETS["4.0"]))


def test_every_change_has_a_prediction_a_source_and_a_proof_that_exists():
    assert {c.id for c in CHANGES} == set(PREDICTIONS)
    for c in CHANGES:
        assert c.source and c.remedy and c.detected
        path, _, name = c.proof.partition("::")
        tree = ast.parse((REPO / path).read_text())
        assert name in {f.name for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)}, c.proof
        if c.feature:  # a deprecated feature's name as each target's broker listed it
            assert any(c.feature in phases for phases in PHASES.values()), c.feature


@pytest.mark.parametrize("version", ["3.10.8", "4.0.5", "4.3.6"])
def test_the_recorded_policies_arguments_and_deprecated_features_are_read_as_the_broker_holds_them(version):
    recorded = json.loads((DATA / f"upgrade-facts-{version}.json").read_text())
    policies = [normalise.policy(p) for p in recorded["policies"]]
    # 4.0 and 4.3 refused the mirroring policy: only the other is there.
    assert [p.name for p in policies] == (["ha-all", "lazy"] if version == "3.10.8" else ["lazy"])
    assert policies[-1].definition == (("queue-mode", '"lazy"'),) and policies[-1].apply_to == "queues"
    arguments = {q["name"]: normalise.queue_arguments(q) for q in recorded["queues"]}
    assert arguments["lazy"] == (("x-queue-mode", '"lazy"'),)  # x-queue-type, which 4.x adds, left out
    used = recorded["deprecated_features_used"]
    if version == "3.10.8":
        assert used["status"] == 404
    else:
        assert [normalise.deprecated_feature(f) for f in used["body"]] == [DeprecatedFeature(
            "transient_nonexcl_queues", "permitted_by_default",
            "https://blog.rabbitmq.com/posts/2021/08/4.0-deprecation-announcements/"
            "#removal-of-transient-non-exclusive-queues")]
    # What the table says the release refuses, it refused when recorded.
    refused = {key for key, said in recorded["declares"].items() if said != "ok"}
    assert refused == ({"cto_classic", "qv1", "master_locator"} if version == "4.3.6" else set())
    assert (recorded["policy_ha"][0] == 400) == (version != "3.10.8")


def test_docs_upgrade_holds_the_table_as_generated():
    from ackscope.apps.reference import upgrade_markdown
    doc = (REPO / "docs" / "upgrade.md").read_text()
    assert upgrade_markdown() in doc, "docs/upgrade.md is stale: paste python -m ackscope.apps.reference upgrade"


@pytest.mark.parametrize("channels_listed", [False, True])
def test_a_one_shot_report_names_every_source_a_read_can_come_from(channels_listed):
    # A large broker's auto choice reads through the plugin with the management API's channels: the report's first
    # line named only two kinds, and upgrade-check on 5,000 queues ended in a KeyError (bench/upgrade_check.py).
    from ackscope.apps.diagnose import SOURCES
    from ackscope.core.secret import Secret
    from ackscope.sources import ManagementSource, PrometheusPluginSource
    plugin = PrometheusPluginSource("http://127.0.0.1:1", None, "u", Secret("p"), channels_listed=channels_listed)
    try:
        assert plugin.name in SOURCES and ManagementSource.name in SOURCES
    finally:
        plugin.close()


def test_the_exporter_predicts_for_each_release_later_than_the_broker_s_and_none_at_the_newest():
    assert [o.to for o in outlooks(_broker_3_10())] == ["4.0", "4.3"]
    assert [o.to for o in outlooks(replace(_broker_3_10(), overview=_overview("4.0.5")))] == ["4.3"]
    assert outlooks(replace(_broker_3_10(), overview=_overview("4.3.6"))) == ()
    unknown = replace(_broker_3_10(), overview=_overview(None))
    assert [o.to for o in outlooks(unknown)] == ["4.0", "4.3"]
    (to_4_0, to_4_3) = outlooks(_broker_3_10())
    assert to_4_0.findings == predict(_broker_3_10(), TARGETS["4.0"]).findings


def test_each_prediction_is_an_upgrade_blocker_series_so_a_fleet_can_be_counted():
    s = replace(_broker_3_10(), policies=None)  # the policies unread: mirroring not judged, and said
    text = render(s, PollStatus(up=True, last_success_at=1.0, last_attempt_at=1.0), Limits(),
                  Diagnosis(upgrades=outlooks(s))).metrics_body(False).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    blockers = {(x.labels["to"], x.labels["kind"], x.labels["object"]): x for x in
                families["ackscope_upgrade_blocker"].samples}
    refused = blockers[("4.3", "consumer-timeout-argument-on-classic-queue", "queue reports")]
    assert refused.value == 1 and refused.labels["severity"] == "critical" and refused.labels["vhost"] == "/"
    assert ("4.0", "consumer-timeout-argument-on-classic-queue", "queue reports") not in blockers
    assert blockers[("4.3", "global-qos-per-consumer", "channel ch reports")].labels["client"] == "py-amqp 5.3"
    unjudged = {(x.labels["to"], x.labels["kind"]): x.labels["needs"]
                for x in families["ackscope_upgrade_not_evaluated"].samples}
    assert unjudged == {("4.0", "classic-queue-mirroring-removed"): POLICIES,
                        ("4.3", "classic-queue-mirroring-removed"): POLICIES}
    counted = {(x.labels["to"], x.labels["kind"], x.labels["severity"]): x.value
               for x in families["ackscope_upgrade_blockers"].samples}
    assert counted[("4.3", "queue-master-locator", "critical")] == 1
    assert sum(counted.values()) == len(blockers)


def test_a_change_that_meets_every_queue_of_a_large_broker_names_its_worst_and_counts_them_all():
    queues = [queue(f"q{i:05d}", arguments=(("x-queue-version", "1"),)) for i in range(ITEMS_PER_KIND + 50)]
    consumers = [consumer(q.name, f"ch {q.name}") for q in queues]
    s = snapshot(overview=_overview("4.0.5"), queues=queues, channels=[channel(f"ch {q.name}") for q in queues],
                 consumers=consumers)
    s = replace(s, policies=(), deprecated_used=())
    outlook = outlooks(s)
    text = render(s, PollStatus(up=True, last_success_at=1.0, last_attempt_at=1.0), Limits(),
                  Diagnosis(upgrades=outlook)).metrics_body(False).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    named = [x for x in families["ackscope_upgrade_blocker"].samples if x.labels["kind"] == "classic-queue-version-1"]
    assert len(named) == ITEMS_PER_KIND and named[0].labels["object"] == "queue q00000"
    (counted,) = [x.value for x in families["ackscope_upgrade_blockers"].samples
                  if x.labels["kind"] == "classic-queue-version-1"]
    assert counted == len(queues)
    # Their consumers' lost timeout is one info item, said on the dashboard, and no blocker: neither named nor counted.
    (safety_net,) = [f for f in outlook[0].findings if f.rule == "classic-queue-consumer-timeout-ignored"]
    assert safety_net.severity == "info" and safety_net.evidence["classic_queues"] == len(queues)
    assert not [x for name in ("ackscope_upgrade_blocker", "ackscope_upgrade_blockers")
                for x in families[name].samples if x.labels["kind"] == "classic-queue-consumer-timeout-ignored"]


def _timed_out(queue_name: str | None, vhost: str = "/") -> BrokerEvent:
    """A consumer timeout as the broker's log tells it (4.x names the queue; 3.x does not: None)."""
    return BrokerEvent(1000.0, CONSUMER_TIMEOUT, BROKER_LOG, connection="127.0.0.1:5000 -> 127.0.0.1:5672",
                       vhost=vhost, channel=1, reason="precondition_failed", queue=queue_name, consumer_tag="ctag",
                       timeout_ms=900_000)


def test_on_4_3_healthy_classic_queues_lose_a_safety_net_one_info_item_and_those_relying_on_it_a_warning_each():
    healthy = [queue(f"jobs.{i:04d}") for i in range(2000)]
    own = queue("reports", arguments=(("x-consumer-timeout", "3600000"),), consumer_timeout_ms=3_600_000)
    by_policy = queue("exports", consumer_timeout_ms=600_000)  # a consumer-timeout policy: no argument
    timed_out = queue("resize")
    quorum = queue("payments", type="quorum")
    queues = [*healthy, own, by_policy, timed_out, quorum]
    s = replace(snapshot(overview=_overview("4.0.5"), queues=queues,
                         consumers=[consumer(q.name, f"ch {q.name}", connection_name=f"{q.name}-app")
                                    for q in queues]),
                policies=(), deprecated_used=())
    log = Breaks(at=1000.0, sources=(BROKER_LOG,), events=(_timed_out("resize"), _timed_out("payments")))
    found = {f.object: f for f in _by_rule(predict(s, TARGETS["4.3"], log))["classic-queue-consumer-timeout-ignored"]}
    assert set(found) == {"classic queues with manual-ack consumers", "queue reports", "queue exports",
                          "queue resize"}  # the quorum queue keeps its timeout, whoever timed out on it
    rest = found["classic queues with manual-ack consumers"]
    assert (rest.severity, rest.vhost) == ("info", "/")
    assert rest.evidence["classic_queues"] == 2000 and rest.evidence["manual_ack_consumers"] == 2000
    assert rest.evidence["queues"] == "jobs.0000, jobs.0001, jobs.0002 and 1997 more"
    assert rest.connection_name == "jobs.0000-app, jobs.0001-app, jobs.0002-app and 1997 more"
    assert "no consumer timed out on them" in rest.evidence["timed_out_lately"]
    assert "safety net" in rest.explanation and "RabbitMQ's main branch" in rest.evidence["source"]
    # Those relying on it, each a warning naming its queue, its client and why.
    assert {found[o].severity for o in ("queue reports", "queue exports", "queue resize")} == {"warning"}
    assert found["queue reports"].evidence["own_timeout_set_by"] == "its x-consumer-timeout argument"
    assert found["queue exports"].evidence["own_timeout_set_by"] == "a consumer-timeout policy"
    assert "sets its own consumer timeout (600 s" in found["queue exports"].explanation
    resize = found["queue resize"]
    assert resize.connection_name == "resize-app" and resize.evidence["timeouts_in_window"] == 1
    assert "told of 1 consumer timeout(s) on it" in resize.explanation and "own_timeout_ms" not in resize.evidence
    # Without the broker's log, who timed out is said not known, never taken for nobody; a 3.x log names no queue.
    unread = _by_rule(predict(s, TARGETS["4.3"]))["classic-queue-consumer-timeout-ignored"]
    assert [f.object for f in unread if f.severity == "warning"] == ["queue exports", "queue reports"]
    (rest,) = [f for f in unread if f.severity == "info"]
    assert rest.evidence["classic_queues"] == 2001 and "not known" in rest.evidence["timed_out_lately"]
    unnamed = replace(log, events=(_timed_out(None),))
    (rest,) = [f for f in _by_rule(predict(s, TARGETS["4.3"], unnamed))["classic-queue-consumer-timeout-ignored"]
               if f.severity == "info"]
    assert "1 consumer timeout(s) in the recent window on queues it does not name" in rest.evidence["timed_out_lately"]
    # upgrade-check's exit code: an info item alone is nothing to fix.
    from ackscope.apps.upgrade_check import _exit
    alone = replace(s, queues=tuple(healthy), consumers=tuple(c for c in s.consumers if c.queue.startswith("jobs")))
    assert [f.severity for f in predict(alone, TARGETS["4.3"]).findings] == ["info"]
    assert _exit(predict(alone, TARGETS["4.3"])) == 0


def test_a_ram_node_is_deprecated_on_4_0_and_cannot_run_on_4_3_as_the_broker_lists_its_type():
    nodes = (node("rabbit@a", node_type="disc"), node("rabbit@b", node_type="ram"))
    s = replace(_broker_3_10(), nodes=nodes)
    (on_4_0,) = _by_rule(predict(s, TARGETS["4.0"]))["ram-node-type"]
    (on_4_3,) = _by_rule(predict(s, TARGETS["4.3"]))["ram-node-type"]
    assert (on_4_0.object, on_4_0.severity, on_4_0.evidence["phase_on_target"]) == (
        "node rabbit@b", "warning", "permitted_by_default")
    assert (on_4_3.severity, on_4_3.evidence["phase_on_target"]) == ("critical", "removed")
    # On 3.13 the broker's own list names ram_node_type too: one item, from the nodes, not two.
    listed = replace(s, overview=_overview("3.13.7"), deprecated_used=(DeprecatedFeature(
        "ram_node_type", "permitted_by_default", ""),))
    p = predict(listed, TARGETS["4.3"])
    assert [f.object for f in p.findings if "ram" in f.explanation] == ["node rabbit@b"]
    unread = replace(s, nodes=(node("rabbit@a"),))  # a source that does not say the type
    assert "ram-node-type" in {n.rule for n in predict(unread, TARGETS["4.3"]).not_evaluated}


def test_statistics_collected_today_are_deprecated_on_4_0_and_none_are_once_turned_off():
    (on_4_0,) = _by_rule(predict(_broker_3_10(), TARGETS["4.0"]))["management-metrics-collection"]
    assert on_4_0.severity == "warning" and on_4_0.evidence["phase_on_target"] == "permitted_by_default"
    off = replace(_broker_3_10(), overview=replace(_overview("3.10.8"), statistics_disabled=True))
    assert "management-metrics-collection" not in _by_rule(predict(off, TARGETS["4.3"]))
    on_4_0_broker = replace(_broker_3_10(), overview=_overview("4.0.5"))
    assert "management-metrics-collection" not in _by_rule(predict(on_4_0_broker, TARGETS["4.3"]))


def test_changes_it_could_not_judge_with_nothing_found_exit_unknown_never_ok():
    from ackscope.apps.upgrade_check import UNKNOWN, _exit
    unjudged = replace(_broker_3_10(), policies=None, overview=replace(_overview("3.10.8"), statistics_disabled=True),
                       queues=(), channels=(), consumers=())
    p = predict(unjudged, TARGETS["4.0"])
    assert not p.findings and [n.rule for n in p.not_evaluated] == ["classic-queue-mirroring-removed"]
    assert _exit(p) == UNKNOWN
    assert _exit(predict(replace(unjudged, policies=()), TARGETS["4.0"])) == 0
    assert _exit(predict(_broker_3_10(), TARGETS["4.0"])) == 2
