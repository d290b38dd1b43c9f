"""The rules of failures that had none (issue 55, K7) on small snapshots: a basic.get storm, a queue deleted while it
held messages, auto-ack deliveries lost with their consumer, a deprecated feature used today; each beside healthy
queues and clients that it never names."""

from __future__ import annotations

from dataclasses import replace

from snapshot_builders import (OVERVIEW, channel, connection, consumer, node, queue, recorded_plugin_snapshot, snapshot,
                               stats)

from ackscope.diagnosis.departures import Departures
from ackscope.diagnosis.rules import Context, diagnose, evaluate
from ackscope.diagnosis.thresholds import Thresholds
from ackscope.model.events import BROKER_LOG, CONNECTION_CLOSED, Breaks, BrokerEvent
from ackscope.model.probes import NAMESPACE
from ackscope.model.snapshot import CHANNELS, QUEUE_COUNTS, DeprecatedFeature, ProtocolCounts
from ackscope.sources.management import normalise as management

# A healthy client beside each case: manual acks, a prefetch, confirms; its queue durable, its messages persistent.
HEALTHY_QUEUE = queue("orders", messages_ready=3, messages_persistent=3)
HEALTHY_CHANNEL = channel("ch healthy", connection="conn healthy", connection_name="healthy",
                          message_stats=stats(publish=100, confirm=100, ack=100, deliver_get=100))
HEALTHY_CONSUMER = consumer("orders", "ch healthy", connection="conn healthy", connection_name="healthy")
HEALTHY_CONNECTION = connection("conn healthy", connection_name="healthy")


def _with_healthy(taken_at: float, queues=(), channels=(), consumers=(), connections=(), **parts):
    return snapshot(taken_at, queues=[HEALTHY_QUEUE, *queues], channels=[HEALTHY_CHANNEL, *channels],
                    consumers=[HEALTHY_CONSUMER, *consumers], connections=[HEALTHY_CONNECTION, *connections],
                    nodes=[node()], **parts)


def _only(ctx: Context, rule: str):
    return [f for f in evaluate(ctx) if f.rule == rule]


def _loud(ctx: Context) -> list[tuple[str, str, str]]:
    """Every finding at warning or above: (rule, object, client name)."""
    return sorted((f.rule, f.object, f.connection_name) for f in evaluate(ctx) if f.severity != "info")


# -- get-empty-storm ---------------------------------------------------------------------------------------------
def _polled(empty: int, taken_at: float, *extra_queues, poller_empty: int | None = None, **queue_kw):
    return _with_healthy(
        taken_at, queues=[queue("jobs", consumers=0, message_stats=stats(get_empty=empty), **queue_kw), *extra_queues],
        channels=[channel("ch poll", connection="conn poll", connection_name="poller", consumer_count=0,
                          message_stats=stats(get_empty=empty if poller_empty is None else poller_empty))],
        connections=[connection("conn poll", connection_name="poller")])


def test_a_get_empty_storm_names_the_queue_and_its_poller_at_a_rate_over_the_window():
    start, now = _polled(0, 1000.0), _polled(600, 1010.0)
    [f] = _only(Context(now, start, thresholds=Thresholds(get_empty_rate=50)), "get-empty-storm")
    assert (f.severity, f.object, f.connection_name) == ("warning", "queue jobs", "poller")
    assert f.evidence["get_empty"] == 600 and f.evidence["get_empty_rate"] == 60.0
    assert f.evidence["window_seconds"] == 10.0 and "only queue polled empty" in f.evidence["pollers_from"]
    # A channel of the vhost that polled empty once (another queue, since deleted) is no culprit.
    once = channel("ch once", connection="conn once", connection_name="once", message_stats=stats(get_empty=1))
    with_once = replace(now, channels=(*now.channels, once))
    [f] = _only(Context(with_once, start, thresholds=Thresholds(get_empty_rate=50)), "get-empty-storm")
    assert f.connection_name == "poller" and "once" in f.evidence["pollers"][1]
    assert "basic.consume" in f.remedy
    # The healthy client and its queue beside it: named by nothing at warning or above.
    assert _loud(Context(now, start, thresholds=Thresholds(get_empty_rate=50))) == [
        ("get-empty-storm", "queue jobs", "poller")]


