"""The probes' pure bookkeeping: confirm tracking, the delivery audit, message bodies, target settings."""

from __future__ import annotations

import pytest

from ackscope.probes.audit import DeliveryAudit
from ackscope.probes.confirms import ConfirmTracker
from ackscope.probes.message import ProbeMessage
from ackscope.probes.targets import DEFAULT_TARGETS, REJECT_PUBLISH, Target, targets_from_config

MS = 1_000_000


def test_multiple_ack_settles_every_tag_up_to_it_as_one_batch():
    tracker = ConfirmTracker()
    tags = [tracker.published(seq, seq * MS) for seq in range(1, 6)]
    assert tags == [1, 2, 3, 4, 5]
    settled = tracker.settle(4, multiple=True, now_ns=10 * MS)
    assert [s.seq for s in settled] == [1, 2, 3, 4]
    assert [round(s.latency_s, 3) for s in settled] == [0.009, 0.008, 0.007, 0.006]
    assert len(tracker) == 1


def test_single_ack_settles_only_its_tag_even_out_of_order():
    tracker = ConfirmTracker()
    for seq in (10, 11, 12):
        tracker.published(seq, 0)
    assert [s.seq for s in tracker.settle(2, multiple=False, now_ns=MS)] == [11]
    assert tracker.settle(2, multiple=False, now_ns=MS) == []  # an answer for a tag already settled
    assert [s.seq for s in tracker.settle(3, multiple=True, now_ns=MS)] == [10, 12]


def test_unanswered_publishes_expire_as_timeouts_oldest_first():
    tracker = ConfirmTracker()
    tracker.published(1, 0)
    tracker.published(2, 5 * MS)
    assert [e.seq for e in tracker.expire(now_ns=30 * MS, timeout_ns=30 * MS)] == [1]
    assert len(tracker) == 1


def test_drain_hands_back_the_unconfirmed_and_restarts_the_broker_numbering():
    tracker = ConfirmTracker()
    for seq in (7, 8, 9):
        tracker.published(seq, 0)
    tracker.settle(1, multiple=False, now_ns=MS)
    assert [e.seq for e in tracker.drain()] == [8, 9]
    assert tracker.published(8, 0) == 1  # a new channel counts from 1 again


def test_confirmed_message_not_delivered_by_the_deadline_is_lost_once():
    audit = DeliveryAudit(loss_deadline_ns=100 * MS)
    audit.confirmed(1, now_ns=0)
    audit.confirmed(2, now_ns=0)
    audit.delivered(2, now_ns=10 * MS)
    assert audit.expire(now_ns=99 * MS) == []
    assert audit.expire(now_ns=100 * MS) == [(1, 0)]
    assert audit.expire(now_ns=200 * MS) == []


def test_delivery_that_overtakes_its_confirm_is_not_lost():
    audit = DeliveryAudit(loss_deadline_ns=100 * MS)
    assert audit.delivered(5, now_ns=1) is False
    audit.confirmed(5, now_ns=2)
    assert audit.awaiting == 0
    assert audit.expire(now_ns=500 * MS) == []


def test_second_delivery_of_a_sequence_number_is_a_duplicate():
    audit = DeliveryAudit(loss_deadline_ns=100 * MS)
    audit.confirmed(3, 0)
    assert audit.delivered(3, MS) is False
    assert audit.delivered(3, 2 * MS) is True


def test_redelivery_of_a_message_the_probe_requeued_is_not_a_duplicate():
    audit = DeliveryAudit(loss_deadline_ns=100 * MS)
    audit.confirmed(4, 0)
    assert audit.delivered(4, MS, requeue=True) is False
    assert audit.awaiting == 1  # requeued: it must still come back
    assert audit.delivered(4, 2 * MS) is False
    assert audit.awaiting == 0
    assert audit.delivered(4, 3 * MS) is True


def test_requeued_message_that_never_comes_back_is_lost():
    audit = DeliveryAudit(loss_deadline_ns=100 * MS)
    audit.confirmed(6, 0)
    audit.delivered(6, MS, requeue=True)
    assert audit.expire(now_ns=100 * MS) == [(6, 0)]


