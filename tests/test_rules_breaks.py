"""The rules about where deliveries break, on small snapshots and on the events of logs recorded from each release:
a stalled consumer is not a slow one, and what its timeout will do differs by release and queue type; timeouts,
silent cancels, channels closed on an error and churn are each named by client, with the source that told them."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import pytest
from snapshot_builders import OVERVIEW, channel, connection, consumer, queue, snapshot, stats
from test_break_ledger import RECORDED_AT

from ackscope.diagnosis.holding import Holding
from ackscope.diagnosis.rules import Context, diagnose
from ackscope.diagnosis.thresholds import Thresholds
from ackscope.model.events import (BROKER_LOG, CONNECTION_ERROR, CONNECTION_OPENED, EVENT_EXCHANGE, EVENTS, BrokerEvent,
                                   Breaks)
from ackscope.model.snapshot import Churn, Link, NodeSettings
from ackscope.sources import BreakLedger, BrokerLogWatch
from ackscope.sources.break_ledger import NAMING_SECONDS

DATA = Path(__file__).parent / "data"


def _on(version: str):
    return replace(OVERVIEW, rabbitmq_version=version)


def _stalled_consumer(version: str, queue_type: str = "classic", acks: int = 0, **consumer_kw):
    """A prefetch-5 consumer holding 5 of a queue of 20, its acks at `acks`."""
    return snapshot(overview=_on(version),
                    channels=(channel(prefetch_count=5, messages_unacked=5, message_stats=stats(ack=acks,
                                                                                                 deliver_get=5 + acks)),),
                    consumers=(consumer(prefetch_count=5, ack_required=True, **consumer_kw),),
                    queues=(queue(type=queue_type, messages_ready=15, messages_unacked=5),))


def _judged(snapshots, thresholds=Thresholds(), breaks: Breaks | None = None):
    """The findings on the last snapshot, each poll's having been seen by Holding in turn."""
    holding = Holding()
    held = None
    for s in snapshots:
        held = holding.update(s)
    last, previous = snapshots[-1], snapshots[-2] if len(snapshots) > 1 else None
    return diagnose(Context(last, previous, thresholds=thresholds, breaks=breaks, held=held))


def _rules(verdict) -> dict[str, list]:
    found: dict[str, list] = {}
    for f in verdict.findings:
        found.setdefault(f.rule, []).append(f)
    return found


def test_a_consumer_that_acks_nothing_is_stalled_not_saturated():
    polls = [replace(_stalled_consumer("4.0.5", consumer_timeout_ms=1_800_000), taken_at=t) for t in (0, 30, 61)]
    found = _rules(_judged(polls))
    assert "prefetch-saturated" not in found
    (stalled,) = found["consumer-stalled"]
    assert stalled.severity == "info", "61 s of a 30-minute timeout: not half yet"
    assert stalled.evidence["held_for_at_least_seconds"] == 61 and stalled.evidence["timeout_ms"] == 1_800_000
    assert stalled.evidence["timeout_source"] == "the broker's own figure for this consumer (/api/consumers)"
    assert stalled.evidence["timeout_in_at_most_seconds"] == 1739
    assert "closes the channel" in stalled.explanation


def test_a_consumer_that_acks_slowly_is_saturated_not_stalled():
    polls = [replace(_stalled_consumer("4.0.5", acks=a), taken_at=t) for t, a in ((0, 0), (30, 30), (61, 61))]
    found = _rules(_judged(polls))
    assert "consumer-stalled" not in found and [f.rule for f in found["prefetch-saturated"]]


