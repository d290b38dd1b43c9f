"""The dashboard's tables from small exporter documents (pure functions, no server)."""

from __future__ import annotations

import math

import pytest

from ackscope.core.quantile import histogram_quantile
from ackscope.dashboard import views
from ackscope.dashboard.reports import percentiles_over_time


def _channel(name, client, unacked, limit, **kw):
    return {"name": name, "connection_name": client, "vhost": "/", "user": "app", "messages_unacked": unacked,
            "prefetch_limit": limit, **kw}


def _consumer(channel, queue, ack_required=True):
    return {"channel": channel, "queue": queue, "ack_required": ack_required}


SNAPSHOT = {
    "taken_at": 1000.0,
    "channels": [_channel("c1", "billing", 10, 10), _channel("c2", "hoarder", 500, None),
                 _channel("c3", "firehose", 0, None), _channel("c4", "calm", 2, 50),
                 _channel("c5", "publisher", 0, None)],
    "consumers": [_consumer("c1", "invoices"), _consumer("c2", "orders"), _consumer("c3", "events", False),
                  _consumer("c4", "emails")],
    "queues": [{"vhost": "/", "name": "orders", "type": "classic", "consumers": 1,
                "message_stats": {"redeliver": 90, "deliver_get": 100}},
               {"vhost": "/", "name": "emails", "type": "quorum", "consumers": 1,
                "message_stats": {"redeliver": 5, "deliver_get": 1000}},
               {"vhost": "/", "name": "quiet", "type": "classic", "consumers": 0, "message_stats": {}}],
    "nodes": [{"name": "rabbit@a", "running": True, "mem_used": 2**30, "mem_limit": 2**31, "mem_alarm": True,
               "disk_free": 2**32, "disk_free_limit": 2**20, "disk_free_alarm": False}],
    "connections": [{"name": "x", "connection_name": "billing", "vhost": "/", "user": "app", "state": "blocked",
                     "blocked": True},
                    {"name": "y", "connection_name": "calm", "vhost": "/", "user": "app", "state": "running",
                     "blocked": False}],
}


def test_findings_come_worst_first_with_the_client_named_in_the_culprit():
    items = [{"rule": "prefetch-one", "severity": "info", "vhost": "/", "object": "channel c4", "connection_name": "",
              "client": "amqplib 0.10.9",
              "identity": "amqplib 0.10.9 from 10.0.3.7:51234 as app", "evidence": {}, "remedy": "raise it"},
             {"rule": "probe-message-lost", "severity": "critical", "vhost": "/", "object": "probe quorum",
              "connection_name": "", "evidence": {"lost": 3}, "remedy": "check the disk", "since": 1_795_000_000},
             {"rule": "prefetch-unlimited", "severity": "warning", "vhost": "/", "object": "channel c2",
              "connection_name": "hoarder", "evidence": {"unacked": 500, "share": 0.123456, "window_seconds": 94.99,
                                                          "queues": ["orders", "invoices"], "confirm": None},
              "remedy": "set qos"}]
    df = views.findings(items, now=1_795_000_000 + 7_500)
    assert list(df["rule"]) == ["probe-message-lost", "prefetch-unlimited", "prefetch-one"]
    assert (df.loc[0, "since"], df.loc[0, "for"]) == ("2026-11-18 11:06:40 UTC", "2 h 5 min")
    assert df.loc[1, "since"] is None
    assert df.loc[1, "culprit"] == "hoarder · channel c2"
    assert df.loc[2, "culprit"] == "amqplib 0.10.9 from 10.0.3.7:51234 as app · channel c4"  # an unnamed client
    # The evidence in words with units, on one line in the table (core/evidence.py).
    assert df.loc[1, "evidence"] == "unacked: 500 · share: 12.3% · window: 95 s · queues: orders, invoices"
    assert list(views.findings(items, "warning")["severity"]) == ["critical", "warning"]