def test_audit_forgets_old_sequence_numbers_so_memory_stays_bounded():
    audit = DeliveryAudit(loss_deadline_ns=10 * MS, retention_ns=20 * MS)
    for seq in range(1000):
        audit.confirmed(seq, seq * MS)
        audit.delivered(seq, seq * MS)
        audit.expire(seq * MS)
    assert len(audit._delivered) <= 22


def test_message_body_round_trips_and_pads_to_its_size():
    msg = ProbeMessage("run1", "quorum", 42, 123456789)
    body = msg.encode(size=256)
    assert len(body) == 256
    assert ProbeMessage.decode(body) == msg
    assert ProbeMessage.decode(b"not json") is None
    assert ProbeMessage.decode(b'{"run": "x"}') is None


def test_default_targets_are_classic_persistent_classic_transient_and_quorum():
    targets = targets_from_config(None, {}, reject_publish=False)
    assert targets == DEFAULT_TARGETS
    assert [(t.queue_type, t.persistent) for t in targets] == [("classic", True), ("classic", False), ("quorum", True)]
    assert all(t.queue.startswith("ackscope.probe.") for t in targets)


def test_every_probe_queue_is_bounded_and_expires():
    for t in (*DEFAULT_TARGETS, REJECT_PUBLISH):
        args = t.arguments()
        assert args["x-expires"] > 0 and args["x-max-length"] > 0
    assert REJECT_PUBLISH.arguments()["x-overflow"] == "reject-publish"
    stream = Target("s", "stream").validate()
    assert "x-max-length-bytes" in stream.arguments() and stream.requeue_share == 0


def test_toml_targets_take_shared_settings_unless_they_set_their_own():
    rows = [{"name": "fast", "rate": 50}, {"name": "events", "queue_type": "stream"}]
    targets = targets_from_config(rows, {"rate": 2.0, "prefetch": 7, "burst_size": None}, reject_publish=True)
    assert [(t.name, t.rate, t.prefetch) for t in targets] == [("fast", 50, 7), ("events", 2.0, 7),
                                                                ("reject-publish", 5.0, 1)]


@pytest.mark.parametrize("rows, message", [
    ([{"name": "Bad Name"}], "target name"),
    ([{"name": "x", "queue_type": "lazy"}], "queue_type"),
    ([{"name": "x", "rate": 100000}], "rate"),
    ([{"name": "x", "colour": "red"}], "unknown setting 'colour'"),
    ([{"name": "x"}, {"name": "x"}], "unique"),
    ([{"rate": 1}], "needs a name"),
])
def test_bad_target_settings_are_refused_with_the_reason(rows, message):
    with pytest.raises(ValueError, match=message):
        targets_from_config(rows, {}, reject_publish=False)


def test_a_publish_confirm_clock_restarts_when_its_frame_leaves():
    tracker = ConfirmTracker()
    tag = tracker.published(1, 0)
    tracker.sent(tag, 3 * MS)  # made at 0, written at 3 ms
    [settled] = tracker.settle(tag, False, 5 * MS)
    assert settled.latency_s == pytest.approx(0.002)
    tracker.sent(tag, 9 * MS)  # settled already: nothing to restart
    assert len(tracker) == 0


def test_order_is_judged_per_consumer_and_a_redelivery_or_a_republished_message_never_breaks_it():
    audit = DeliveryAudit(loss_deadline_ns=100 * MS)
    assert [audit.in_order("a", seq, False) for seq in (1, 2, 4)] == [True, True, True]
    assert audit.in_order("a", 3, False) is False  # a first delivery after a message published later
    assert audit.in_order("a", 2, True) is False  # a redelivery so: expected, counted apart by the caller
    assert audit.in_order("b", 3, False) is True  # another consumer has its own mark
    audit.published_again(9, 0)
    assert audit.in_order("a", 9, False) is True and audit.in_order("a", 5, False) is True  # 9 raised nothing
    audit.consumer_gone("a")
    assert audit.in_order("a", 1, False) is True  # a new consumer under the same name starts again
    assert audit.in_order("a", 1, False) is True  # the same message twice is a duplicate, not out of order
