"""Bad input and faults: each ends in a counted, one-line error, the exporter still answering, nothing lost."""

from __future__ import annotations

import logging
import time

import pika
import pytest
import requests
from helpers import only_vhost, scrape, value, wait_for, wait_for_sample

from ackscope_testkit.fault_proxy import FaultProxy

@pytest.fixture
def proxy(broker):
    p = FaultProxy(broker.management_url)
    yield p
    p.close()


@pytest.mark.alone  # a bound in seconds (a scrape under 1 s, a poll cut at its deadline): alone on the CPU
def test_broker_down_sets_up_to_zero_and_metrics_still_answer_fast(spare_broker, start_exporter):
    exporter = start_exporter(spare_broker.management_url, interval=1.0, timeout=2.0)
    wait_for_sample(exporter, "ackscope_up", 1)

    spare_broker.stop()
    stopped = time.monotonic()
    wait_for_sample(exporter, "ackscope_up", 0, timeout=1.0 + 2.0 + 1.0)  # one interval plus the timeout
    assert time.monotonic() - stopped < 1.0 + 2.0 + 1.0
    for _ in range(5):
        started = time.perf_counter()
        s = scrape(exporter)
        assert time.perf_counter() - started < 1.0
    assert value(s, "ackscope_poll_errors_total", endpoint="overview", reason="connection") >= 1
    assert "ackscope_queue_messages_ready" not in s, "no stale broker series while the broker is down"
    snapshot = requests.get(exporter.url + "/api/snapshot", timeout=5).json()
    assert snapshot["stale"] is True and snapshot["snapshot"] is not None, "the last good snapshot is kept"

    spare_broker.start()
    wait_for_sample(exporter, "ackscope_up", 1, timeout=10)


@pytest.mark.alone  # a bound in seconds (a scrape under 1 s, a poll cut at its deadline): alone on the CPU
def test_a_poll_longer_than_the_interval_is_late_not_down_and_said_once(broker, proxy, start_exporter, caplog):
    from ackscope.apps.exporter import DEADLINE_INTERVALS
    caplog.set_level(logging.INFO, logger="ackscope")
    proxy.faults["queues"] = "slow:0.8"  # a poll of about 0.8 s against an interval of 0.5 s
    exporter = start_exporter(proxy.url, interval=0.5, deadline=DEADLINE_INTERVALS * 0.5)
    wait_for_sample(exporter, "ackscope_up", 1)
    ups, ages, seen = [], [], exporter.poller.status.last_attempt_at
    for _ in range(4):  # four polls, each slower than the interval, scraped as each ends
        wait_for(lambda: exporter.poller.status.last_attempt_at != seen, what="the next poll")
        seen = exporter.poller.status.last_attempt_at
        s = scrape(exporter)
        ups.append(value(s, "ackscope_up"))
        ages.append(value(s, "ackscope_snapshot_age_seconds"))
    assert ups == [1] * 4, "a slow poll is not a down broker"
    assert exporter.poller.status.last_duration > 0.5 and max(ages) > 0.5, "the staleness shows"
    said = [r.getMessage() for r in caplog.records if "longer than the interval" in r.getMessage()]
    assert len(said) == 1 and "--interval" in said[0] and "--source prometheus" in said[0], said
    proxy.faults.clear()
    wait_for(lambda: any("fit the 0.5s interval again" in r.getMessage() for r in caplog.records),
             what="the all-clear once polls are quick again")


def test_wrong_password_is_one_clear_log_line_and_no_retry_storm(broker, proxy, start_exporter, caplog):
    caplog.set_level(logging.INFO, logger="ackscope")
    exporter = start_exporter(proxy.url, password="not-the-password", interval=0.3)
    s = wait_for_sample(exporter, "ackscope_poll_errors_total", lambda v: v >= 5, endpoint="overview",
                        reason="unauthorized")
    assert value(s, "ackscope_up") == 0
    assert set(proxy.requests) == {"overview"}, "after a 401 the other endpoints are not asked"
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, errors
    assert "login failed for user 'guest'" in errors[0] and "ACKSCOPE_PASSWORD" in errors[0]
    assert "\n" not in errors[0]


