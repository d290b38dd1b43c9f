"""Inputs where the judgements of where deliveries break, the partition's sides and the persistent count could name
something wrong: a channel list that failed or skipped a channel for one poll, the probes' own connection, someone
else's churn, counters read within one statistics interval, messages that arrive without a publish, members that are
down, an exchange with an alternate exchange. Each docstring says the wrong claim it guards against."""

from __future__ import annotations

from dataclasses import replace

import pytest
from snapshot_builders import OVERVIEW, channel, connection, consumer, node, queue, snapshot, stats

from ackscope.diagnosis.channel_turnover import ChannelTurnover, closed_between
from ackscope.diagnosis.holding import Holding
from ackscope.diagnosis.rules import Context, diagnose, evaluate
from ackscope.model.probes import CONNECTION_PREFIX
from ackscope.model.snapshot import CHANNELS, Churn, Exchange, MessageStats, Unread
from ackscope.sources.reachability import reconciled

pytestmark = pytest.mark.unit

APP = "127.0.0.1:5001 -> 127.0.0.1:5672"


def _steady(t: float, numbers=(1, 2, 3, 4), **kw):
    """A healthy client: one connection, its long-lived channels, counters only growing."""
    chans = [channel(f"{APP} ({n})", number=n, connection=APP, connection_name="billing",
                     message_stats=stats(deliver_get=int(t) + 10, ack=int(t) + 10)) for n in numbers]
    return snapshot(t, channels=chans, connections=[connection(APP, connection_name="billing")], **kw)


def _churn_findings(polls, window=300.0):
    turnover = ChannelTurnover(window)
    seen = None
    for p in polls:
        seen = turnover.update(p)
    return [f for f in evaluate(Context(polls[-1], polls[-2], window=polls[0], turnover=seen))
            if f.rule == "channel-churn"]


def test_a_poll_whose_channel_list_failed_closes_no_channel():
    """Wrong claim: 'billing kept its connection open while at least 4 of its channels closed'. One poll's
    /api/channels failed (unread, CHANNELS unreported, channels empty, connections listed): closed_between counts every
    channel as closed, the memory keeps it for the window, and the next full poll names a healthy client."""
    failed = replace(_steady(20, numbers=()), unreported=frozenset({CHANNELS}),
                     unread=(Unread("channels", "timeout", "channels: timed out"),))
    assert closed_between(_steady(10), failed) == {}
    polls = [_steady(0), _steady(10), failed, _steady(30), _steady(40)]
    assert _churn_findings(polls, window=60.0) == []


def test_a_channel_missing_from_one_poll_and_back_with_its_counters_did_not_close():
    """Wrong claim: channels closed. A paged /api/channels (a page shifts when another client's channel closes
    between page reads) or a node's plugin not answering for one poll leaves a long-lived channel out once; it is back
    at the next poll with its counters grown: the same channel, never closed."""
    gap = [_steady(t, numbers=(1, 2, 3, 4) if i % 2 == 0 else (1,)) for i, t in enumerate(range(0, 70, 10))]
    assert _churn_findings(gap, window=60.0) == []


def test_the_probes_own_connection_is_never_named_for_churn():
    """Wrong claim: the probes' own connection churns channels. Context.without_probes says the client rules never
    judge the probes, but ctx.turnover is built from snapshots with the probes in them and used as is."""
    probe = "127.0.0.1:6000 -> 127.0.0.1:5672"
    def poll(t, i):
        ch = channel(f"{probe} ({i + 1})", number=i + 1, connection=probe, connection_name=CONNECTION_PREFIX)
        return snapshot(t, channels=[ch], connections=[connection(probe, connection_name=CONNECTION_PREFIX)])
    polls = [poll(t, i) for i, t in enumerate(range(0, 70, 10))]
    assert [f.connection_name for f in _churn_findings(polls, window=60.0)] == []


def test_the_brokers_count_of_someone_elses_churn_does_not_name_a_client_at_its_own_low_rate_as_fact():
    """Wrong claim (unlabelled): 'billing ... at least 3 of its channels closed' as a churner, warning, no
    'inferred'. billing closed 3 channels in 5 minutes (0.6 a minute, a CachingConnectionFactory trimming its cache);
    the broker counted 600 closes from a client whose channels live shorter than a poll. The broker's count, for all
    clients together, names nobody: billing is not named."""
    polls = []
    for i, t in enumerate(range(0, 330, 30)):
        numbers = (1, 2, 3, 4) if i < 1 else (1, 2, 3) if i < 4 else (1, 2) if i < 7 else (1,)
        polls.append(replace(_steady(t, numbers), overview=replace(OVERVIEW, churn=Churn(10, 10, 100 + 60 * i,
                                                                                          100 + 60 * i))))
    found = _churn_findings(polls)
    assert not [f for f in found if f.connection_name == "billing"], found


