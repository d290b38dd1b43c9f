"""A finding's evidence as a person reads it (core/evidence.py), on the shapes the rules build: units from the
key's name, rounding, lists a line each, inferences on a line of their own, no repr."""

from __future__ import annotations

import pytest

from ackscope.core.evidence import duration, number, rate, rows, size, text

# publisher-without-confirms as the Prometheus plugin alone lets it be judged (the issue's card, 57).
UNCONFIRMED = {"published": 1000, "confirm": False, "publish_rate": 10.53, "window_seconds": 94.99,
               "stakes": "its messages go into durable queue ackscope.scenario.prefetch-saturated, which keeps them "
                         "across a restart",
               "published_in_window": 1000,
               "routing": "counted by the broker per channel and queue (inferred: the Prometheus plugin's channel "
                          "<0.859.0>, the only one of the vhost publishing)",
               "at_stake": [{"queue": "ackscope.scenario.prefetch-saturated", "durable": True,
                             "persistent": "907 of the 907 messages it holds"},
                            {"queue": "audit", "durable": True, "persistent": "not reported by the source"}]}


def test_the_issues_card_reads_as_words_with_units_and_no_repr():
    got = rows(UNCONFIRMED)
    assert got == [
        ("published", "1,000"),
        ("confirm", "no"),
        ("publish rate", "10.5 a second"),
        ("window", "95 s"),
        ("stakes", UNCONFIRMED["stakes"]),
        ("published in window", "1,000"),
        ("routing", "counted by the broker per channel and queue"),
        ("inferred", "the Prometheus plugin's channel <0.859.0>, the only one of the vhost publishing"),
        ("at stake", "ackscope.scenario.prefetch-saturated — durable, persistent: 907 of the 907 messages it holds"),
        ("", "audit — durable, persistent: not reported by the source"),
    ]
    shown = text(UNCONFIRMED)
    assert not any(c in shown for c in "{}[]") and "': " not in shown and "_" not in shown


@pytest.mark.parametrize("evidence, expected", [
    ({"window_seconds": 94.99}, [("window", "95 s")]),
    ({"timeout_ms": 30000}, [("timeout", "30 s")]),
    ({"timeout_today_ms": 1_800_000}, [("timeout today", "1,800 s (30 min)")]),
    ({"own_timeout_ms": 3_600_000}, [("own timeout", "3,600 s (1 h 0 min)")]),
    ({"probe_confirm_p50_seconds": 0.00175}, [("probe confirm p50", "1.8 ms")]),  # at most one decimal in ms
    ({"confirm_p99_seconds_above": 30.0}, [("confirm p99 above", "30 s")]),
    ({"held_for_at_least_seconds": 30}, [("held for at least", "30 s")]),
    ({"timeout_in_at_most_seconds": 1739}, [("timeout in at most", "1,739 s (28 min)")]),
    ({"last_poll_seconds_ago": 10.0}, [("last poll", "10 s ago")]),
    ({"oldest_message_age_s": 600.0}, [("oldest message age", "600 s (10 min)")]),
    ({"seconds": 57.5}, [("over", "57.5 s")]),  # connection-churn's span of the log's events
    ({"heartbeat_seconds": 0}, [("heartbeat", "0 s")]),
    ({"redeliver_rate": 0.583, "deliver_rate": 0.6}, [("redeliver rate", "0.583 a second"),
                                                      ("deliver rate", "0.6 a second")]),
    ({"rate": 0.003}, [("rate", "0.18 a minute")]),  # below 0.1 a second, a minute reads better
    ({"get_empty": 6000, "get_empty_rate": 600.0}, [("get-empty", "6,000"), ("get-empty rate", "600 a second")]),
    ({"one_at_a_time_ceiling": 571.429}, [("one at a time ceiling", "571 a second")]),
    ({"per_minute": 15.789}, [("rate", "15.8 a minute")]),
    ({"waiting_share": 0.88, "share": 0.875}, [("waiting share", "88%"), ("share", "87.5%")]),
    ({"mem_used": 100, "disk_free": 1_000_000_000}, [("memory used", "100 B"), ("disk free", "954 MiB")]),
    ({"unconfirmed_mean": 0.875, "unacked": 48210}, [("unconfirmed mean", "0.875"), ("unacked", "48,210")]),
    ({"durable": True, "auto_delete": False}, [("durable", "yes"), ("auto-delete", "no")]),
    ({"queue_type": None, "queue": "work"}, [("queue", "work")]),  # None: the rule had nothing to say
    ({"exchanges": ["", "orders.x"], "value": ""}, [("exchanges", "the default exchange, orders.x"),
                                                    ("value", "(empty)")]),
    ({"deleted_in_window": [], "rabbitmq": "4.3.6"}, [("deleted in window", "none"), ("RabbitMQ", "4.3.6")]),
])
def test_a_value_gets_the_unit_its_key_names_rounded_to_what_matters(evidence, expected):
    assert rows(evidence) == expected