def test_a_slow_poll_is_no_storm_and_the_first_poll_judges_nothing():
    start, now = _polled(0, 1000.0), _polled(490, 1010.0)
    assert _only(Context(now, start, thresholds=Thresholds(get_empty_rate=50)), "get-empty-storm") == []
    assert _only(Context(_polled(10**6, 1000.0)), "get-empty-storm") == []


def test_where_several_queues_of_the_vhost_storm_the_pollers_are_candidates_not_culprits():
    def other(n):
        return queue("other", consumers=0, message_stats=stats(get_empty=n))
    start, now = _polled(0, 1000.0, other(0)), _polled(600, 1010.0, other(600), poller_empty=1200)
    found = _only(Context(now, start, thresholds=Thresholds(get_empty_rate=50)), "get-empty-storm")
    assert sorted(f.object for f in found) == ["queue jobs", "queue other"]
    assert all(f.connection_name == "" and f.identity == "" for f in found)
    assert all("candidates" in f.evidence["pollers_from"] and "poller" in f.evidence["pollers"][0] for f in found)
    # One storming beside another polled now and then: the storming one's poller is named.
    now = _polled(600, 1010.0, other(5), poller_empty=605)
    [f] = _only(Context(now, start, thresholds=Thresholds(get_empty_rate=50)), "get-empty-storm")
    assert (f.object, f.connection_name) == ("queue jobs", "poller")


def test_a_channel_whose_count_may_be_spread_over_other_queues_is_never_named_the_storms_poller():
    """Reviewed: channel A polled two quiet queues, 300 empty each; B polled the storming one, 600: both count 600
    at the storm's rate, and either may be its poller as far as the broker counts."""
    def queues(counts):
        return [queue(n, consumers=0, message_stats=stats(get_empty=c)) for n, c in zip(("q1", "q2", "q3"), counts)]

    def chans(a, b):
        return [channel("ch a", connection_name="a", message_stats=stats(get_empty=a)),
                channel("ch b", connection_name="b", message_stats=stats(get_empty=b))]
    start = snapshot(1000.0, queues=queues((0, 0, 0)), channels=chans(0, 0))
    now = snapshot(1010.0, queues=queues((600, 300, 300)), channels=chans(600, 600))
    [f] = _only(Context(now, start, thresholds=Thresholds(get_empty_rate=50)), "get-empty-storm")
    assert f.object == "queue q1" and f.connection_name == "" and "candidates" in f.evidence["pollers_from"]


def _node_counted(empty: int, taken_at: float, queue_empty: int | None = None, statistics: bool = False):
    counts = (ProtocolCounts("rabbit@test", "amqp091", "classic", 0, 0, empty),
              ProtocolCounts("rabbit@test", "amqp091", "quorum", 0, 0, 0))
    return snapshot(taken_at, queues=[queue("jobs", consumers=0, message_stats=stats(get_empty=queue_empty)),
                                      HEALTHY_QUEUE], protocol_counts=counts,
                    overview=replace(OVERVIEW, statistics_disabled=not statistics))


def test_with_statistics_off_the_node_counter_says_unattributed_and_names_no_queue():
    start, now = _node_counted(0, 1000.0), _node_counted(6000, 1010.0)
    [f] = _only(Context(now, start), "get-empty-storm")
    assert (f.severity, f.vhost, f.object, f.connection_name) == ("warning", "", "node rabbit@test", "")
    assert f.evidence["queue"] == "unattributed" and f.evidence["by_queue_type"] == {"classic": 6000}
    assert "jobs" not in f.explanation and "unattributed" in f.explanation
    # Where the management API counts the queues' own, the node's counter says nothing more: not even before a
    # queue's first statistics.
    start, now = _node_counted(0, 1000.0, 0, statistics=True), _node_counted(6000, 1010.0, 6000, statistics=True)
    assert [g.object for g in _only(Context(now, start), "get-empty-storm")] == ["queue jobs"]
    start, now = _node_counted(0, 1000.0, statistics=True), _node_counted(6000, 1010.0, statistics=True)
    assert _only(Context(now, start), "get-empty-storm") == []