def test_half_a_short_timeout_without_an_ack_is_at_risk_before_the_floor_and_never_saturated():
    """Issue 56: consumer_timeout = 30000, a consumer holding its prefetch of 5 for 24 s without an ack was called
    prefetch-saturated, as the 60 s floor had not passed."""
    from ackscope.model.snapshot import NodeSettings
    told = [replace(_stalled_consumer("4.3.6", "quorum", consumer_timeout_ms=30_000), taken_at=t) for t in (0, 12, 24)]
    found = _rules(_judged(told))
    assert "prefetch-saturated" not in found
    (stalled,) = found["consumer-stalled"]
    assert (stalled.severity, stalled.evidence["timeout_ms"], stalled.evidence["timeout_in_at_most_seconds"]) == \
        ("warning", 30_000, 6)
    # 3.10 says no timeout per consumer: the node's, read with --cli, is as good.
    cli = NodeSettings(node="rabbit@a", consumer_timeout_ms=30_000)
    read = [replace(_stalled_consumer("3.10.8"), taken_at=t, settings=cli) for t in (0, 12, 24)]
    (stalled,) = _rules(_judged(read))["consumer-stalled"]
    assert stalled.severity == "warning" and "read with --cli" in stalled.evidence["timeout_source"]
    # Before half of it, a consumer may be on one long job: saturated, as the counters say.
    early = _rules(_judged(told[:2]))
    assert "consumer-stalled" not in early and early["prefetch-saturated"]
    # Where the broker does not say which timeout applies, the floor stands and the evidence says so at 60 s.
    unknown = [replace(_stalled_consumer("3.10.8"), taken_at=t) for t in (0, 12, 24)]
    assert "consumer-stalled" not in _rules(_judged(unknown))
    (late,) = _rules(_judged(unknown + [replace(unknown[0], taken_at=61)]))["consumer-stalled"]
    assert late.evidence["timeout_source"].startswith("inferred: RabbitMQ's default")


def test_half_the_timeout_held_is_a_warning():
    polls = [replace(_stalled_consumer("4.0.5", consumer_timeout_ms=100_000), taken_at=t) for t in (0, 61)]
    (stalled,) = _rules(_judged(polls))["consumer-stalled"]
    assert stalled.severity == "warning" and stalled.evidence["timeout_in_at_most_seconds"] == 39


@pytest.mark.parametrize("version, queue_type, next_words, timeout_ms, source_words", [
    ("3.10.8", "classic", "up to a minute after", 1_800_000, "inferred: RabbitMQ's default"),
    ("4.0.5", "quorum", "closes the channel", 1_800_000, "inferred: RabbitMQ's default"),
    ("4.3.6", "quorum", "cancels the consumer", 1_800_000, "inferred: RabbitMQ's default"),
    ("4.3.6", "classic", "no timeout applies to a classic queue", None, "quorum queues only"),
    ("4.3.6", "", "depends on the queue's type", 1_800_000, "inferred: RabbitMQ's default"),  # type not reported
])
def test_what_the_timeout_will_do_is_said_for_the_release_and_queue_type(version, queue_type, next_words,
                                                                           timeout_ms, source_words):
    polls = [replace(_stalled_consumer(version, queue_type), taken_at=t) for t in (0, 61)]
    (stalled,) = _rules(_judged(polls))["consumer-stalled"]
    assert next_words in stalled.evidence["next"] and stalled.evidence["timeout_ms"] == timeout_ms
    assert source_words in stalled.evidence["timeout_source"]
    assert stalled.severity == ("warning" if timeout_ms is None else "info")


def test_the_timeout_in_force_comes_from_the_queue_then_the_node_then_the_log_then_the_default():
    def judged(version, breaks=None, settings=None, queue_type="classic", **queue_kw):
        polls = [replace(_stalled_consumer(version, queue_type), taken_at=t, settings=settings) for t in (0, 61)]
        polls = [replace(p, queues=(replace(p.queues[0], **queue_kw),)) for p in polls]
        return _rules(_judged(polls, breaks=breaks))["consumer-stalled"][0].evidence
    node = NodeSettings("rabbit@host", 20_000)
    assert judged("3.13.7", consumer_timeout_ms=120_000, settings=node)["timeout_source"].startswith(
        "the queue's x-consumer-timeout")
    assert judged("3.10.8", consumer_timeout_ms=120_000)["timeout_ms"] == 1_800_000, "3.10 applies no queue timeout"
    logged = Breaks(61.0, (BROKER_LOG,), events=(BrokerEvent(10.0, "consumer_timeout", BROKER_LOG, timeout_ms=15000),))
    assert judged("3.10.8", breaks=logged)["timeout_ms"] == 15000
    from_cli = judged("3.10.8", breaks=logged, settings=node)
    assert from_cli["timeout_ms"] == 20_000 and from_cli["timeout_source"] == \
        "node rabbit@host's consumer_timeout (rabbitmq.conf, read with --cli)"
    # consumer_timeout = undefined: no timeout before 4.3; 24 hours on 4.3's quorum queues (rabbit_queue_type)
    undefined = NodeSettings("rabbit@host", None)
    never = judged("3.10.8", settings=undefined)
    assert never["timeout_ms"] is None and "times out no consumer" in never["next"]
    assert judged("4.3.6", settings=undefined, queue_type="quorum")["timeout_ms"] == 86_400_000