def test_finding_cards_are_the_worst_with_their_evidence_as_rows_of_label_and_value():
    items = [{"rule": "prefetch-one", "severity": "info", "vhost": "/", "object": "channel c4",
              "connection_name": "calm", "evidence": {"prefetch": 1}},
             {"rule": "publisher-without-confirms", "severity": "warning", "vhost": "/", "object": "channel <0.859.0>",
              "connection_name": "", "identity": "ackscope-scenario prefetch-saturated", "remedy": "confirm",
              "evidence": {"confirm": False, "publish_rate": 10.53, "window_seconds": 94.99,
                           "routing": "counted by the broker per channel and queue (inferred: the Prometheus "
                                      "plugin's channel <0.859.0>)",
                           "at_stake": [{"queue": "orders", "durable": True, "persistent": "5 of the 5 messages it "
                                                                                          "holds"}]}},
             {"rule": "probe-message-lost", "severity": "critical", "vhost": "/", "object": "probe quorum",
              "connection_name": "", "evidence": {"lost": 3}, "remedy": "check the disk"}]
    cards = views.cards(items, "warning", top=5, now=0)
    assert [c["rule"] for c in cards] == ["probe-message-lost", "publisher-without-confirms"]
    assert cards[1]["culprit"] == "ackscope-scenario prefetch-saturated · channel <0.859.0>"
    assert cards[1]["evidence"] == [
        ("confirm", "no"), ("publish rate", "10.5 a second"), ("window", "95 s"),
        ("routing", "counted by the broker per channel and queue"),
        ("inferred", "the Prometheus plugin's channel <0.859.0>"),
        ("at stake", "orders — durable, persistent: 5 of the 5 messages it holds")]
    assert views.cards(items, "info", top=1, now=0)[0]["rule"] == "probe-message-lost"


def test_upgrade_items_show_their_evidence_in_words():
    items = [{"rule": "consumer-timeout-argument-on-classic-queue", "severity": "critical", "vhost": "/",
              "object": "queue reports", "connection_name": "",
              "evidence": {"queue": "reports", "consumers": 1, "value": "3600000", "timeout_today_ms": 3_600_000}}]
    assert views.upgrade(items).loc[0, "evidence"] == ("queue: reports · consumers: 1 · value: 3600000 · "
                                                       "timeout today: 3,600 s (1 h 0 min)")


def test_prefetch_view_puts_unlimited_and_full_channels_first_and_marks_auto_ack_and_prefetch_zero():
    df, total = views.prefetch(SNAPSHOT)
    assert total == 4  # the publisher's channel neither consumes nor holds anything
    assert list(df["client"]) == ["hoarder", "billing", "calm", "firehose"]
    marks = dict(zip(df["client"], df["mark"]))
    assert marks == {"hoarder": "prefetch 0", "billing": "", "calm": "", "firehose": "auto-ack"}
    assert math.isinf(df.loc[0, "fill"]) and df.loc[1, "fill"] == 1.0


def test_prefetch_view_searches_and_shows_only_the_top_rows():
    df, total = views.prefetch(SNAPSHOT, search="INVOICES")
    assert (list(df["client"]), total) == (["billing"], 1)
    df, total = views.prefetch(SNAPSHOT, top=2)
    assert len(df) == 2 and total == 4


def test_prefetch_rows_as_text_show_how_full_each_prefetch_is_as_a_bar():
    rows = views.prefetch_rows(views.prefetch(SNAPSHOT)[0])
    by_client = {r["client"]: r for r in rows.to_dict("records")}
    assert by_client["hoarder"]["fill"] == "█" * 10 + " no limit" and by_client["hoarder"]["prefetch limit"] == "-"
    assert by_client["billing"]["fill"] == "█" * 10 + " 100%" and by_client["billing"]["unacked"] == "10"
    assert by_client["calm"]["fill"] == "░" * 10 + " 4%"  # 2 of 50: under half a block
    assert by_client["firehose"]["mark"] == "auto-ack"


def test_redeliveries_rank_queues_by_share_and_rate_from_the_previous_snapshot():
    previous = {"taken_at": 990.0, "queues": [{"vhost": "/", "name": "orders", "message_stats": {"redeliver": 40}}]}
    df, total = views.redeliveries(SNAPSHOT, previous)
    assert total == 2 and list(df["queue"]) == ["orders", "emails"]
    assert df.loc[0, "share"] == 0.9 and df.loc[0, "redelivered (per s)"] == 5.0
    assert df.loc[1, "redelivered (per s)"] is None or math.isnan(df.loc[1, "redelivered (per s)"])


@pytest.mark.parametrize("q, expected", [(0.5, 0.0075), (0.9, 0.02125), (1.0, 0.025)])
def test_quantile_interpolates_within_the_bucket_like_histogram_quantile(q, expected):
    buckets = [[0.005, 40], [0.01, 60], [0.025, 100], ["+Inf", 100]]
    assert histogram_quantile(buckets, q) == pytest.approx(expected)
    assert histogram_quantile([[0.005, 0], ["+Inf", 0]], 0.5) is None


def _probe(target, counters, latency, batches=()):
    return {"target": target, "queue_type": "classic", "persistent": True, "up": True, "counters": counters,
            "histograms": {"confirm_latency_seconds": latency, "confirm_batch_size": list(batches)}}


