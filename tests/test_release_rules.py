"""What RabbitMQ 4 changed about delivery, in the rules, on small snapshots: messages a queue gives up on
(its delivery limit, TTL, length limit, rejects), what a requeue loop comes to on each release and queue type,
a channel-wide prefetch the release does not show, and rules that cannot apply to a release."""

from __future__ import annotations

from dataclasses import replace

from snapshot_builders import OVERVIEW, channel, consumer, queue, snapshot, stats

from ackscope.diagnosis.rules import Context, diagnose, evaluate
from ackscope.diagnosis.thresholds import Thresholds
from ackscope.model.snapshot import DEAD_LETTER_COUNTS, DeadLettered


def _on(version: str, s):
    return replace(s, overview=replace(OVERVIEW, rabbitmq_version=version))


def _counters(delivery_limit_dropped: int = 0, maxlen_dropped: int = 0, dead_lettered: int = 0):
    return (DeadLettered("rabbit@a", "delivery_limit", "quorum", "disabled", delivery_limit_dropped),
            DeadLettered("rabbit@a", "delivery_limit", "quorum", "at_least_once", dead_lettered),
            DeadLettered("rabbit@a", "maxlen", "classic", "disabled", maxlen_dropped))


def _poison(version: str = "4.0.5", *, dropped: int = 30, dead_letter_exchange: str | None = None, left: int = 30,
            counters: bool = True, queue_type: str = "quorum", limit: int | None = 20):
    """A queue whose 30 messages came back 20 times each over ten seconds; `left` of them left it without acks."""
    before = queue(type=queue_type, delivery_limit=limit, dead_letter_exchange=dead_letter_exchange,
                   messages_ready=0, message_stats=stats(publish=0, ack=0, redeliver=0, deliver_get=0))
    after = replace(before, messages_ready=30 - left,
                    message_stats=stats(publish=30, ack=0, redeliver=600, deliver_get=630))
    parts = {"dead_lettered": _counters()} if counters else {}
    start = _on(version, snapshot(1000.0, queues=[before], **parts))
    end = _on(version, snapshot(1010.0, queues=[after],
                                **({"dead_lettered": _counters(delivery_limit_dropped=0 if dead_letter_exchange else dropped,
                                                               dead_lettered=0 if not dead_letter_exchange else dropped)}
                                   if counters else {})))
    if not counters:
        start = replace(start, unreported=frozenset({DEAD_LETTER_COUNTS}))
        end = replace(end, unreported=frozenset({DEAD_LETTER_COUNTS}))
    return Context(end, start)


def _only(ctx: Context, rule: str):
    return [f for f in evaluate(ctx) if f.rule == rule]


def test_messages_dropped_at_a_quorum_queues_delivery_limit_are_critical_and_named_by_queue():
    [f] = _only(_poison(), "delivery-limit-reached")
    assert f.severity == "critical" and f.object == "queue q"
    assert f.evidence["dropped_on_nodes"] == 30 and f.evidence["nodes"] == ["rabbit@a"]
    assert f.evidence["left_queue_without_ack"] == 30 and f.evidence["delivery_limit"] == 20
    assert f.evidence["attribution"].startswith("inferred:"), "the broker counts per node: say it is inferred"
    assert "30 messages" in f.explanation and "gone" in f.explanation


def test_dead_lettered_at_the_limit_is_a_warning_naming_the_exchange():
    [f] = _only(_poison(dead_letter_exchange="poison"), "delivery-limit-reached")
    assert f.severity == "warning" and "'poison'" in f.explanation
    assert f.evidence["dead_lettered_on_nodes"] == 30 and "'poison'" in f.evidence["dead_letter_target"]


def test_without_the_plugins_counters_the_drop_is_inferred_from_the_queue_alone():
    [f] = _only(_poison(counters=False), "delivery-limit-reached")
    assert f.severity == "critical" and "dropped_on_nodes" not in f.evidence
    assert "Prometheus plugin was not read" in f.evidence["attribution"]


def test_a_queue_without_a_limit_or_redeliveries_is_never_blamed_for_the_nodes_drops():
    for ctx in (_poison(limit=None), _poison(left=0)):
        [f] = _only(ctx, "delivery-limit-reached")  # the nodes counted 30 dropped: said, on no queue
        assert f.object == "quorum queues on rabbit@a: delivery_limit" and f.vhost == ""
        assert f.evidence["attribution"].startswith("unattributed") and f.evidence["could_have"] == "no live queue"
        assert "queue q" not in f.explanation