def _recorded(release: str, previous=None, recording: str = "broker-log", at: float = RECORDED_AT,
              form: str = "plain", **snapshot_kw) -> tuple[Breaks, Context]:
    log = DATA / f"{recording}-{release}" / f"{form}.log"
    ledger = BreakLedger(window_seconds=1e9, log=BrokerLogWatch(str(log), from_start=True))
    ledger.update(None, now=at - NAMING_SECONDS)
    breaks = ledger.update(None, now=at)  # what named no connection has waited its time for a name
    s = snapshot(taken_at=at, overview=_on(release), **snapshot_kw)
    return breaks, Context(s, previous, breaks=breaks)


@pytest.mark.parametrize("release", ["3.10.8", "4.0.5"])
def test_recorded_consumer_timeouts_are_named_by_client_and_queue(release):
    _, ctx = _recorded(release)
    timed_out = _rules(diagnose(ctx))["consumer-timed-out"]
    assert {f.connection_name for f in timed_out} == {"stalled-worker"}
    assert sum(f.evidence["timeouts"] for f in timed_out) == 2
    assert all(f.evidence["timeout_ms"] == 15000 and f.evidence["source"] == BROKER_LOG for f in timed_out)
    queues = {f.evidence["queue"] for f in timed_out}
    assert queues == ({"stalled-classic", "stalled-quorum"} if release == "4.0.5" else
                      {"not named by this release's log"})


def test_a_timeout_says_what_it_returned_where_a_poll_saw_the_channel_before_its_close():
    breaks, ctx = _recorded("4.0.5")
    timeout = next(e for e in breaks.events if e.kind == "consumer_timeout")
    before = snapshot(taken_at=timeout.at - 5, overview=_on("4.0.5"),
                      channels=(channel(f"{timeout.connection} ({timeout.channel})", messages_unacked=5),))
    found = _rules(diagnose(replace(ctx, previous=before)))["consumer-timed-out"]
    named = next(f for f in found if f.evidence["queue"] == timeout.queue)
    assert named.evidence["messages_returned_at_least"] == 5
    assert named.evidence["messages_returned_inferred_from"].startswith("each closed channel's unacked")


@pytest.mark.parametrize("release", ["3.10.8", "4.0.5", "4.3.6"])
def test_recorded_channel_errors_each_get_the_remedy_for_their_reason(release):
    _, ctx = _recorded(release)
    closed = {f.evidence["reason"]: f for f in _rules(diagnose(ctx))["closed-on-error"]}
    assert set(closed) == {"unknown_delivery_tag", "inequivalent_arguments", "not_found", "access_refused",
                           "resource_locked", "frame_error"}
    assert closed["unknown_delivery_tag"].connection_name == "orders-worker"
    assert closed["unknown_delivery_tag"].evidence["closed"] == 2
    assert "double ack" in closed["unknown_delivery_tag"].remedy
    assert "policy" in closed["inequivalent_arguments"].remedy
    assert closed["frame_error"].object.startswith("connection ")
    assert len({f.remedy for f in closed.values()}) == 6
    # Each refused once: a client that met an error, not one that can no longer work.
    assert {f.severity for f in closed.values()} == {"warning"}
    assert closed["inequivalent_arguments"].evidence["queue"] == "orders"


def test_without_the_log_the_reason_is_not_known_and_the_rules_say_what_to_give():
    verdict = diagnose(Context(snapshot()))
    skipped = {n.rule: n for n in verdict.not_evaluated}
    for rule in ("consumer-timed-out", "closed-on-error"):
        assert skipped[rule].needs == (EVENTS,) and "--broker-log" in skipped[rule].reason