def test_get_empty_is_read_from_the_management_api_and_the_nodes_plugin():
    assert management.message_stats({"get_empty": 7, "get_empty_details": {"rate": 1.0}}).get_empty == 7
    assert "message_stats.get_empty" in management.COLUMNS["queues"]
    assert "message_stats.get_empty" in management.COLUMNS["channels"]
    # Recorded from a real 3.10.8 node: counted per queue type, 0 where none came back empty.
    assert {(c.queue_type, c.get_empty) for c in recorded_plugin_snapshot().protocol_counts} >= {("classic", 0)}


# -- temporary-queue-holding -----------------------------------------------------------------------------------
def test_an_empty_reply_queue_is_named_by_nothing_and_one_holding_messages_is_info():
    reply = queue("amq.gen-reply", durable=False, auto_delete=True, exclusive=True)
    assert evaluate(Context(_with_healthy(1000.0, queues=[reply]))) == []
    holding = replace(reply, messages_ready=2)
    [f] = _only(Context(_with_healthy(1000.0, queues=[holding])), "temporary-queue-holding")
    assert (f.severity, f.object, f.evidence["messages"]) == ("info", "queue amq.gen-reply", 2)
    assert "deleted with it" in f.explanation


def test_persistent_messages_in_a_durable_auto_delete_queue_or_messages_given_back_are_a_warning():
    durable = queue("work", durable=True, auto_delete=True, messages_ready=4, messages_persistent=4)
    [f] = _only(Context(_with_healthy(1000.0, queues=[durable])), "temporary-queue-holding")
    assert f.severity == "warning" and "4 persistent" in f.explanation and f.connection_name == ""
    before = queue("work", durable=False, auto_delete=True, messages_unacked=1, message_stats=stats(redeliver=0))
    after = replace(before, message_stats=stats(redeliver=3))
    [f] = _only(Context(_with_healthy(1010.0, queues=[after]), _with_healthy(1000.0, queues=[before])),
                "temporary-queue-holding")
    assert f.severity == "warning" and f.evidence["requeued_over_window"] == 3


# -- queue-deleted-holding -------------------------------------------------------------------------------------
def _work(**kw):
    return queue("work", **{"durable": False, "auto_delete": True, "messages_ready": 0, "messages_unacked": 1,
                            "messages_persistent": 0, "message_stats": stats(publish=1, deliver_get=1), **kw})


def test_a_queue_gone_while_it_held_messages_is_a_loss_naming_its_consumers_then():
    worker = consumer("work", "ch worker", connection="conn worker", connection_name="worker")
    before = _with_healthy(1000.0, queues=[_work()], consumers=[worker])
    now = _with_healthy(1005.0)
    [f] = _only(Context(now, before), "queue-deleted-holding")
    assert (f.severity, f.object, f.connection_name) == ("warning", "queue work", "worker")
    assert f.evidence["messages_at_last_poll"] == 1 and f.evidence["last_poll_seconds_ago"] == 5.0
    assert "up to 1" in f.evidence["lost"] and "was deleted" in f.explanation and "auto-delete" in f.explanation
    assert _loud(Context(now, before)) == [("queue-deleted-holding", "queue work", "worker")]


def test_a_consumer_missing_from_the_last_polls_list_is_named_from_an_earlier_one_and_said_so():
    """A consumer that lived a few seconds: the poll before the deletion counted it on the queue but its consumer
    list had none (a 4.3 node under load); the poll before that listed it."""
    worker = consumer("work", "ch worker", connection="conn worker", connection_name="worker")
    earlier = _with_healthy(997.0, queues=[_work(consumers=1)], consumers=[worker])
    before = _with_healthy(1000.0, queues=[_work(consumers=1)])
    [f] = _only(Context(_with_healthy(1005.0), before, earlier=earlier), "queue-deleted-holding")
    assert f.connection_name == "worker" and f.evidence["consumers_from"].startswith("an earlier poll's consumer list")
    # No earlier list that names one: nobody is named.
    [f] = _only(Context(_with_healthy(1005.0), before, earlier=before), "queue-deleted-holding")
    assert f.connection_name == "" and "consumers_from" not in f.evidence