def test_probe_tables_give_percentiles_batch_frames_and_the_audit():
    probes = [_probe("classic-persistent", {"published": 10, "confirmed": 9, "lost": 1},
                     [[0.005, 50], [0.01, 100], ["+Inf", 100]], [[1, 30], [2, 35], [5, 45], ["+Inf", 45]])]
    latency = views.probe_latency(probes)
    assert list(latency.columns) == ["target", "queue type", "persistent", "count", "p50 (ms)", "p90 (ms)",
                                     "p99 (ms)"]  # headed in words, with their unit
    assert latency.loc[0, "p50 (ms)"] == pytest.approx(5.0) and latency.loc[0, "count"] == 100
    assert latency.loc[0, "p90 (ms)"] == 9.0  # 0.009 s: in ms to one decimal
    frames = views.batch_sizes(probes)
    # Each bucket named by the sizes it holds; none past the largest used (over 5 is empty).
    assert list(zip(frames["batch size"], frames["frames"])) == [("1", 30), ("2", 5), ("3-5", 10)]
    audit = views.probe_audit(probes)
    assert (audit.loc[0, "published"], audit.loc[0, "lost"], audit.loc[0, "nacked"]) == (10, 1, 0)


def test_percentiles_over_time_come_from_bucket_increments_between_samples():
    first = [_probe("q", {}, [[0.005, 100], [0.05, 100], ["+Inf", 100]])]
    second = [_probe("q", {}, [[0.005, 100], [0.05, 200], ["+Inf", 200]])]  # the new 100 were all slow
    df = percentiles_over_time([(1.0, first), (2.0, second)])
    assert len(df) == 1 and df.loc[0, "p50_ms"] == pytest.approx(27.5)


def test_broker_views_show_alarms_and_blocked_connections():
    nodes = views.nodes(SNAPSHOT)
    assert nodes.loc[0, "alarms"] == "memory" and nodes.loc[0, "memory limit (MiB)"] == 2048.0
    assert list(views.blocked_connections(SNAPSHOT)["client"]) == ["billing"]


def _receiver(name: str, unsettled: int, credit: int, **more) -> dict:
    return {"role": "receiver", "name": name, "identity": f"app {name}", "vhost": "/", "queue": name,
            "connection": "peer -> host", "session": 0, "session_unsettled": unsettled, "session_receivers": 1,
            "credit": credit, "settled": False, **more}


def test_receivers_view_puts_the_most_unsettled_first_and_marks_what_credit_does_not_bound():
    snapshot = {"links": [_receiver("bounded", 5, 10), _receiver("unbounded", 300, 10),
                          _receiver("at-most-once", 0, 10, settled=True),
                          _receiver("shared", 40, 10, session_receivers=2),
                          {"role": "sender", "name": "publisher", "credit": 170}]}
    df, total = views.receivers(snapshot)
    assert total == 4 and list(df["link"]) == ["unbounded", "shared", "bounded", "at-most-once"]
    marks = dict(zip(df["link"], df["mark"]))
    assert marks["unbounded"] == "credit bounds nothing" and marks["bounded"] == ""
    assert marks["at-most-once"].startswith("pre-settled")
    assert "its session's 2 receivers together" in marks["shared"]
    assert views.receivers(snapshot, search="unbounded")[1] == 1


def test_breaks_come_newest_first_named_by_their_client_and_drawn_per_client():
    from ackscope.dashboard import charts
    document = {"sources": ["broker log"], "events": [
        {"at": 1000.0, "kind": "channel_error", "cause": "unknown_delivery_tag", "connection_name": "billing",
         "connection": "10.0.0.7:5000 -> 10.0.0.1:5672", "vhost": "/", "channel": 2,
         "text": "unknown delivery tag 1"},
        {"at": 1010.0, "kind": "connection_opened", "cause": "unknown", "connection_name": None, "client": None,
         "connection": "10.0.0.8:6000 -> 10.0.0.1:5672", "vhost": "/"},
        {"at": 1020.0, "kind": "consumer_timeout", "cause": "precondition_failed", "connection_name": None,
         "client": "py-amqp 5.4.2", "connection": "10.0.0.9:7000 -> 10.0.0.1:5672", "vhost": "/", "channel": 1,
         "queue": "celery", "text": "delivery acknowledgement on channel 1 timed out"}]}
    df = views.breaks(document)
    assert list(df["client"]) == ["py-amqp 5.4.2 from 10.0.0.9:7000", "10.0.0.8:6000", "billing"]
    assert list(df["kind"]) == ["consumer timeout", "connection opened", "channel error"]
    assert list(views.breaks(document, "celery")["queue"]) == ["celery"]
    assert views.breaks({}).empty and list(views.breaks({}).columns) == views.BREAK_COLUMNS
    assert len(charts.breaks_timeline(df).data) == 3