def _cancelled_polls(version: str, ready_after: int = 5, consumers_after: int = 0, still_listed: bool = False):
    """A consumer holding 5 of a quorum queue for 61 s, then gone: from the consumers and its channel (pika on
    4.3.6), or `still_listed` there while its queue counts no consumer (the Java client on 4.3.6)."""
    holding = _stalled_consumer(version, "quorum")
    after = replace(holding, taken_at=62.0, queues=(queue(type="quorum", messages_ready=ready_after,
                                                          messages_unacked=0, consumers=consumers_after),))
    if not still_listed:
        after = replace(after, consumers=(),
                        channels=(replace(holding.channels[0], messages_unacked=0, consumer_count=0),))
    return [replace(holding, taken_at=0.0), replace(holding, taken_at=61.0), after]


def test_a_quorum_consumer_gone_while_its_channel_stays_is_a_silent_cancel_on_4_3_and_critical():
    (cancelled,) = _rules(_judged(_cancelled_polls("4.3.6")))["consumer-cancelled-by-broker"]
    assert cancelled.severity == "critical" and cancelled.evidence["unacked_when_last_seen"] == 5
    assert "inferred" in cancelled.evidence and cancelled.evidence["source"] == "polls"
    assert "Nobody consumes" in cancelled.explanation
    found = _rules(_judged(_cancelled_polls("4.3.6", still_listed=True)))
    assert [f.severity for f in found["consumer-cancelled-by-broker"]] == ["critical"]
    assert "consumer-stalled" not in found, "its channel still claims the deliveries: it is no stall any more"
    assert "prefetch-saturated" not in found, "nor a slow consumer"
    served = _rules(_judged(_cancelled_polls("4.3.6", consumers_after=1)))["consumer-cancelled-by-broker"]
    assert [f.severity for f in served] == ["warning"]
    skipped = {n.rule: n.why for n in _judged(_cancelled_polls("4.0.5")).not_evaluated}
    assert "before RabbitMQ 4.3" in skipped["consumer-cancelled-by-broker"]


def test_a_consumer_dropped_just_after_its_channels_counters_moved_is_named_once_its_channel_has_held_long_enough():
    # The poll before the drop saw the channel's deliveries move (a fresh hold); its channel holds on, still
    # claiming the 5, while its queue counts no consumer (the Java client on 4.3.6).
    holding = _stalled_consumer("4.3.6", "quorum")
    moved = replace(holding, taken_at=10.0, channels=(replace(
        holding.channels[0], message_stats=stats(ack=0, deliver_get=6)),))
    dropped = [replace(moved, taken_at=t, queues=(queue(type="quorum", messages_ready=5, messages_unacked=0,
                                                      consumers=0),)) for t in (11.0, 12.0, 30.0)]
    thresholds = Thresholds(stalled_consumer_seconds=5)
    polls = [replace(holding, taken_at=0.0), moved, *dropped]
    assert "consumer-cancelled-by-broker" not in _rules(_judged(polls[:4], thresholds)), "held for 2 s only"
    (cancelled,) = _rules(_judged(polls, thresholds))["consumer-cancelled-by-broker"]
    assert cancelled.severity == "critical" and cancelled.evidence["held_for_at_least_seconds"] == 20


def test_a_consumer_whose_first_deliveries_timed_out_is_dropped_while_its_later_ones_stay_unacked_on_its_queue():
    # 4.3.6 times each delivery out on its own: the queue counts no consumer, 7 ready and 3 still unacked, while
    # the Java client's channel claims its 5 (measured beside the suite's other workers).
    holding = _stalled_consumer("4.3.6", "quorum")
    partly = [replace(holding, taken_at=t, queues=(queue(type="quorum", messages_ready=7, messages_unacked=3,
                                                       consumers=0),)) for t in (62.0, 63.0)]
    found = _rules(_judged([replace(holding, taken_at=0.0), replace(holding, taken_at=61.0), *partly]))
    (cancelled,) = found["consumer-cancelled-by-broker"]
    assert cancelled.severity == "critical" and cancelled.evidence["ready"] == 7
    assert "consumer-stalled" not in found


def _opened(n: int, every: float, name: str | None = None, source: str = BROKER_LOG) -> Breaks:
    events = tuple(BrokerEvent(1000.0 + i * every, CONNECTION_OPENED, source,
                               connection=f"10.0.0.7:{40000 + i} -> 10.0.0.1:5672", connection_name=name,
                               vhost="/", user="app") for i in range(n))
    return Breaks(1000.0 + n * every, (source,), events=events)