@pytest.mark.alone  # a bound in seconds (a scrape under 1 s, a poll cut at its deadline): alone on the CPU
def test_hanging_api_cannot_stretch_a_poll_past_its_deadline(broker, proxy, start_exporter):
    proxy.faults["queues"] = "hang"
    exporter = start_exporter(proxy.url, interval=1.0, timeout=10.0, deadline=2.0)
    s = wait_for_sample(exporter, "ackscope_poll_errors_total", lambda v: v >= 1, endpoint="queues",
                        reason="deadline")
    assert value(s, "ackscope_up") == 1, "the lists that answered are exported"
    assert value(s, "ackscope_poll_duration_seconds") < 2.0 + 0.5
    started = time.perf_counter()
    scrape(exporter)
    assert time.perf_counter() - started < 1.0


@pytest.mark.alone  # a bound in seconds (a scrape under 1 s, a poll cut at its deadline): alone on the CPU
def test_trickling_api_cannot_stretch_a_poll_past_its_deadline(broker, proxy, start_exporter):
    proxy.faults["channels"] = "trickle"
    exporter = start_exporter(proxy.url, interval=1.0, timeout=10.0, deadline=2.0)
    s = wait_for_sample(exporter, "ackscope_poll_errors_total", lambda v: v >= 1, endpoint="channels",
                        reason="deadline")
    assert value(s, "ackscope_poll_duration_seconds") < 2.0 + 0.5


@pytest.mark.parametrize("fault,reason", [("malformed", "malformed"), ("truncated", "malformed"),
                                          ("html", "malformed"), ("500", "server_error")])
def test_a_bad_list_costs_only_its_part_is_counted_said_once_and_recovered_from(broker, vhost, clients, proxy,
                                                                                start_exporter, caplog, fault,
                                                                                reason):
    caplog.set_level(logging.INFO, logger="ackscope")
    setup = clients(broker, vhost, "setup").channel()
    setup.queue_declare("kept", durable=True)
    setup.basic_publish("", "kept", b"x")
    proxy.faults["consumers"] = fault
    exporter = start_exporter(proxy.url, interval=0.3, selection=only_vhost(vhost))
    s = wait_for_sample(exporter, "ackscope_poll_errors_total", lambda v: v >= 2, endpoint="consumers",
                        reason=reason)
    assert value(s, "ackscope_up") == 1, "one list never blinds the poll"
    wait_for_sample(exporter, "ackscope_queue_messages_ready", 1, queue="kept", vhost=vhost)
    findings = requests.get(exporter.url + "/api/findings", timeout=5).json()
    waiting = {n["rule"]: n["needs"] for n in findings["not_evaluated"]}
    assert waiting.get("prefetch-unlimited") == ["the channels and their consumers"], waiting
    partial = [r.getMessage() for r in caplog.records if "poll partial" in r.getMessage()]
    assert len(partial) == 1 and "consumers" in partial[0], partial
    assert not any(r.exc_info for r in caplog.records), "no traceback in the log"
    del proxy.faults["consumers"]
    wait_for(lambda: any("every endpoint answers again" in r.getMessage() for r in caplog.records),
             what="the all-clear once the list answers")


