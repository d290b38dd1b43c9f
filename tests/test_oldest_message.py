"""How long a queue's oldest message has waited: the head message's timestamp where publishers stamp it, else a
lower bound from the queue's own history (pure, over made-up polls); messages-waiting on a queue that has
consumers; the age in no-consumers-backlog's evidence; the family per kept queue."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families
from snapshot_builders import queue, snapshot, stats

from ackscope.diagnosis.rules import Context, evaluate
from ackscope.diagnosis.waiting import MAX_POINTS, Waiting
from ackscope.exporter.cardinality import Limits
from ackscope.exporter.exposition import render
from ackscope.exporter.status import PollStatus
from ackscope.model.findings import INFERRED, STAMPED, Diagnosis


def _poll(t: float, ready: int, delivered: int | None, **kw):
    return snapshot(taken_at=t, queues=[queue("jobs", messages_ready=ready,
                                              message_stats=stats(deliver_get=delivered), **kw)])


def _ages(waiting: Waiting, *polls) -> list:
    return [(o.age_seconds, o.source) if (o := waiting.update(s).get(("/", "jobs"))) else None for s in polls]


def test_the_head_message_s_timestamp_is_its_age_and_comes_before_the_bound():
    waiting = Waiting()
    assert _ages(waiting, _poll(1000.0, 5, 0, head_message_timestamp=400.0)) == [(600.0, STAMPED)]
    assert _ages(waiting, _poll(1060.0, 0, 5, head_message_timestamp=None)) == [None], "an empty queue has no age"


def test_ready_messages_no_delivery_has_reached_are_at_least_as_old_as_the_poll_that_saw_them():
    waiting = Waiting()
    assert _ages(waiting,
                 _poll(0.0, 10, 100),     # ten ready: all delivered once the count reaches 110
                 _poll(60.0, 12, 105),    # five delivered since: some of the ten are still there
                 _poll(120.0, 8, 112),    # twelve: the ten are gone; of those seen at 60 s (up to 117) some remain
                 _poll(180.0, 1, 119),    # 119: the 60 s poll's are gone, the 120 s poll's (up to 120) remain
                 ) == [None, (60.0, INFERRED), (60.0, INFERRED), (60.0, INFERRED)]


def test_messages_that_leave_without_a_delivery_or_a_queue_made_again_start_the_history_again():
    purged = Waiting()
    assert _ages(purged, _poll(0.0, 10, 100), _poll(60.0, 2, 101), _poll(120.0, 2, 101)) == [
        None, None, (60.0, INFERRED)]  # 8 left with one delivery: dropped, purged or expired
    recreated = Waiting()
    assert _ages(recreated, _poll(0.0, 10, 100), _poll(60.0, 10, 3)) == [None, None]


def test_a_queue_whose_deliveries_are_not_counted_gets_no_bound_and_its_history_stays_bounded():
    assert _ages(Waiting(), _poll(0.0, 10, None), _poll(60.0, 10, None)) == [None, None]
    waiting = Waiting()
    ages = _ages(waiting, *(_poll(t * 10.0, 10 + t, 0) for t in range(3 * MAX_POINTS)))
    assert ages[-1] == (10.0 * (3 * MAX_POINTS - 1), INFERRED), "nothing delivered: the first poll's still wait"
    assert len(waiting._histories[("/", "jobs")].points) <= MAX_POINTS


def _context(s, **kw):
    return Context(s, oldest=Waiting().update(s), **kw)


def test_a_consumed_queue_whose_oldest_message_waits_past_the_threshold_is_messages_waiting():
    stuck = _poll(1000.0, 40, 7, head_message_timestamp=400.0, consumers=2)
    (found,) = [f for f in evaluate(_context(stuck)) if f.rule == "messages-waiting"]
    assert found.severity == "warning" and found.object == "queue jobs" and found.evidence["oldest_message_age_s"] == 600
    assert "timestamp property" in found.evidence["age_from"] and "waited 10 min" in found.explanation
    fresh = _poll(1000.0, 40, 7, head_message_timestamp=900.0, consumers=2)
    assert not [f for f in evaluate(_context(fresh)) if f.rule == "messages-waiting"]
    waiting = Waiting()
    waiting.update(_poll(0.0, 40, 7, consumers=1))
    later = _poll(400.0, 45, 9, consumers=1)
    (inferred,) = [f for f in evaluate(Context(later, oldest=waiting.update(later))) if f.rule == "messages-waiting"]
    assert "at least 6 min" in inferred.explanation and inferred.evidence["age_from"].startswith("inferred")


def test_nobody_consuming_is_no_consumers_backlog_which_says_the_age():
    orphan = _poll(1000.0, 150, 0, head_message_timestamp=100.0, consumers=0)
    rules = {f.rule: f for f in evaluate(_context(orphan))}
    assert "messages-waiting" not in rules
    assert rules["no-consumers-backlog"].evidence["oldest_message_age_s"] == 900


def test_the_age_is_a_series_per_kept_queue_with_its_source():
    s = snapshot(taken_at=1000.0, queues=[queue("jobs", messages_ready=5, head_message_timestamp=970.0),
                                          queue("small", messages_ready=1, head_message_timestamp=990.0)])
    oldest = Waiting().update(s)
    status = PollStatus(up=True, last_success_at=1.0, last_attempt_at=1.0)
    text = render(s, status, Limits(max_queues=1), Diagnosis(oldest=tuple(oldest.values()))).metrics_body(False)
    (family,) = [f for f in text_string_to_metric_families(text.decode())
                 if f.name == "ackscope_queue_oldest_message_age_seconds"]
    assert [(x.labels, x.value) for x in family.samples] == [
        ({"vhost": "/", "queue": "jobs", "source": "timestamp"}, 30.0)]  # "small" folds into its vhost's totals