@pytest.mark.parametrize("source", [BROKER_LOG, EVENT_EXCHANGE])
def test_a_client_opening_a_connection_per_message_is_named_from_the_log_or_the_event_exchange(source):
    found = _rules(diagnose(Context(snapshot(), breaks=_opened(116, 0.5, source=source))))["connection-churn"]
    (churn,) = found
    assert churn.severity == "warning" and churn.evidence["connections_opened"] == 116
    assert churn.identity == "unnamed clients from 10.0.0.7 as app" and churn.evidence["source"] == source
    assert "connection-churn" not in _rules(diagnose(Context(snapshot(), breaks=_opened(3, 30, "worker"))))
    # The event exchange tells no reason: the rules that need one still wait for the log.
    skipped = {n.rule for n in diagnose(Context(snapshot(), breaks=_opened(3, 30, source=source))).not_evaluated}
    assert ({"consumer-timed-out", "closed-on-error"} <= skipped) == (source == EVENT_EXCHANGE)


def test_churn_is_grouped_by_the_name_a_client_gives_and_never_takes_in_a_connection_that_stays_open():
    """Issue 56: a client opening a connection per message and a healthy one named billing-healthy, both from
    127.0.0.1 as guest, were one finding naming the healthy one; a poison loop's 40 names were lumped together."""
    def opened(i: int, name: str | None, client: str | None = None) -> BrokerEvent:
        return BrokerEvent(1000.0 + i, CONNECTION_OPENED, BROKER_LOG, connection=f"127.0.0.1:{40000 + i} -> "
                           "127.0.0.1:5672", connection_name=name, client=client, vhost="/", user="guest")
    churner = [opened(i, None, "amqplib 0.10.4") for i in range(30)]
    healthy = [opened(100 + i, "billing-healthy") for i in range(3)]  # restarted twice; its last connection open
    named = [opened(200 + i, f"poison-{i}") for i in range(40)]  # 40 clients, once each
    still_open = connection(healthy[-1].connection, connection_name="billing-healthy")
    breaks = Breaks(1300.0, (BROKER_LOG,), tuple(sorted(churner + healthy + named)))
    found = _rules(diagnose(Context(snapshot(taken_at=1300.0, connections=(still_open,)), breaks=breaks)))
    (churn,) = found["connection-churn"]
    assert churn.identity == "amqplib 0.10.4 clients from 127.0.0.1 as guest" and churn.evidence["connections_opened"] == 30
    assert churn.connection_name == "" and "billing-healthy" not in churn.explanation


def test_churn_from_polls_alone_is_info_and_says_the_log_would_name_the_client():
    then = snapshot(taken_at=0.0, overview=replace(OVERVIEW, churn=Churn(10, 9, 10, 9)))
    now = snapshot(taken_at=300.0, overview=replace(OVERVIEW, churn=Churn(130, 129, 130, 129)))
    (churn,) = _rules(diagnose(Context(now, then)))["connection-churn"]
    assert churn.severity == "info" and churn.evidence["connections_opened"] == 120
    assert "--broker-log" in churn.evidence["clients"] and "invisible to polls" in churn.evidence["clients"]


def test_an_amqp10_receiver_whose_quorum_queue_took_its_deliveries_back_is_named_on_4_3():
    # As measured on 4.3.6 (a receiver that never settles, a 10 s timeout): 300 unsettled on the link, the queue
    # 300 ready with no consumer, nothing delivered again.
    link = Link("/", "guest", "peer -> host", 0, 1, "jobs-receiver", "receiver", "/queues/jobs", "jobs", False, 10,
                300, session_unsettled=300, session_receivers=1, client="RabbitMQ AMQP 1.0 client")
    jobs = queue("jobs", type="quorum", messages_ready=300, messages_unacked=0, consumers=0)
    polls = [snapshot(taken_at=t, overview=_on("4.3.6"), links=(link,), queues=(jobs,)) for t in (0, 30, 61)]
    (found,) = _rules(_judged(polls))["consumer-cancelled-by-broker"]
    assert found.severity == "critical" and found.evidence["link_unsettled"] == 300
    assert found.evidence["seen_so_for_at_least_seconds"] == 61
    assert found.object == "link 'jobs-receiver' (session 0) of connection peer -> host" and "inferred" in found.evidence
    assert "detach" in found.remedy
    served = replace(jobs, consumers=1, messages_unacked=10)
    assert "consumer-cancelled-by-broker" not in _rules(_judged([*polls[:2], replace(polls[2], queues=(served,))]))


