"""/api/overview, the dashboard's landing page document: what the landing page shows from it is what it would show
from the whole snapshot, for any broker (a property test over generated ones), at a fraction of the bytes."""

from __future__ import annotations

import json

import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st
from snapshot_builders import channel, consumer, queue, snapshot, stats

from ackscope.dashboard import views
from ackscope.exporter.exposition import OVERVIEW_CHANNELS, overview_json, snapshot_json
from ackscope.exporter.status import PollStatus
from ackscope.model.findings import Diagnosis

UP = PollStatus(up=True, last_success_at=1000.0, source="management")


def _documents(now, before):
    """(the whole snapshot and the one before, as /api/snapshot gives them; /api/overview's document)."""
    whole = [json.loads(snapshot_json(s, UP))["snapshot"] if s is not None else None for s in (now, before)]
    return whole, json.loads(overview_json(now, before, Diagnosis(), UP))


# A channel: its prefetch (0: none), channel-wide prefetch, unacked, and whether it has a consumer and acks.
channels_ = st.lists(st.tuples(st.sampled_from([0, 1, 10, 50]), st.sampled_from([0, 0, 20]),
                               st.integers(0, 60), st.booleans(), st.booleans()), max_size=40)
# A queue: its redelivered count now and before (None: not there before), delivered.
queues_ = st.lists(st.tuples(st.integers(0, 5), st.one_of(st.none(), st.integers(0, 5)), st.integers(0, 20)),
                   max_size=30)


def _broker(chans, qs):
    now = snapshot(taken_at=1010.0, channels=[
        channel(f"ch {i}", prefetch_count=p, global_prefetch_count=g, messages_unacked=u, consumer_count=int(c))
        for i, (p, g, u, c, _) in enumerate(chans)], consumers=[
        consumer(f"q{i}", f"ch {i}", prefetch_count=p, ack_required=a)
        for i, (p, _, _, c, a) in enumerate(chans) if c], queues=[
        queue(f"q{i}", message_stats=stats(redeliver=r, deliver_get=d + r)) for i, (r, _, d) in enumerate(qs)])
    before = snapshot(taken_at=1000.0, queues=[
        queue(f"q{i}", message_stats=stats(redeliver=b, deliver_get=d)) for i, (_, b, d) in enumerate(qs)
        if b is not None])
    return now, before


@settings(max_examples=60, deadline=None)
@given(channels_, queues_)
def test_the_landing_page_shows_from_the_overview_what_it_shows_from_the_whole_snapshot(chans, qs):
    now, before = _broker(chans, qs)
    (whole, whole_before), overview = _documents(now, before)
    shown, total = views.prefetch(whole, top=OVERVIEW_CHANNELS)
    cut, cut_total = views.prefetch(overview["snapshot"], top=OVERVIEW_CHANNELS)
    pd.testing.assert_frame_equal(cut, shown)
    assert cut_total == total
    pd.testing.assert_frame_equal(views.redeliveries(overview["snapshot"], overview["previous"], top=10)[0],
                                  views.redeliveries(whole, whole_before, top=10)[0])
    assert views.redeliveries(overview["snapshot"], overview["previous"])[1] == views.redeliveries(whole)[1]


def test_the_overview_holds_the_fullest_channels_and_their_consumers_only_and_no_upgrade_outlooks():
    chans = [(10, 0, n, True, True) for n in range(40)]  # ch 39 is the fullest
    now, before = _broker(chans, [(0, 0, 5)] * 100 + [(2, None, 5)])
    (whole, _), overview = _documents(now, before)
    cut = overview["snapshot"]
    assert [c["name"] for c in cut["channels"]] == [f"ch {n}" for n in range(39, 39 - OVERVIEW_CHANNELS, -1)]
    assert {c["channel"] for c in cut["consumers"]} == {c["name"] for c in cut["channels"]}
    assert cut["consuming_channels"] == 40
    # Only the queue that redelivered; it was not there before, so the snapshot before holds none.
    assert [q["name"] for q in cut["queues"]] == ["q100"] and overview["previous"]["queues"] == []
    assert "upgrades" not in overview and overview["up"] is True and overview["source"] == "management"
    assert len(overview_json(now, before, Diagnosis(), UP)) * 5 < len(snapshot_json(now, UP))


def test_before_the_first_poll_the_overview_says_so_and_holds_no_snapshot():
    overview = json.loads(overview_json(None, None, Diagnosis(), PollStatus(last_error="connection refused")))
    assert overview["snapshot"] is None and overview["up"] is False and overview["last_error"] == "connection refused"