def test_an_upgrade_s_items_are_worst_first_each_with_its_client_what_happens_and_what_to_do():
    items = [{"rule": "global-qos-per-consumer", "severity": "warning", "vhost": "/", "object": "channel c1",
              "connection_name": "celery", "identity": "", "explanation": "applied per consumer",
              "remedy": "basic.qos per consumer", "evidence": {"global_prefetch_count": 4}},
             {"rule": "consumer-timeout-argument-on-classic-queue", "severity": "critical", "vhost": "/",
              "object": "queue reports", "connection_name": "", "identity": "", "explanation": "refused",
              "remedy": "a quorum queue", "evidence": {}}]
    df = views.upgrade(items)
    assert list(df["change"]) == ["consumer-timeout-argument-on-classic-queue", "global-qos-per-consumer"]
    assert list(df["culprit"]) == ["queue reports", "celery · channel c1"]
    assert df.iloc[1]["what happens"] == "applied per consumer" and df.iloc[1]["evidence"] == "global prefetch count: 4"
    assert views.upgrade([]).empty


def test_shovels_and_federation_links_are_listed_stopped_first_with_the_brokers_words():
    snapshot = {"shovels": [
        {"name": "to-archive", "type": "dynamic", "vhost": "/", "state": "running", "ack_mode": "no-ack",
         "source_queue": "orders", "source_uri": "amqp://", "destination_queue": "archive",
         "destination_uri": "amqp://app@archive.example:5672/%2F", "node": "rabbit@a"},
        {"name": "to-nowhere", "type": "dynamic", "vhost": "/", "state": "terminated", "ack_mode": "on-confirm",
         "source_queue": "stuck", "source_uri": "amqp://", "destination_queue": "dst",
         "destination_uri": "amqp://app@no-such-host.invalid:5672", "reason": '"failed to connect to destination"'}],
        "federation_links": [{"vhost": "/", "upstream": "nowhere", "type": "exchange", "local": "events",
                              "upstream_name": "events", "status": "error", "uri": "amqp://no-such-host.invalid",
                              "error": "unknown_host"}]}
    df = views.shovels(snapshot)
    assert list(df["name"]) == ["to-nowhere", "nowhere", "to-archive"]
    assert df.iloc[0]["why"] == '"failed to connect to destination"' and df.iloc[1]["why"] == "unknown_host"
    assert df.iloc[2]["ack mode"] == "no-ack" and df.iloc[2]["to"] == "archive at amqp://app@archive.example:5672/%2F"
    assert views.shovels({}).empty


def test_several_brokers_come_worst_first_an_unreadable_one_after_a_critical_and_before_a_warning():
    from ackscope.dashboard.source import Live

    def finding(severity: str, rule: str) -> dict:
        return {"rule": rule, "severity": severity, "vhost": "/", "object": f"queue {rule}", "evidence": {}}
    fetched = [("dev", Live(findings=[finding("info", "prefetch-one")], fetched_at=1.0)),
               ("staging", Live(findings=[finding("warning", "prefetch-unlimited")], fetched_at=1.0)),
               ("prod-us", Live(error="the exporter at http://us:9577 cannot be reached")),  # never read
               ("prod-eu", Live(findings=[finding("warning", "auto-ack-consumer"),
                                          finding("critical", "probe-message-lost")], fetched_at=1.0)),
               ("prod-ap", Live(findings=[finding("critical", "node-down")], fetched_at=1.0,
                                exporter_error="login refused"))]  # its broker stopped answering: last findings
    table, found = views.brokers(fetched)
    assert list(table["broker"]) == ["prod-eu", "prod-ap", "prod-us", "staging", "dev"]  # the known criticals first
    assert list(table["state"]) == ["critical", "unreadable", "unreadable", "warning", "ok"]
    assert table.iloc[0]["worst"] == "probe-message-lost: queue probe-message-lost"
    assert table.iloc[2]["problem"] == "the exporter at http://us:9577 cannot be reached"
    assert list(found["broker"]) == ["prod-eu", "prod-ap", "prod-eu", "staging"]  # warning and above, worst first
    assert list(found["severity"]) == ["critical", "critical", "warning", "warning"]


def test_exporters_are_named_by_the_user_or_by_their_host_and_port():
    from ackscope.dashboard.settings import Exporter, listed, named
    assert named("prod-eu=https://eu.example:9577") == Exporter("prod-eu", "https://eu.example:9577")
    assert named("http://10.0.0.7:9577") == Exporter("10.0.0.7:9577", "http://10.0.0.7:9577")
    assert listed("# name url\nprod-eu https://eu:9577\n\nstaging http://st:9577  # the other\n") == (
        Exporter("prod-eu", "https://eu:9577"), Exporter("staging", "http://st:9577"))