def test_short_lists_and_mappings_read_on_one_line_long_ones_a_line_each():
    assert rows({"missing": ["rabbit@b", "rabbit@c"], "leaders": {"rabbit@a": 8, "rabbit@b": 1}}) == [
        ("missing", "rabbit@b, rabbit@c"), ("leaders", "rabbit@a: 8, rabbit@b: 1")]
    could = ["queue a (/): 4 left it without acks", "queue b (/): 4 left it without acks"]
    assert rows({"could_have": could}) == [("could have", could[0]), ("", could[1])]


def test_an_inference_that_ends_a_value_is_a_line_of_its_own_labelled_so():
    nested = ("1800 s (inferred: RabbitMQ's default of 30 minutes; this broker does not say which applies "
              "(rabbitmq.conf consumer_timeout: give --cli to read it))")
    assert rows({"timeout_today": nested}) == [
        ("timeout today", "1800 s"),
        ("inferred", "RabbitMQ's default of 30 minutes; this broker does not say which applies (rabbitmq.conf "
                     "consumer_timeout: give --cli to read it)")]
    assert rows({"matched_by": "its pattern (an inference: the broker's own match is not reported)"}) == [
        ("matched by", "its pattern"), ("inferred", "the broker's own match is not reported")]
    # A value that is itself an inference says so where it starts; one labelled "(inferred)" without a reason,
    # or an inference in the middle, stays as the rule wrote it.
    for said in ("inferred: the queues neither durable nor exclusive", "khepri (inferred from the release)",
                 "up to 2: what its consumers took between the polls is not counted (inferred)",
                 "2 (inferred: the same library) and more"):
        assert rows({"x": said}) == [("x", said)]


def test_numbers_durations_rates_and_sizes_round_to_what_matters():
    assert [number(v) for v in (3, 12500, 0.0, 0.875, 15.789, 94.99, 571.429, 1000.0, 0.000123)] == [
        "3", "12,500", "0", "0.875", "15.8", "95", "571", "1,000", "0.000123"]
    assert [duration(s) for s in (0, 0.0448624, 0.5, 1.5, 59.99, 119, 7500)] == [
        "0 s", "44.9 ms", "500 ms", "1.5 s", "60 s", "119 s", "7,500 s (2 h 5 min)"]
    assert [rate(r) for r in (0, 0.05, 10.53, 9400)] == ["0 a second", "3 a minute", "10.5 a second",
                                                         "9,400 a second"]
    assert [size(n) for n in (0, 2**20, 1_500_000_000_000)] == ["0 B", "1 MiB", "1.36 TiB"]


def test_diagnoses_text_report_prints_the_evidence_as_a_table_under_the_findings_first_line(capsys):
    from ackscope.apps.diagnose import print_report
    from ackscope.model.findings import Diagnosis, Finding

    found = Finding("publisher-without-confirms", "warning", "/", "channel <0.859.0>", "", UNCONFIRMED,
                    "it publishes without confirms", "enable confirms",
                    identity="ackscope-scenario prefetch-saturated")
    print_report(Diagnosis([found, Finding("probe-down", "info", "", "probe q", "")], []), "headline")
    out = capsys.readouterr().out.splitlines()
    first = out.index("WARNING  publisher-without-confirms  vhost=/  channel <0.859.0> (ackscope-scenario "
                      "prefetch-saturated)")
    block = out[first + 1:out.index("  why       it publishes without confirms")]
    assert block == [
        "  evidence  published            1,000",
        "            confirm              no",
        "            publish rate         10.5 a second",
        "            window               95 s",
        f"            stakes               {UNCONFIRMED['stakes']}",
        "            published in window  1,000",
        "            routing              counted by the broker per channel and queue",
        "            inferred             the Prometheus plugin's channel <0.859.0>, the only one of the vhost "
        "publishing",
        "            at stake             ackscope.scenario.prefetch-saturated — durable, persistent: 907 of the 907 "
        "messages it holds",
        "                                 audit — durable, persistent: not reported by the source"]
    # A finding without evidence has no evidence line.
    probe = out.index("INFO     probe-down  vhost=-  probe q")
    assert out[probe + 1].startswith("  why")