def test_a_queue_deleted_holding_stays_a_finding_for_the_window_and_one_listed_again_never_went():
    """Said at one poll only, a critical finding is gone before the critical alert's `for: 1m` has passed."""
    held = queue("ledger", messages_ready=5, messages_persistent=5, consumers=0)
    departures = Departures(window_seconds=60.0)
    before = _with_healthy(1000.0, queues=[held])
    departures.update(before, None)
    seen = []
    for t in (1005.0, 1030.0, 1064.0, 1066.0):
        now = _with_healthy(t)
        ctx = Context(now, _with_healthy(t - 5.0), window=before, departed=departures.update(now, before))
        seen.append([(f.severity, f.evidence["last_poll_seconds_ago"]) for f in _only(ctx, "queue-deleted-holding")])
    assert seen == [[("critical", 5.0)], [("critical", 30.0)], [("critical", 64.0)], []]
    # Left out of one poll's list and listed again, with nothing that says it is new: it never went.
    departures = Departures(window_seconds=60.0)
    departures.update(before, None)
    assert set(departures.update(_with_healthy(1005.0), before).queues) == {("/", "ledger")}
    assert departures.update(_with_healthy(1010.0, queues=[held]), before).queues == {}
    # An auto-delete queue gone at one poll and listed again counting no consumer was declared again: still said.
    departures = Departures(window_seconds=60.0)
    departures.update(_with_healthy(1000.0, queues=[_work(consumers=1)]), None)
    departures.update(_with_healthy(1005.0), before)
    again = _with_healthy(1010.0, queues=[_work(messages_unacked=0, consumers=0)])
    [f] = _only(Context(again, _with_healthy(1005.0), departed=departures.update(again, before)),
                "queue-deleted-holding")
    assert "declared again" in f.explanation and f.evidence["last_poll_seconds_ago"] == 10.0


def test_a_queue_out_of_reach_or_across_an_unread_gap_is_never_remembered_deleted():
    """Its node's list failed at the poll that first missed it, then said the node down; or the queues' counts went
    unread for twenty minutes (what it held then says nothing of what was deleted now)."""
    held = queue("ledger", messages_ready=5, messages_persistent=5, consumers=0, node="rabbit@other")
    before = _with_healthy(1000.0, queues=[held])
    departures = Departures(window_seconds=300.0)
    departures.update(before, None)
    no_nodes = replace(_with_healthy(1010.0), nodes=())
    down = replace(_with_healthy(1020.0), nodes=(node(), node("rabbit@other", running=False)))
    assert departures.update(no_nodes, before).queues == {} and departures.update(down, before).queues == {}
    departures = Departures(window_seconds=300.0)
    departures.update(before, None)
    departures.update(replace(_with_healthy(1010.0), unreported=frozenset({QUEUE_COUNTS})), before)
    assert departures.update(_with_healthy(2210.0), before).queues == {}
    # The probes' own queue, expired holding what they published: the probe rules' to judge.
    departures = Departures(window_seconds=300.0)
    probe_queue = replace(held, name=f"{NAMESPACE}latency", node="rabbit@test")
    departures.update(_with_healthy(1000.0, queues=[probe_queue]), None)
    assert departures.update(_with_healthy(1010.0), before).queues == {}


def test_persistent_messages_of_a_durable_queue_deleted_are_critical():
    held = queue("ledger", messages_ready=5, messages_persistent=5, consumers=0)
    [f] = _only(Context(_with_healthy(1005.0), _with_healthy(1000.0, queues=[held])), "queue-deleted-holding")
    assert f.severity == "critical" and "5 persistent, in a durable queue" in f.explanation and f.connection_name == ""


def test_an_exclusive_queue_declared_durable_is_transient_and_its_loss_no_critical():
    """An exclusive queue is transient whatever its durable flag: its persistent messages were never kept across a
    restart, so its deletion is a warning, not the loss of confirmed messages."""
    held = queue("replies", exclusive=True, messages_ready=5, messages_persistent=5, consumers=0)
    [f] = _only(Context(_with_healthy(1005.0), _with_healthy(1000.0, queues=[held])), "queue-deleted-holding")
    assert f.severity == "warning"