def test_an_amqp10_receiver_the_log_says_was_released_is_named_as_known_and_from_the_log_alone_where_unlisted():
    link = Link("/", "guest", "peer -> host", 0, 1, "jobs-receiver", "receiver", "/queues/jobs", "jobs", False, 10,
                20, session_unsettled=20, session_receivers=1, client="Qpid Proton")
    jobs = queue("jobs", type="quorum", messages_ready=20, messages_unacked=0, consumers=0)
    polls = [snapshot(taken_at=t, overview=_on("4.3.6"), links=(link,), queues=(jobs,)) for t in (0, 5, 61)]
    said = BrokerEvent(3.0, "consumer_timeout", BROKER_LOG, connection="peer -> host", vhost="/", queue="jobs",
                       link="jobs-receiver", reason="released",
                       text="released unsettled messages due to consumer timeout")
    logged = Breaks(61.0, (BROKER_LOG,), events=(said,))
    # Within stalled_consumer_seconds nothing is said, log or not: a link of the same name attached again since
    # would match the line as well.
    assert "consumer-cancelled-by-broker" not in _rules(_judged(polls[:2], breaks=replace(logged, at=5.0)))
    found = _rules(_judged(polls, breaks=logged))
    (f,) = found["consumer-cancelled-by-broker"]
    assert f.severity == "critical" and f.evidence["source"] == "broker log and polls" and "inferred" not in f.evidence
    assert "the broker's log says so" in f.explanation and f.object.startswith("link 'jobs-receiver'")
    assert "consumer-timed-out" not in found  # no channel was closed
    (f,) = _rules(_judged(polls))["consumer-cancelled-by-broker"]
    assert f.evidence["source"] == "polls" and "inferred" in f.evidence
    # The line names another queue than the link's now (the name was attached there before): not the evidence of
    # this link, which is inferred from the polls; the release the line tells of is said from the log alone.
    found = _rules(_judged(polls, breaks=replace(logged, events=(said._replace(queue="payments"),))))
    assert sorted((f.evidence["source"], f.evidence["queue"]) for f in found["consumer-cancelled-by-broker"]) == [
        (BROKER_LOG, "payments"), ("polls", "jobs")]
    # A session of two receivers: its count is neither one's.
    shared = replace(link, session_unsettled=503, session_receivers=2)
    assert "consumer-cancelled-by-broker" not in _rules(_judged([replace(p, links=(shared,)) for p in polls]))
    # The link no longer listed (detached since): the log alone names it.
    (f,) = _rules(_judged([replace(p, links=()) for p in polls], breaks=logged))["consumer-cancelled-by-broker"]
    assert (f.severity, f.object, f.evidence["source"]) == ("warning", "link 'jobs-receiver' of connection peer -> host",
                                                           BROKER_LOG)


def test_a_quorum_queue_whose_statistics_lag_its_new_receiver_is_not_called_a_cancel():
    # Measured on 4.3.6: for 4 s after a receiver attached, its quorum queue listed 0 consumers and 0 messages
    # while the link held 300 unsettled; then 1 consumer and 300 unacked.
    link = Link("/", "guest", "peer -> host", 0, 1, "jobs-receiver", "receiver", "/queues/jobs", "jobs", False, 10,
                300, session_unsettled=300, session_receivers=1, client="RabbitMQ AMQP 1.0 client")
    lagging = queue("jobs", type="quorum", messages_ready=0, messages_unacked=0, consumers=0)
    fresh = replace(lagging, consumers=1, messages_unacked=300)
    polls = [snapshot(taken_at=t, overview=_on("4.3.6"), links=(link,), queues=(q,))
             for t, q in ((0, lagging), (4, lagging), (6, fresh), (70, lagging))]
    for seen in range(1, len(polls) + 1):
        assert "consumer-cancelled-by-broker" not in _rules(_judged(polls[:seen])), seen