def _holding_consumer(t: float, timeout_ms: int):
    return snapshot(t, overview=replace(OVERVIEW, rabbitmq_version="4.0.5"),
                    channels=(channel(prefetch_count=5, messages_unacked=5, message_stats=stats(ack=7, deliver_get=12)),),
                    consumers=(consumer(prefetch_count=5, ack_required=True, consumer_timeout_ms=timeout_ms),),
                    queues=(queue(messages_ready=15, messages_unacked=5),))


def test_counters_within_one_statistics_interval_tell_no_stall_whatever_the_timeout():
    """Wrong claim: consumer-stalled (warning). The broker refreshes a channel's ack counter every 5 s
    (collect_statistics_interval): polls 4 s apart may read the same emission, so 'no ack' is not known. With a
    6 s consumer timeout, half of it (3 s) is shorter than that interval."""
    holding = Holding()
    polls = [_holding_consumer(t, 6_000) for t in (0.0, 2.0, 4.0)]
    for p in polls:
        held = holding.update(p)
    verdict = diagnose(Context(polls[-1], polls[-2], held=held))
    assert not [f for f in verdict.findings if f.rule == "consumer-stalled"]


def test_messages_arriving_without_a_publish_count_are_not_called_transient():
    """Wrong claim: 'durable queue dlq holds 100 transient messages'. Dead-lettered messages (and AMQP 1.0
    publishes on 4.3, rabbitmq-server#16528) reach a queue without moving its `publish` counter; the persistent count
    lags them as it lags any arrival. The depth's growth since the older poll is a floor on what arrived."""
    then = queue("dlq", consumers=0, messages_ready=0, messages_persistent=0, message_stats=MessageStats())
    now = replace(then, messages_ready=100, messages_persistent=0)
    found = evaluate(Context(snapshot(1010.0, queues=[now]), snapshot(1000.0, queues=[then])))
    assert not [f for f in found if f.rule == "transient-in-durable-queue"]


def test_members_that_are_down_are_no_part_of_a_majority():
    """Wrong claim: 'this side holds a majority of the cluster: it can still change definitions'. n1 is cut off
    from n2 and n3 is stopped (answers nothing): n1's side is n1 alone, 1 of 3. _partition puts n3 on n1's side."""
    nodes = reconciled((node("rabbit@n1"), node("rabbit@n2", running=False), node("rabbit@n3", running=False)),
                       "rabbit@n1", {"rabbit@n1": 1, "rabbit@n2": 1})
    s = snapshot(overview=replace(OVERVIEW, rabbitmq_version="4.3.6"), nodes=nodes)
    [f] = [f for f in evaluate(Context(s)) if f.rule == "network-partition" and f.object == "node rabbit@n1"]
    assert f.evidence["majority"] is not True


def test_an_unbound_exchange_with_an_alternate_exchange_is_not_inferred_as_where_unroutables_went():
    """Wrong claim: 'published N messages to exchange events (inferred) that matched no queue'. events has no
    binding of its own but an alternate exchange, so nothing into it is unroutable; the same channel publishes each
    event there and an audit copy to the default exchange under a deleted queue's name: the counts equal by
    construction, and the inference names the one exchange that routed every message."""
    def poll(t, n):
        ch = channel("pub", confirm=False, message_stats=stats(publish=2 * n, drop_unroutable=n))
        events = Exchange("/", "events", MessageStats(publish=n), type="topic")  # alternate-exchange=events.ae
        ae = Exchange("/", "events.ae", MessageStats(publish=n), bindings=(("queue", "all-events", ""),),
                      type="fanout")
        default = Exchange("/", "", MessageStats(publish=n), type="direct")
        return snapshot(t, channels=[ch], exchanges=[default, events, ae])
    found = [f for f in evaluate(Context(poll(60.0, 40), poll(0.0, 10))) if f.rule == "unroutable-dropped"]
    assert found and all("events" not in str(f.evidence["exchange"]) for f in found)