def test_an_auto_delete_queue_declared_again_after_its_last_consumer_went_is_a_loss():
    # The management API keeps a queue's counters under its name across a deletion: what says it is new is its
    # consumers, none now where it had one, or no statistics yet.
    before = _with_healthy(1000.0, queues=[_work(durable=True, consumers=1)])
    for again in (replace(_work(durable=True), messages_unacked=0, consumers=0),
                  replace(_work(durable=True), messages_ready=None, messages_unacked=None, messages_persistent=None,
                          consumers=None, message_stats=stats())):
        [f] = _only(Context(_with_healthy(1005.0, queues=[again]), before), "queue-deleted-holding")
        assert f.severity == "warning" and "declared again" in f.explanation
    # Not auto-delete, or without a consumer at the last poll: fewer messages are no deletion.
    for then in (_work(durable=True, consumers=1, auto_delete=False), _work(durable=True, consumers=0)):
        now = replace(then, messages_unacked=0, consumers=0)
        assert _only(Context(_with_healthy(1005.0, queues=[now]), _with_healthy(1000.0, queues=[then])),
                     "queue-deleted-holding") == []


def test_a_queue_deleted_empty_or_on_a_node_down_or_an_unread_list_is_named_by_nothing():
    empty = _with_healthy(1000.0, queues=[_work(messages_unacked=0)])
    assert evaluate(Context(_with_healthy(1005.0), empty)) == []
    on_down = _with_healthy(1000.0, queues=[_work(node="rabbit@other")])
    now = replace(_with_healthy(1005.0), nodes=(node(), node("rabbit@other", running=False)))
    assert _only(Context(now, on_down), "queue-deleted-holding") == []
    unread = replace(_with_healthy(1000.0, queues=[_work()]), unreported=frozenset({QUEUE_COUNTS}))
    assert _only(Context(_with_healthy(1005.0), unread), "queue-deleted-holding") == []
    still = _with_healthy(1005.0, queues=[_work(message_stats=stats(publish=2, deliver_get=2))])
    assert _only(Context(still, _with_healthy(1000.0, queues=[_work()])), "queue-deleted-holding") == []


# -- auto-ack-consumer-gone ------------------------------------------------------------------------------------
AUTO_CHANNEL = channel("ch auto", connection="conn auto", connection_name="auto-worker", prefetch_count=0)
AUTO_CONSUMER = consumer("events", "ch auto", connection="conn auto", connection_name="auto-worker",
                         ack_required=False, prefetch_count=0)


def _auto(taken_at: float, delivered: int | None, present: bool = True):
    if not present:
        return _with_healthy(taken_at, queues=[queue("events")])
    return _with_healthy(taken_at, queues=[queue("events")],
                         channels=[replace(AUTO_CHANNEL, message_stats=stats(deliver_no_ack=delivered))],
                         consumers=[AUTO_CONSUMER],
                         connections=[connection("conn auto", connection_name="auto-worker")])


def test_an_auto_ack_channel_gone_is_info_from_polls_and_says_what_it_received_over_the_window():
    start, last, now = _auto(1000.0, 100), _auto(1010.0, 400), _auto(1015.0, None, present=False)
    [f] = _only(Context(now, last, window=start), "auto-ack-consumer-gone")
    assert (f.severity, f.object, f.connection_name) == ("info", "channel ch auto", "auto-worker")
    assert f.evidence["deliveries_without_ack_over_window"] == 300 and f.evidence["auto_ack_queues"] == "events"
    assert "its connection closed" in f.evidence["ended"] and "inferred" in f.explanation
    # The live auto-ack consumer is auto-ack-consumer's; nothing else is loud.
    assert _loud(Context(now, last, window=start)) == []