def test_messages_pushed_out_by_a_length_limit_without_dead_lettering_are_dropped():
    before = queue(name="capped", messages_ready=10, consumers=0, max_length=10,
                   message_stats=stats(publish=10, ack=0))
    after = replace(before, message_stats=stats(publish=30, ack=0))
    ctx = Context(snapshot(1010.0, queues=[after], dead_lettered=_counters(maxlen_dropped=20)),
                  snapshot(1000.0, queues=[before], dead_lettered=_counters()))
    [f] = _only(ctx, "messages-dropped")
    # Messages their publishers were told were safe are gone: critical (issue 55's K6).
    assert f.severity == "critical" and f.evidence["reason"] == "maxlen" and f.evidence["dropped_on_nodes"] == 20
    assert f.object == "queue capped" and "length limit" in f.explanation and "gone" in f.explanation


def _maxlen_window(*queues_then_now, deleted=()):
    """The nodes counted 8 messages dropped at a classic queue's length limit over ten seconds; `queues_then_now`
    are (then, now) pairs of the queues alive at both ends, `deleted` those only at the start."""
    then = [t for t, _ in queues_then_now] + list(deleted)
    return Context(snapshot(1010.0, queues=[n for _, n in queues_then_now], dead_lettered=_counters(maxlen_dropped=8)),
                   snapshot(1000.0, queues=then, dead_lettered=_counters()))


def test_a_reject_publish_queue_is_never_blamed_for_drops_by_length_and_a_deleted_queue_is_named_as_one():
    # Issue 55's K2: a drop-head queue took 10 and was deleted; a reject-publish queue then refused 49 of 50.
    refusing = queue(name="refusing", max_length=1, overflow="reject-publish", consumers=0,
                     message_stats=stats(publish=0, ack=0))
    refused = replace(refusing, messages_ready=1, message_stats=stats(publish=50, ack=0))
    gone = queue(name="capped", max_length=2, consumers=0, messages_ready=2)
    [f] = _only(_maxlen_window((refusing, refused), deleted=[gone]), "messages-dropped")
    assert f.object == "classic queues on rabbit@a: maxlen" and "refusing" not in f.explanation + str(f.evidence)
    assert f.evidence["deleted_in_window"] == ["queue capped (/)"] and "capped (deleted in the window)" in f.explanation
    assert f.severity == "critical" and f.evidence["dropped_on_nodes"] == 8


def test_drops_two_queues_could_have_made_are_unattributed_and_name_both():
    a, b = (queue(name=n, max_length=2, consumers=0, message_stats=stats(publish=0, ack=0)) for n in ("a", "b"))
    a2, b2 = (replace(x, messages_ready=2, message_stats=stats(publish=6, ack=0)) for x in (a, b))
    healthy = queue(name="healthy", message_stats=stats(publish=0, ack=0, deliver_get=0))
    healthy2 = replace(healthy, message_stats=stats(publish=50, ack=50, deliver_get=50))
    [f] = _only(_maxlen_window((a, a2), (b, b2), (healthy, healthy2)), "messages-dropped")
    assert f.evidence["attribution"].startswith("unattributed") and "one of a, b could have" in f.explanation
    assert "healthy" not in f.explanation + str(f.evidence)


def test_a_length_limited_queue_that_never_reached_its_limit_is_never_blamed_for_drops_by_length():
    capped = queue(name="capped", max_length=2, consumers=0, message_stats=stats(publish=0, ack=0))
    capped2 = replace(capped, messages_ready=2, message_stats=stats(publish=10, ack=0))
    # A roomy queue whose counters show messages leaving it without acks (its statistics lag a step): it held 5
    # and took 10 against a limit of 100,000, so it was never full.
    roomy = queue(name="roomy", max_length=100_000, messages_ready=5, message_stats=stats(publish=0, ack=0))
    roomy2 = replace(roomy, messages_ready=5, message_stats=stats(publish=10, ack=4))
    [f] = _only(_maxlen_window((capped, capped2), (roomy, roomy2)), "messages-dropped")
    assert f.object == "queue capped" and "roomy" not in str(f.evidence)