# -- what the broker's log says it dropped, and the clients it closed (tests/data/broker-log-drops-*, issue 55 K4) --
DROPS_AT = datetime(2026, 11, 29, 9, 0, tzinfo=timezone.utc).timestamp()  # just after the recordings' lines
DROPS = [(version, form) for version in ("3.10.8", "4.0.5", "4.3.6") for form in ("plain", "json")]


def _drops(version: str, form: str = "plain", **snapshot_kw) -> dict[str, list]:
    return _rules(diagnose(_recorded(version, recording="broker-log-drops", at=DROPS_AT, form=form,
                                     **snapshot_kw)[1]))


@pytest.mark.parametrize(("version", "form"), DROPS)
def test_a_message_dropped_in_a_dead_letter_cycle_is_critical_and_names_the_cycle(version, form):
    (dropped,) = _drops(version, form)["dead-letter-cycle-dropped"]
    assert dropped.severity == "critical" and dropped.object == "queue cycle.retry"
    assert dropped.evidence["queues"] == ["cycle.work", "cycle.retry", "cycle.work"]
    assert (dropped.evidence["dropped_from"], dropped.evidence["dead_lettered_into"]) == ("cycle.retry", "cycle.work")
    assert dropped.evidence["lines"] == 1 and "not logged" in dropped.evidence["logged"]
    assert "cycle.work -> cycle.retry -> cycle.work" in dropped.explanation and "gone" in dropped.explanation
    assert dropped.connection_name == "" and dropped.vhost == "", "the log names neither a client nor the vhost"
    assert dropped.evidence["vhost"] == "not named by the log" and "parking queue" in dropped.remedy


def test_the_cycles_vhost_is_inferred_only_where_one_vhost_alone_holds_its_queues():
    both = (queue("cycle.work", vhost="orders"), queue("cycle.retry", vhost="orders"))
    (dropped,) = _drops("4.3.6", queues=both)["dead-letter-cycle-dropped"]
    assert dropped.vhost == "orders" and dropped.evidence["vhost"].startswith("orders (inferred")
    twice = both + (queue("cycle.work", vhost="billing"), queue("cycle.retry", vhost="billing"))
    (dropped,) = _drops("4.3.6", queues=twice)["dead-letter-cycle-dropped"]
    assert dropped.vhost == "" and dropped.evidence["vhost"] == "not named by the log: one of billing, orders"
    half = (queue("cycle.work", vhost="orders"), queue("cycle.retry", vhost="billing"))
    assert _drops("4.3.6", queues=half)["dead-letter-cycle-dropped"][0].vhost == ""


@pytest.mark.parametrize(("version", "form"), DROPS)
def test_a_client_closed_for_missed_heartbeats_is_named_with_the_remedy_for_a_blocked_connection(version, form):
    closed = {f.evidence["reason"]: f for f in _drops(version, form)["closed-on-error"]}
    lost = closed["missed_heartbeats"]
    assert lost.connection_name == "heartbeat-sleeper" and lost.severity == "warning"
    assert lost.object.startswith("connection ") and "missed its heartbeats" in lost.explanation
    assert lost.evidence["broker_said"] == "missed heartbeats from client, timeout: 2s"
    assert "add_callback_threadsafe" in lost.remedy


@pytest.mark.parametrize(("version", "form"), DROPS)
def test_a_celery_producer_refused_five_times_for_inequivalent_arguments_can_no_longer_work_critical(version, form):
    closed = {f.evidence["reason"]: f for f in _drops(version, form)["closed-on-error"]}
    refused = closed["inequivalent_arguments"]
    assert refused.severity == "critical" and refused.connection_name == "celery-inequivalent-producer"
    assert refused.evidence["queue"] == "celery.priority" and refused.evidence["closed"] == 5
    assert "can no longer do its work" in refused.explanation and "policy" in refused.remedy


@pytest.mark.parametrize(("version", "form"), DROPS)
def test_connection_exceptions_are_named_each_with_its_remedy_and_a_handshake_timeout_only_said(version, form):
    closed = {f.evidence["reason"]: f for f in _drops(version, form)["closed-on-error"]}
    assert closed["handshake_timeout"].severity == "info"
    assert "health check" in closed["handshake_timeout"].remedy
    assert closed["access_refused"].severity == "warning", "one login refused: not yet a client that cannot work"
    assert closed["access_refused"].identity == "unnamed client from 127.0.0.1"
    assert closed["not_allowed"].severity == "warning" and "vhost" in closed["not_allowed"].remedy
    channel_error = closed["channel_error"]
    assert channel_error.connection_name == "reopening-client" and channel_error.evidence["operation"] == "channel.open"
    assert "one thread" in channel_error.remedy