# The bindings are read beside the exchanges: either failing costs the part, counted under "exchanges" (a
# bindings read that failed under load once crashed the whole poll, its name not that of a part).
@pytest.mark.parametrize("failing", ["exchanges", "bindings"])
def test_exchanges_that_cannot_be_read_cost_only_themselves_and_the_plugins_counts_still_tell_the_stakes(
        broker, vhost, clients, proxy, start_exporter, caplog, failing):
    # A slow publisher without confirms, of persistent messages into a durable queue. While the vhost's exchanges
    # answer 500 the poll is partial, and the node's plugin (read directly, where the listeners say) still ties the
    # channel to the queue its publishes reached. (Where neither tells, the finding says so: tests/test_stakes.py.)
    caplog.set_level(logging.INFO, logger="ackscope")
    unsafe = clients(broker, vhost, "slow-unsafe").channel()
    unsafe.queue_declare("kept", durable=True)
    proxy.faults[f"{failing}/{vhost}"] = "500"
    exporter = start_exporter(proxy.url, interval=0.3, selection=only_vhost(vhost))

    last = [0.0]

    def unsafe_finding():
        if time.monotonic() - last[0] >= 2.0:  # a slow publisher: 0.5 a second, under publish_rate_at_stake
            unsafe.basic_publish("", "kept", b"x", pika.BasicProperties(delivery_mode=2))
            last[0] = time.monotonic()
        return next((f for f in requests.get(exporter.url + "/api/findings", timeout=5).json()["findings"]
                     if f["rule"] == "publisher-without-confirms" and f["connection_name"] == "slow-unsafe"), None)
    f = wait_for(lambda: (g := unsafe_finding()) and g["severity"] == "warning" and g,
                 what="the publisher without confirms, its stakes from the plugin's counts")
    [kept] = f["evidence"]["at_stake"]
    assert (kept["queue"], kept["durable"]) == ("kept", True)
    assert f["evidence"]["routing"].startswith("counted by the broker per channel and queue (inferred: ")
    s = wait_for_sample(exporter, "ackscope_poll_errors_total", lambda v: v >= 2, endpoint="exchanges",
                        reason="server_error")
    assert value(s, "ackscope_up") == 1
    assert not any(r.exc_info for r in caplog.records), "no traceback in the log"
    assert not [r.message for r in caplog.records if "poll crashed" in r.message]


def test_every_list_failing_is_a_failed_poll(broker, proxy, start_exporter):
    for name in ("nodes", "vhosts", "connections", "channels", "consumers", "queues"):
        proxy.faults[name] = "500"
    exporter = start_exporter(proxy.url, interval=0.3)
    s = wait_for_sample(exporter, "ackscope_poll_errors_total", lambda v: v >= 1, endpoint="queues",
                        reason="server_error")
    assert value(s, "ackscope_up") == 0


def test_healthz_stays_ok_while_the_broker_is_unreachable(start_exporter):
    exporter = start_exporter("http://127.0.0.1:9", interval=0.3)  # nothing listens on the discard port
    wait_for_sample(exporter, "ackscope_up", 0)
    assert requests.get(exporter.url + "/healthz", timeout=5).status_code == 200
    wait_for(lambda: value(scrape(exporter), "ackscope_poll_errors_total", endpoint="overview",
                           reason="connection"), what="a connection error counted")


@pytest.mark.parametrize("fault,reason", [("500", "server_error"), ("malformed", "malformed")])
def test_a_plugin_that_cannot_count_a_vhosts_routes_costs_only_the_routes(broker, vhost, fault, reason):
    """Where a channel publishes without confirms, each node's plugin is asked which queues each channel's publishes
    reached: one that answers 500, or no exposition, leaves the exchanges read and the poll whole."""
    from ackscope.core.secret import Secret
    from ackscope.sources.management_source import ManagementSource
    from ackscope.workloads.private_broker import ADMIN_PASSWORD, ADMIN_USER

    plugin = FaultProxy(broker.prometheus_url)
    plugin.faults["/metrics/detailed"] = fault
    source = ManagementSource(broker.management_url, ADMIN_USER, Secret(ADMIN_PASSWORD))
    try:
        errors = []
        at_risk = [{"vhost": vhost, "confirm": False, "message_stats": {"publish": 5}}]
        exchanges, _bindings, routed = source._routes(at_risk, [], {broker.nodename: plugin.url},
                                                     time.monotonic() + 5, errors)
        assert routed == [] and {x["name"] for x in exchanges} >= {"", "amq.direct"}
        assert [(e.endpoint, e.reason) for e in errors] == [("routed", reason)]
        assert plugin.requests == ["/metrics/detailed"]
    finally:
        source.close()
        plugin.close()