def test_a_queue_dead_lettering_through_the_default_exchange_is_never_said_to_drop():
    # Issue 55's K1: x-dead-letter-exchange "" with a routing key keeps what it dead-letters.
    kept = queue(name="fld", type="quorum", delivery_limit=2, dead_letter_exchange="", dead_letter_routing_key="fld.dlq",
                 consumers=1, message_stats=stats(publish=0, ack=0, redeliver=0, deliver_get=0))
    kept2 = replace(kept, message_stats=stats(publish=3, ack=0, redeliver=6, deliver_get=9))
    ctx = Context(snapshot(1010.0, queues=[kept2], dead_lettered=(
        DeadLettered("rabbit@a", "delivery_limit", "quorum", "at_most_once", 3),)),
        snapshot(1000.0, queues=[kept], dead_lettered=(DeadLettered("rabbit@a", "delivery_limit", "quorum",
                                                                    "at_most_once", 0),)))
    [f] = _only(ctx, "delivery-limit-reached")
    assert f.severity == "warning" and f.object == "queue fld"
    assert "the default exchange with routing key 'fld.dlq'" in f.explanation and "dropped" not in f.explanation


def test_requeue_loop_says_what_happens_next_on_each_release_and_queue_type():
    classic = _only(_poison("3.10.8", queue_type="classic", limit=None, left=0, counters=False), "requeue-loop")[0]
    assert classic.evidence["next"] == "loops-forever" and "classic queues have no delivery limit" in classic.explanation
    four_oh = _only(_poison("4.0.5"), "requeue-loop")[0]
    assert four_oh.evidence["next"] == "dropped-at-limit" and "after 20 deliveries" in four_oh.explanation
    assert "dead-letter exchange" in four_oh.remedy
    nacked = _only(_poison("4.3.6", dropped=0), "requeue-loop")[0]
    assert nacked.evidence["next"] == "loops-forever" and "basic.nack" in nacked.explanation
    assert "basic.reject" in nacked.remedy
    rejected = _only(_poison("4.3.6"), "requeue-loop")[0]
    assert rejected.evidence["next"] == "dropped-at-limit" and "reject" in rejected.explanation


def test_a_channel_wide_prefetch_the_release_does_not_show_is_inferred_from_messages_left_ready():
    hidden = channel(prefetch_count=0, global_prefetch_count=None, messages_unacked=5)
    bound = snapshot(queues=[queue(messages_ready=15)], channels=[hidden], consumers=[consumer(prefetch_count=0)])
    assert _only(Context(_on("4.0.5", bound)), "prefetch-unlimited") == []
    drained = snapshot(queues=[queue(messages_ready=0)], channels=[hidden], consumers=[consumer(prefetch_count=0)])
    [f] = _only(Context(_on("4.0.5", drained)), "prefetch-unlimited")
    assert f.severity == "info", "five held with nothing ready may be a hidden limit's (Celery's is 4 a process)"
    [f] = _only(Context(_on("4.0.5", replace(drained, channels=[replace(hidden, messages_unacked=300)]))),
                "prefetch-unlimited")
    assert f.severity == "warning" and f.evidence["channel_prefetch"] == (
        "not reported by RabbitMQ 4.0.5: a channel-wide (global) limit may bind unseen (not known)")
    shown = replace(hidden, global_prefetch_count=0)
    [f] = _only(Context(snapshot(queues=[queue(messages_ready=15)], channels=[shown],
                                 consumers=[consumer(prefetch_count=0)])), "prefetch-unlimited")
    assert f.severity == "warning", "where the release shows no channel-wide prefetch is set, it is unlimited"