def test_a_refusal_repeated_by_the_same_client_is_critical_and_another_clients_single_one_is_not():
    def refused(at: float, name: str, queue_name: str = "jobs") -> BrokerEvent:
        return BrokerEvent(at, "channel_error", BROKER_LOG, connection=f"10.0.0.7:{int(at)} -> 10.0.0.1:5672",
                           connection_name=name, vhost="/", user="app", channel=1, operation="queue.declare",
                           reason="precondition_failed", queue=queue_name,
                           text=f"inequivalent arg 'x-max-priority' for queue '{queue_name}' in vhost '/'")
    events = (refused(1, "web"), refused(2, "web", "other"), refused(3, "web", "third"), refused(4, "worker"),
              refused(5, "worker"))
    found = {f.connection_name: f for f in _rules(diagnose(Context(snapshot(), breaks=Breaks(
        10.0, (BROKER_LOG,), events=events))))["closed-on-error"]}
    assert found["web"].severity == "warning", "three queues refused once each: each may be a one-off"
    assert found["worker"].severity == "warning", "twice: not yet"
    events += (refused(6, "worker"),)
    found = {f.connection_name: f for f in _rules(diagnose(Context(snapshot(), breaks=Breaks(
        10.0, (BROKER_LOG,), events=events))))["closed-on-error"]}
    assert found["worker"].severity == "critical" and found["web"].severity == "warning"


def test_churn_names_each_client_apart_and_never_a_connection_that_stays_open():
    """Issue 55's K5 and the field run: a Celery worker restarted in a loop (unnamed, py-amqp), a client opening a
    named connection per message, and a healthy named client from the same address and user whose connection stays
    open: two churn findings, neither naming the healthy client."""
    def opened(i: int, at: float, name: str | None, client: str | None) -> BrokerEvent:
        return BrokerEvent(at, CONNECTION_OPENED, BROKER_LOG, connection=f"10.0.0.7:{40000 + i} -> 10.0.0.1:5672",
                           connection_name=name, vhost="/", user="app", client=client)
    events = [opened(0, 1000.0, "billing-healthy", "pika 1.3.2")]
    events += [opened(1 + i, 1001.0 + 4 * i, None, "py-amqp 5.4.2") for i in range(20)]
    events += [opened(100 + i, 1001.5 + 2 * i, "per-message", "pika 1.3.2") for i in range(40)]
    healthy = connection("10.0.0.7:40000 -> 10.0.0.1:5672", connection_name="billing-healthy")
    found = _rules(diagnose(Context(snapshot(taken_at=1090.0, connections=[healthy]),
                                    breaks=Breaks(1090.0, (BROKER_LOG,), events=tuple(sorted(events))))))
    churn = {f.identity: f for f in found["connection-churn"]}
    assert set(churn) == {"per-message", "py-amqp 5.4.2 clients from 10.0.0.7 as app"}, churn
    assert churn["per-message"].object == "connections named per-message"
    assert churn["per-message"].evidence["connections_opened"] == 40
    assert all("billing-healthy" not in f.identity + f.connection_name for f in churn.values())


def test_logins_refused_from_one_address_with_no_user_or_name_are_no_client_that_cannot_work():
    """Reviewed: behind one NAT'd address three clients are each refused their login once; the log names no user
    and no connection name, so they may be three clients: a warning, never the critical of one client stuck."""
    refused = tuple(BrokerEvent(1000.0 + i, CONNECTION_ERROR, BROKER_LOG,
                                connection=f"10.0.0.5:{50000 + i} -> 10.0.0.1:5672", reason="access_refused",
                                text="ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN")
                    for i in range(3))
    [f] = _rules(diagnose(Context(snapshot(taken_at=1010.0), breaks=Breaks(1010.0, (BROKER_LOG,),
                                                                           events=refused))))["closed-on-error"]
    assert f.severity == "warning" and f.evidence["closed"] == 3