def test_an_auto_ack_channel_whose_connection_the_log_says_dropped_is_a_warning_for_the_window():
    start, last, now = _auto(1000.0, 100), _auto(1010.0, 400), _auto(1015.0, None, present=False)
    dropped = Breaks(1015.0, (BROKER_LOG,), events=(
        BrokerEvent(1012.0, CONNECTION_CLOSED, BROKER_LOG, connection="conn auto", reason="dropped",
                    text="client unexpectedly closed TCP connection"),))
    [f] = _only(Context(now, last, window=start, breaks=dropped), "auto-ack-consumer-gone")
    assert f.severity == "warning" and "dropped" in f.evidence["ended"]
    # Later in the window, gone before the poll before: still said, from the window's start.
    later = _auto(1030.0, None, present=False)
    [f] = _only(Context(later, _auto(1020.0, None, present=False), window=start, breaks=dropped),
                "auto-ack-consumer-gone")
    assert f.severity == "warning" and f.evidence["auto_ack_queues"] == "events"
    # A clean close by the client is no more than info.
    closed = Breaks(1015.0, (BROKER_LOG,), events=(
        BrokerEvent(1012.0, CONNECTION_CLOSED, BROKER_LOG, connection="conn auto", reason="closed"),))
    assert _only(Context(now, last, window=start, breaks=closed), "auto-ack-consumer-gone")[0].severity == "info"


def test_an_auto_ack_channel_idle_over_the_window_had_nothing_in_hand_when_it_died():
    """A Celery worker's control queue consumed with automatic ack, which received its last message hours ago:
    killed, it lost nothing it had lately; info, not a warning."""
    start, last, now = _auto(1000.0, 400), _auto(1010.0, 400), _auto(1015.0, None, present=False)
    dropped = Breaks(1015.0, (BROKER_LOG,), events=(
        BrokerEvent(1012.0, CONNECTION_CLOSED, BROKER_LOG, connection="conn auto", reason="dropped"),))
    [f] = _only(Context(now, last, window=start, breaks=dropped), "auto-ack-consumer-gone")
    assert f.severity == "info"


def test_a_channel_gone_before_the_log_told_how_is_judged_again_for_the_window_when_it_does():
    """The broker dropped a killed client's channel from its statistics before its log said the connection dropped
    (4.3.6 under load): the poll between says info; a later poll within the window, with the log's word, a warning.
    The exporter remembers the channel as last listed, poll to poll, until the window has passed it."""
    start, last = _auto(1000.0, 100), _auto(1010.0, 400)
    departures = Departures(window_seconds=60.0)
    departures.update(start, None)
    departures.update(last, start)
    polls = [(_auto(t, None, present=False), t) for t in (1015.0, 1020.0, 1030.0, 1080.0)]
    dropped = Breaks(1020.0, (BROKER_LOG,), events=(
        BrokerEvent(1012.0, CONNECTION_CLOSED, BROKER_LOG, connection="conn auto", reason="dropped",
                    text="client unexpectedly closed TCP connection"),))
    seen = []
    for (now, t), told in zip(polls, (None, dropped, dropped, dropped)):
        # The window's start moves past the channel's last listing: what it received is kept from when it went.
        window = start if t < 1060.0 else _auto(t - 60.0, None, present=False)
        ctx = Context(now, _auto(t - 5.0, None, present=False), window=window, breaks=told,
                      departed=departures.update(now, window))
        seen.append([(f.severity, f.evidence["deliveries_without_ack_over_window"], f.evidence["last_seen_seconds_ago"])
                     for f in _only(ctx, "auto-ack-consumer-gone")])
    assert seen == [[("info", 300, 5.0)], [("warning", 300, 10.0)], [("warning", 300, 20.0)], []]


def test_a_channel_a_poll_left_out_once_and_listed_again_never_went():
    departures = Departures(window_seconds=60.0)
    start = _auto(1000.0, 100)
    departures.update(start, None)
    assert set(departures.update(_auto(1005.0, None, present=False), start).channels) == {"ch auto"}
    assert departures.update(_auto(1010.0, 150), start).channels == {}
    unread = replace(_auto(1015.0, None, present=False), unreported=frozenset({CHANNELS}))
    assert departures.update(unread, start).channels == {}  # an unread list says nothing went


