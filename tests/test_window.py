"""The recent window the rate-like rules judge: which snapshot starts it, and how few are kept."""

from __future__ import annotations

from dataclasses import replace

from snapshot_builders import channel, connection, consumer, queue, snapshot, stats

from ackscope.diagnosis.window import KEPT, Recent
from ackscope.model.snapshot import carried, sharing


def test_the_window_starts_at_the_newest_snapshot_at_least_a_window_old():
    recent = Recent(300)
    assert recent.start(snapshot(0.0)) is None  # the first poll has no window
    starts = [recent.start(snapshot(float(t))).taken_at for t in range(15, 1200, 15)]
    # While the exporter is younger than the window, the window starts at its first poll.
    assert starts[:19] == [0.0] * 19
    # After that, the start trails by the window, known to a tenth of it.
    for now, start in zip(range(15, 1200, 15), starts):
        if now >= 300:
            assert 300 <= now - start <= 300 + 300 / KEPT + 15


def test_a_window_keeps_a_bounded_number_of_snapshots_whatever_the_poll_interval():
    recent = Recent(300)
    for t in range(0, 3000):  # a poll a second for 50 minutes
        recent.start(snapshot(float(t)))
    assert len(recent) <= KEPT + 2


def test_a_window_of_a_few_seconds_gives_the_newest_poll_at_least_so_old():
    """What the persistent count is judged against: Recent over PERSISTENT_COUNT_LAG, polls half a second apart."""
    recent = Recent(5.0)
    found = [recent.start(snapshot(t / 2)) for t in range(0, 40)]
    assert [s.taken_at for s in found[12:]] == [t / 2 - 5.0 for t in range(12, 40)]
    assert len(recent) <= KEPT + 2


def test_a_poll_shares_the_records_that_did_not_change_with_the_one_before():
    before = snapshot(1000.0, queues=(queue("idle"), queue("busy", message_stats=stats(publish=1))))
    now = snapshot(1015.0, queues=(queue("idle"), queue("busy", message_stats=stats(publish=9)), queue("new")))
    shared = sharing(now, before)
    assert shared == now  # the same facts
    assert shared.queues[0] is before.queues[0]  # the unchanged record is held once across the window
    assert shared.queues[1] is now.queues[1] and shared.queues[1].message_stats.publish == 9
    assert shared.queues[2] is now.queues[2]
    assert sharing(now, None) is now


def test_a_channels_nacks_seen_in_two_samples_are_remembered_for_the_window_and_one_samples_gap_is_not():
    from snapshot_builders import channel

    from ackscope.diagnosis.confirm_waits import ConfirmWaits

    def at(t, publish, confirm, unconfirmed=0):
        return snapshot(float(t), channels=[channel(messages_unconfirmed=unconfirmed,
                                                    message_stats=stats(publish=publish, confirm=confirm))])
    waits = ConfirmWaits(30.0)
    waits.update(at(0, 10, 10))
    skewed = waits.update(at(5, 20, 15))  # a gap one sample shows, which the next closes: sampling, not nacks
    assert "ch 1" not in skewed or skewed["ch 1"].nacks_seen_at is None
    assert waits.update(at(10, 30, 30))["ch 1"].nacks_seen_at is None
    waits.update(at(15, 40, 31))
    seen = waits.update(at(20, 50, 31))["ch 1"]  # two samples with a gap, the second larger: nacks
    assert (seen.nacks_seen_at, seen.nacks_grew_at) == (20.0, 20.0)
    for t in range(25, 55, 5):  # idle: the same sample at every poll, remembered for the window
        assert waits.update(at(t, 50, 31))["ch 1"].nacks_seen_at == 20.0
    assert "ch 1" not in waits.update(at(55, 50, 31))  # the window has passed it
    # A publisher that waits for each confirm, caught between the counters' readings at two samples in a row (a
    # gap of one, measured on 3.10): what can be in flight is no refusal.
    waits = ConfirmWaits(30.0)
    for t, publish, confirm in ((0, 10, 10), (5, 20, 19), (10, 30, 29)):
        one = waits.update(at(t, publish, confirm))
    assert "ch 1" not in one or one["ch 1"].nacks_seen_at is None
    # A streaming publisher's larger gaps at two samples, closed at the next: the sample without a gap proves they
    # were confirms in flight, and they are forgotten at once.
    waits = ConfirmWaits(30.0)
    for t, publish, confirm in ((0, 10, 10), (5, 20, 17), (10, 30, 27)):
        jitter = waits.update(at(t, publish, confirm))
    assert jitter["ch 1"].nacks_seen_at == 10.0
    assert waits.update(at(15, 40, 40))["ch 1"].nacks_seen_at is None


def test_a_channel_listed_after_its_connection_went_keeps_the_client_the_poll_before_knew():
    """The management database drops a closed connection's record before its channels': a poll between the two
    lists the channel unattributed, and a rule naming it then (the channel gone at the next poll) would name no
    client."""
    gone = replace(channel("ch 1", client="py-amqp 5.3.1", identity="py-amqp 5.3.1 from 127.0.0.1 as guest",
                           connection_name=""), connection="conn")
    stays = channel("ch 2", connection="other", client="pika 1.3", identity="app")
    before = snapshot(1000.0, connections=[connection("conn"), connection("other")], channels=[gone, stays],
                      consumers=[consumer(channel_name="ch 1", connection_name="", identity=gone.identity)])
    unattributed = replace(gone, client=None, identity="", message_stats=stats(deliver_no_ack=3))
    now = carried(snapshot(1001.0, connections=[connection("other")], channels=[unattributed, stays],
                           consumers=[consumer(channel_name="ch 1", connection_name="", identity="")]), before)
    assert [(ch.client, ch.identity) for ch in now.channels] == [
        ("py-amqp 5.3.1", "py-amqp 5.3.1 from 127.0.0.1 as guest"), ("pika 1.3", "app")]
    assert now.channels[0].message_stats.deliver_no_ack == 3  # this poll's counts, the poll before's client
    assert now.consumers[0].identity == "py-amqp 5.3.1 from 127.0.0.1 as guest"
    # A channel of another connection under the same name (a number reused after a reconnect), or one the poll
    # before did not attribute either, stays unattributed: never a guess.
    elsewhere = replace(unattributed, connection="new")
    assert carried(snapshot(1001.0, channels=[elsewhere]), before).channels[0].identity == ""
    assert carried(snapshot(1002.0, channels=[unattributed]), snapshot(1001.0, channels=[unattributed])
                   ).channels[0].identity == ""
    whole = snapshot(1001.0, connections=[connection("conn")], channels=[gone])
    assert carried(whole, before) is whole