def test_a_consumer_without_prefetch_holding_many_is_critical_where_the_release_shows_what_binds_it():
    """3.x shows a channel-wide prefetch, 4.3 applies it per consumer (its prefetch shows it): a consumer's 0 is
    what binds, and holding past the threshold is critical. 4.0-4.2 may hide one: critical only past what no
    sane limit allows, and a warning below, with messages ready or not, saying what is not known."""
    def held(release: str, unacked: int, ready: int, global_prefetch: int | None = None) -> list:
        ch = channel(prefetch_count=0, global_prefetch_count=global_prefetch, messages_unacked=unacked)
        s = snapshot(queues=[queue(messages_ready=ready)], channels=[ch], consumers=[consumer(prefetch_count=0)])
        return _only(Context(_on(release, s), thresholds=Thresholds(unlimited_prefetch_unacked_critical=200)),
                     "prefetch-unlimited")
    [f] = held("3.10.8", 300, 0, global_prefetch=0)
    assert f.severity == "critical" and "channel_prefetch" not in f.evidence
    [f] = held("4.3.6", 300, 50)  # 4.x gives no channel-wide prefetch, from either source
    assert f.severity == "critical" and "applied per consumer by RabbitMQ 4.3.6" in f.evidence["channel_prefetch"]
    [f] = held("4.0.5", 300, 50)
    assert f.severity == "critical" and "may bind unseen (not known)" in f.evidence["channel_prefetch"]
    [f] = held("4.0.5", 150, 0)
    assert f.severity == "warning"
    [f] = held("4.3.6", 5, 0)
    assert f.severity == "warning", "no limit hides on 4.3: anything held is held without one"
    [f] = held("4.3.6", 0, 0)
    assert f.severity == "info", "nothing held yet: a latent risk"


def test_mirroring_rules_stay_silent_on_rabbitmq_4_and_say_why():
    skipped = {n.rule: n for n in diagnose(Context(_on("4.0.5", snapshot()))).not_evaluated}
    assert skipped["mirrored-queue-unsynchronised"].why == "classic queue mirroring is removed in RabbitMQ 4.0"
    assert "mirrored-queue-unsynchronised" not in {n.rule for n in diagnose(Context(snapshot())).not_evaluated}
    assert "mirrored-queue-unsynchronised" not in {n.rule for n in diagnose(Context(_on("5.0.0-beta.1",
                                                                                         snapshot()))).findings}


def test_on_4_3_a_lagging_queue_depth_is_no_drop_where_the_nodes_counted_none():
    """A quorum queue's depth is sampled apart from its publish counter: the queue alone may seem to lose
    messages while the nodes' counters say none left at the limit. The counters decide."""
    [loop] = _only(_poison("4.3.6", dropped=0, left=12), "requeue-loop")
    assert loop.evidence["next"] == "loops-forever"
    assert _only(_poison("4.3.6", dropped=0, left=12), "delivery-limit-reached") == []


def _capped_with(*channels_then_now, counted: int = 8, left_of: int = 10):
    """A queue limited to 2 took `left_of` publishes over ten seconds and holds 2; the nodes counted `counted`
    dropped by length; `channels_then_now` publish in its vhost."""
    capped = queue(name="capped", max_length=2, consumers=0, message_stats=stats(publish=0, ack=0))
    capped2 = replace(capped, messages_ready=2, message_stats=stats(publish=left_of, ack=0))
    return Context(snapshot(1010.0, queues=[capped2], channels=[n for _, n in channels_then_now],
                            dead_lettered=_counters(maxlen_dropped=counted)),
                   snapshot(1000.0, queues=[capped], channels=[t for t, _ in channels_then_now],
                            dead_lettered=_counters()))


def test_a_publisher_known_to_publish_elsewhere_is_never_named_for_a_length_limits_drop():
    """Reviewed: the queue's publisher has closed; a healthy channel that published as many into another queue,
    as the broker counts per channel and queue, is no culprit for the drop."""
    elsewhere = channel("ch audit", connection_name="auditor", message_stats=stats(publish=0, confirm=0))
    elsewhere2 = replace(elsewhere, routed_into=("audit",), message_stats=stats(publish=10, confirm=10))
    [f] = _only(_capped_with((elsewhere, elsewhere2)), "messages-dropped")
    assert f.object == "queue capped" and f.connection_name == "" and f.evidence["publishers"] == "not known"


def test_a_length_limit_dropping_what_publishers_without_confirms_sent_is_a_warning_and_counts_its_own():
    """A last-value queue fed without confirms: nobody was told the messages were safe. And of the nodes' 20, only
    the 8 its own counters show leaving it are said to be its."""
    fire = channel("ch fire", connection_name="ticker", confirm=False, message_stats=stats(publish=0))
    fire2 = replace(fire, message_stats=stats(publish=10))
    [f] = _only(_capped_with((fire, fire2), counted=20), "messages-dropped")
    assert f.severity == "warning" and f.connection_name == "ticker" and "use no confirms" in f.explanation
    assert "about 8 messages of capped" in f.explanation and f.evidence["dropped_on_nodes"] == 20