def test_a_later_end_of_its_connection_is_not_how_a_channel_closed_earlier_ended():
    """The client closed the auto-ack channel itself; its connection dropped a minute later: still info."""
    start, last = _auto(1000.0, 100), _auto(1010.0, 400)
    departures = Departures(window_seconds=300.0)
    departures.update(start, None)
    departures.update(last, start)
    gone = replace(_auto(1015.0, None, present=False), connections=(HEALTHY_CONNECTION,
                                                                    connection("conn auto", connection_name="auto")))
    departures.update(gone, start)
    later = _auto(1100.0, None, present=False)
    dropped = Breaks(1100.0, (BROKER_LOG,), events=(
        BrokerEvent(1095.0, CONNECTION_CLOSED, BROKER_LOG, connection="conn auto", reason="dropped"),))
    [f] = _only(Context(later, gone, window=start, breaks=dropped, departed=departures.update(later, start)),
                "auto-ack-consumer-gone")
    assert f.severity == "info" and "no event source said" in f.evidence["ended"]


def test_a_new_channel_under_a_gone_ones_number_does_not_take_back_what_went():
    """A client reopening the number an error closed: the new channel's counters start again."""
    start = _auto(1000.0, 100)
    departures = Departures(window_seconds=300.0)
    departures.update(start, None)
    departures.update(_auto(1010.0, 400), start)
    departures.update(_auto(1015.0, None, present=False), start)
    assert set(departures.update(_auto(1020.0, 3), start).channels) == {"ch auto"}


def test_a_manual_ack_channel_gone_or_an_unread_channel_list_is_named_by_nothing():
    healthy_gone = replace(_with_healthy(1015.0), channels=(), consumers=(), connections=())
    assert evaluate(Context(healthy_gone, _with_healthy(1010.0), window=_with_healthy(1000.0))) == []
    unread = replace(_auto(1010.0, 400), unreported=frozenset({CHANNELS}))
    assert _only(Context(_auto(1015.0, None, present=False), unread), "auto-ack-consumer-gone") == []


# -- deprecated-feature-used -----------------------------------------------------------------------------------
NEWEST = replace(OVERVIEW, rabbitmq_version="4.3.6")


def test_a_deprecated_feature_used_today_is_info_naming_what_uses_it():
    transient = queue("scratch", durable=False, exclusive=False)
    used = (DeprecatedFeature("transient_nonexcl_queues", "permitted_by_default", "https://example/doc"),)
    s = replace(_with_healthy(1000.0, queues=[transient]), overview=NEWEST, deprecated_used=used)
    [f] = _only(Context(s), "deprecated-feature-used")
    assert (f.severity, f.object, f.vhost) == ("info", "deprecated feature transient_nonexcl_queues", "")
    assert f.evidence["used_by"] == "scratch" and f.evidence["doc_url"] == "https://example/doc"
    configured = replace(s, deprecated_used=(replace(used[0], phase="denied_by_default"),))
    assert _only(Context(configured), "deprecated-feature-used")[0].severity == "warning"
    assert _only(Context(replace(s, deprecated_used=())), "deprecated-feature-used") == []


def test_before_3_13_the_rule_is_not_evaluated_and_says_why():
    s = replace(_with_healthy(1000.0), deprecated_used=None)
    verdict = diagnose(Context(s))
    assert not [f for f in verdict.findings if f.rule == "deprecated-feature-used"]
    [skipped] = [n for n in verdict.not_evaluated if n.rule == "deprecated-feature-used"]
    assert "3.13" in skipped.why


def test_an_auto_ack_channel_the_broker_never_delivered_to_lost_nothing_when_it_died():
    """A Celery worker's control reply queue, consumed with automatic ack and idle, killed with its worker: nothing
    was delivered to it without ack, so nothing was lost (seen side by side with a poison loop's worker)."""
    idle = [_auto(t, 0) for t in (1000.0, 1010.0)]
    dropped = Breaks(1015.0, (BROKER_LOG,), events=(
        BrokerEvent(1012.0, CONNECTION_CLOSED, BROKER_LOG, connection="conn auto", reason="dropped",
                    text="client unexpectedly closed TCP connection"),))
    gone = _auto(1015.0, None, present=False)
    assert _only(Context(gone, idle[1], window=idle[0], breaks=dropped), "auto-ack-consumer-gone") == []
