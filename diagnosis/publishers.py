"""Rules about publishers: confirms, transactions, nacks, unconfirmed backlogs, unroutable messages."""

from __future__ import annotations

from collections.abc import Iterator

from ackscope.core.quantile import histogram_quantile
from ackscope.model.findings import Finding
from ackscope.model.snapshot import CHANNEL_TRANSACTIONAL, CHANNELS, Channel

from .confirm_waits import InFlight, in_flight_bound
from .context import ACKS_GUIDE, RELIABILITY_GUIDE, Context, Rule, few, last_seen, num, rounded
from .stakes import Stakes, judge


def _touching(ch: Channel, **evidence) -> dict:
    """A channel finding's evidence, with the queues and exchanges the channel touched where the source
    says: they name a channel known only by its process id (the Prometheus plugin's)."""
    if ch.queues:
        evidence["queues"] = list(ch.queues)
    if ch.exchanges:
        evidence["exchanges"] = list(ch.exchanges)
    return evidence


def _publishing(ch: Channel) -> bool:
    return num(ch.message_stats.publish) > 0


def publishes_at_stake(ctx: Context, ch: Channel) -> tuple[bool, Stakes, float | None]:
    """Whether a channel's way of publishing matters, with the stakes that decided it and its rate over the
    window: messages into a queue that keeps them matter at any rate; plumbing (a framework's events and replies
    into exclusive or auto-delete queues, one start-up message) does not; where the source cannot tell, a rate
    of publish_rate_at_stake or more does."""
    stakes, rate = judge(ctx, ch), ctx.window_rate(ch, "publish")
    if stakes.at_stake is not None:
        return stakes.at_stake, stakes, rate
    return rate is not None and rate >= ctx.thresholds.publish_rate_at_stake, stakes, rate


def _stakes_said(ctx: Context, stake: bool, stakes: Stakes) -> str:
    if stakes.at_stake is True:
        return f" It is at stake: {stakes.why}."
    if stakes.at_stake is False:
        return f" Nothing is at stake, so this is info: {stakes.why}."
    because = f" ({stakes.evidence['routing']})" if "routing" in stakes.evidence else ""
    return (f" {stakes.why[0].upper()}{stakes.why[1:]}{because}; it publishes "
            + (f"{ctx.thresholds.publish_rate_at_stake:g}/s or more lately, so this is a warning." if stake else
               f"under {ctx.thresholds.publish_rate_at_stake:g}/s lately, so this is info."))


def _without_confirms(ctx: Context, rule: Rule) -> Iterator[Finding]:
    # Where the source cannot tell a transactional channel (the Prometheus plugin alone: it shows a transaction
    # only while one holds uncommitted messages), a channel that publishes and is never confirmed either runs
    # without confirms or in transactions: both are findings, so it is named, and the evidence says which it
    # may be rather than stay silent on the most common delivery mistake.
    untold = CHANNEL_TRANSACTIONAL in ctx.snapshot.unreported
    for ch in ctx.snapshot.channels:
        if _publishing(ch) and ch.confirm is False and (ch.transactional is False or
                                                        untold and ch.transactional is None):
            stake, stakes, rate = publishes_at_stake(ctx, ch)
            maybe = ch.transactional is None
            yield rule.finding("warning" if stake else "info", ch.vhost, f"channel {ch.name}", ch,
                               _touching(ch, published=ch.message_stats.publish, confirm=False,
                                         **({"transactional": "unknown: the source cannot tell; --cli settles it"}
                                            if maybe else {}),
                                         publish_rate=rounded(rate), window_seconds=rounded(ctx.window_seconds),
                                         stakes=stakes.why, **stakes.evidence),
                               f"the channel has published {ch.message_stats.publish} messages without publisher "
                               "confirms: nothing tells it whether the broker took them (at-most-once)."
                               + _stakes_said(ctx, stake, stakes) + (
                                   " It may instead publish in transactions, which the broker's Prometheus plugin "
                                   "does not tell apart (the broker's CLI does: --cli)." if maybe else ""))


def _transactional(ctx: Context, rule: Rule) -> Iterator[Finding]:
    for ch in ctx.snapshot.channels:
        if _publishing(ch) and ch.transactional is True:
            stakes = judge(ctx, ch)
            # A transaction's cost matters where its messages do; a framework's plumbing in transactions is info.
            yield rule.finding("info" if stakes.at_stake is False else "warning", ch.vhost, f"channel {ch.name}",
                               ch, _touching(ch, published=ch.message_stats.publish, transactional=True,
                                             stakes=stakes.why, **stakes.evidence),
                               "the channel publishes in AMQP transactions, which cost a round trip (and on "
                               "slow disks an fsync) per commit: the guide puts them at about 250x slower than "
                               "confirms ('ackscope bench confirms' measures it on this broker)."
                               + (f" Nothing is at stake, so this is info: {stakes.why}." if stakes.at_stake is False
                                  else ""))


def _inferred_nacks(ch) -> int | None:
    s = ch.message_stats
    if ch.confirm is not True or s.publish is None or s.confirm is None or ch.messages_unconfirmed is None:
        return None
    return s.publish - s.confirm - ch.messages_unconfirmed


def _sampled_anew(ch: Channel, before: Channel) -> bool:
    """Whether the broker sampled the channel's confirm counters again since `before`."""
    now, then = ch.message_stats, before.message_stats
    return (now.publish, now.confirm, ch.messages_unconfirmed) != (then.publish, then.confirm,
                                                                   before.messages_unconfirmed)


def _nacked(ctx: Context, rule: Rule) -> Iterator[Finding]:
    for ch in ctx.snapshot.channels:
        nacked = _inferred_nacks(ch)
        seen = ctx.in_flight.get(ch.name) if ctx.in_flight is not None else None
        start, previous = ctx.at_window_start(ch), ctx.previous_channel(ch.name)
        # Beyond what could be confirms in flight between the counters' readings: those are refusals.
        bound = in_flight_bound(seen.peak if seen is not None else 0, ch.messages_unconfirmed,
                                *(c.messages_unconfirmed for c in (start, previous) if c is not None))
        if nacked is None or nacked <= bound:
            continue
        # The broker samples these counters at slightly different moments, so one poll can show a gap that
        # the next closes; nacks are cumulative and stay. Only a gap seen in two samples counts: two polls that
        # read the same sample are one. The earlier sample is the previous poll's, or, where the broker has not
        # sampled the channel since (RabbitMQ 4 refreshes a channel's every 5 s or so, whatever the
        # statistics interval), the window start's.
        # Only nacks of the recent window: a channel nacked once an hour ago is not nacked now. A channel opened
        # within the window had none at its start.
        recent = nacked - (_inferred_nacks(start) or 0 if start is not None else 0)
        if recent <= 0 or ctx.window_seconds is None:
            continue
        earlier = next((c for c in (previous, start) if c is not None and _sampled_anew(ch, c)), None)
        # Once the publisher is idle its counters no longer move and no poll samples it anew: the gap seen in two
        # samples while it published (kept by diagnosis.confirm_waits) holds for the window.
        since = ctx.snapshot.taken_at - ctx.window_seconds
        if not (earlier is not None and (_inferred_nacks(earlier) or 0) > bound
                or seen is not None and seen.nacks_seen_at is not None and seen.nacks_seen_at >= since):
            continue
        s = ch.message_stats
        last = _last_nacked(ctx, ch, previous, seen)
        yield rule.finding("warning", ch.vhost, f"channel {ch.name}", ch,
                           _touching(ch, published=s.publish, confirmed=s.confirm,
                                     unconfirmed=ch.messages_unconfirmed, inferred_nacked=nacked,
                                     nacked_in_window=recent, window_seconds=rounded(ctx.window_seconds),
                                     last_seen=last),
                           f"about {recent} publishes in the last {ctx.window_seconds:.0f}s were neither "
                           "confirmed nor are still awaiting a confirm: "
                           "the broker refused responsibility for them with basic.nack (for example a full "
                           "queue with x-overflow reject-publish); the last of them seen " + last + ". The "
                           "broker has no nack counter; ackscope infers this from publish minus confirm minus "
                           "unconfirmed.")


def _last_nacked(ctx: Context, ch: Channel, previous: Channel | None, seen: InFlight | None) -> str:
    """When the channel's refused publishes last grew, for a person: at this poll, or so long ago."""
    now = ctx.snapshot.taken_at
    if previous is not None and ctx.previous is not None and num(_inferred_nacks(ch)) > num(_inferred_nacks(previous)):
        return f"at this poll (within the last {now - ctx.previous.taken_at:.0f}s)"
    if seen is not None and seen.nacks_grew_at is not None:
        ago = now - seen.nacks_grew_at
        return "at this poll" if ago <= 0 else f"{ago:.0f}s ago"
    return (f"before the last poll (more than {now - ctx.previous.taken_at:.0f}s ago)" if ctx.previous is not None
            else "at this poll")


def _unconfirmed_backlog(ctx: Context, rule: Rule) -> Iterator[Finding]:
    t = ctx.thresholds
    for ch in ctx.snapshot.channels:
        if ch.confirm is not True or ch.messages_unconfirmed is None:
            continue
        before = ctx.previous_channel(ch.name)
        growth = (ch.messages_unconfirmed - num(before.messages_unconfirmed)) if before else 0
        # Growth counts only on top of a backlog the previous poll saw too: a healthy publisher's burst,
        # caught in flight by one poll, is confirmed a few milliseconds later.
        grew = growth >= t.unconfirmed_growth and before is not None and num(before.messages_unconfirmed) > 0
        if ch.messages_unconfirmed >= t.unconfirmed_backlog or grew:
            yield rule.finding("warning", ch.vhost, f"channel {ch.name}", ch,
                               _touching(ch, unconfirmed=ch.messages_unconfirmed, growth=growth),
                               f"{ch.messages_unconfirmed} published messages await their confirm: the broker is "
                               "slow to take responsibility (disk, a blocked queue, a quorum queue without its "
                               "majority), and a crash now would leave the publisher to republish them.")


def _waits_each_confirm(ctx: Context, rule: Rule) -> Iterator[Finding]:
    t = ctx.thresholds
    if ctx.in_flight is None or ctx.window_seconds is None:
        return
    latency = _probe_confirm_p50(ctx)
    for ch in ctx.snapshot.channels:
        seen = ctx.in_flight.get(ch.name)
        if (ch.confirm is not True or seen is None or seen.samples < t.confirm_wait_samples or seen.peak > 1
                or seen.mean < t.confirm_wait_seen):
            continue
        rate = num(ctx.over_window(ch, "publish")) / ctx.window_seconds
        if not rate:
            continue
        # The broker's average unconfirmed count is the share of time the publisher waits for the broker (Little's
        # law); the probes' confirm latency, measured at a client, adds the round trip the broker does not see.
        shares = {"the broker's unconfirmed count, averaged while it published": seen.mean}
        if latency is not None:
            shares["its rate times the probes' median confirm latency"] = min(1.0, rate * latency)
        how, share = max(shares.items(), key=lambda kv: kv[1])
        if share < t.confirm_wait_share:
            continue
        saturated = share >= t.confirm_wait_saturated
        evidence = _touching(ch, publish_rate=rounded(rate), window_seconds=rounded(ctx.window_seconds),
                             unconfirmed_samples=seen.samples, unconfirmed_peak=seen.peak,
                             unconfirmed_mean=round(seen.mean, 3), waiting_share=round(share, 2),
                             waiting_share_from=f"inferred: {how}",
                             one_at_a_time_ceiling=rounded(rate / share))
        if latency is not None:
            evidence["probe_confirm_p50_seconds"] = round(latency, 6)
        measured = _bench_said(ctx)
        if measured:
            evidence["bench"] = measured
        yield rule.finding(
            "warning" if saturated else "info", ch.vhost, f"channel {ch.name}", ch, evidence,
            f"the channel waits for each confirm before its next publish: never more than {seen.peak} unconfirmed in "
            f"{seen.samples} samples taken while it published {rate:.3g}/s, and it waits about {share:.0%} of its "
            "time (inferred: a publisher that streams its confirms but writes no faster than they come back looks "
            "the same to the broker). One message per confirm round trip (and per fsync, for persistent messages) "
            f"is its ceiling, about {rate / share:.3g}/s here"
            + (": it publishes at it, and more demand cannot get through." if saturated else "."),
            rule.remedy + (f" Measured on this broker by 'ackscope bench confirms': {'; '.join(measured)}."
                           if measured else " 'ackscope bench confirms' measures each strategy on this broker."))


def _probe_confirm_p50(ctx: Context) -> float | None:
    """The probes' smallest median confirm latency: the shortest round trip a confirm takes here."""
    found = [histogram_quantile(p.buckets("confirm_latency_seconds"), 0.5) for p in ctx.probes]
    return min((v for v in found if v), default=None)


# The bench's strategies a remedy quotes, by how their names begin: waiting per message, per batch, streaming.
_QUOTED = ("confirm and wait, per message", "publish ", "streaming confirms")


def _bench_said(ctx: Context) -> list[str]:
    """What the bench measured here for waiting per message, per batch and streaming, per queue type."""
    if ctx.confirm_bench is None:
        return []
    said = []
    for queue_type in sorted({r.queue_type for r in ctx.confirm_bench.rates}):
        rates = [f"{r.strategy} {r.rate:,.0f} msg/s" for r in ctx.confirm_bench.rates
                 if r.queue_type == queue_type and r.strategy.startswith(_QUOTED)]
        if rates:
            said.append(f"{queue_type} queue: " + ", ".join(rates))
    return said


def _unroutable(stat: str, what: str):
    def check(ctx: Context, rule: Rule) -> Iterator[Finding]:
        for ch in ctx.snapshot.channels:
            # What happened in the window, not since the channel opened: one message at a client's start-up
            # stays in the lifetime count for the life of the connection.
            count = ctx.over_window(ch, stat)
            if not count:
                continue
            seconds = ctx.window_seconds
            exchange, where = _unroutable_into(ctx, ch)
            severity, why = _unroutable_severity(ctx, ch, count, stat == "return_unroutable")
            evidence = _touching(ch, **{f"{stat}_in_window": count, "window_seconds": rounded(seconds),
                                        "rate": rounded(count / seconds), stat: getattr(ch.message_stats, stat),
                                        "exchange": exchange, "confirm": ch.confirm,
                                        "last_seen": last_seen(ctx, ch, stat)})
            yield rule.finding(severity, ch.vhost, f"channel {ch.name}", ch, evidence,
                               f"in the last {seconds:.0f}s the channel published {count} messages{where} that "
                               f"matched no queue and were {what}, the last {evidence['last_seen']}. {why}")
    return check


def _unroutable_severity(ctx: Context, ch: Channel, count: int, returned: bool) -> tuple[str, str]:
    """Severity follows what is lost. The broker confirms an unroutable message once it has routed it nowhere
    (after returning it, where it was mandatory): a confirm channel is told "ack" for messages no queue holds, and a
    publisher that goes by its confirms has lost them. One message is info: Celery's worker drops one by design at
    start-up (a broadcast nobody is bound to yet); a framework's plumbing (a channel whose other messages reach only
    queues that keep nothing) stays a warning, as does a loss that repeats on a channel without confirms."""
    if count < ctx.thresholds.unroutable_at_stake:
        return "info", (f"Fewer than {ctx.thresholds.unroutable_at_stake} are info (a framework's start-up broadcast "
                        "nobody is bound to yet).")
    if ch.confirm is not True:
        return "warning", "The channel does not use confirms: nothing told the publisher."
    stakes = judge(ctx, ch)
    # Its other publishes reached queues, and only queues that keep nothing (stakes.py says where none was reached).
    if stakes.at_stake is False and num(ctx.over_window(ch, "publish")) > count \
            and stakes.reached_queues:
        return "warning", f"Its other messages are plumbing ({stakes.why}), so this is a warning."
    return "critical", ("The channel is in confirm mode: the broker acked each of these messages after routing it "
                        "nowhere" + (" and returning it" if returned else "") + ", so a publisher that goes by its "
                        "confirms" + (" and ignores basic.return" if returned else "") + " counts them delivered: "
                        "no queue holds them.")


def _unroutable_into(ctx: Context, ch: Channel) -> tuple[str, str]:
    """The exchange a channel's unroutable messages went to, for the evidence and for a sentence: the one
    exchange the source counts it publishing to; else, inferred, the one exchange of its vhost that took publishes
    over the window, where it has no binding and took exactly as many as the channels that may have published to it
    counted unroutable (every message into an exchange with no binding is unroutable, so it accounts for all of
    theirs; a bound exchange or the default one may route some messages nowhere too, and then nothing is named);
    else not known, and why."""
    def said(name: str) -> str:
        return f"exchange '{name}'" if name else "the default exchange (a routing key naming no queue)"
    if len(ch.exchanges) == 1:
        return said(ch.exchanges[0]), f" to {said(ch.exchanges[0])}"
    if ch.exchanges:
        return f"one of {few(said(x) for x in ch.exchanges)}", f" to one of {few(said(x) for x in ch.exchanges)}"
    took = [x for x in ctx.snapshot.exchanges if x.vhost == ch.vhost and ctx.over_window(x, "publish")]
    unbound = [x for x in took if x.name and not x.bindings]
    # Any other exchange that took messages (the default one, a bound one, an alternate exchange routing what an
    # unbound one passes it) may have routed some nowhere too, or be where the unbound one's messages went.
    if len(unbound) != 1 or len(took) != 1:
        return ("not known: the source does not say which exchange the channel published to", "")
    # Every message into it came from a channel of the vhost that may have published to it.
    unroutable = sum(num(ctx.over_window(c, stat)) for c in ctx.snapshot.channels
                     if c.vhost == ch.vhost and (not c.exchanges or unbound[0].name in c.exchanges)
                     for stat in ("return_unroutable", "drop_unroutable"))
    if ctx.over_window(unbound[0], "publish") == unroutable:
        return (f"{said(unbound[0].name)} (inferred: it has no binding and took as many messages in the window as "
                "the channels that may have published to it had unroutable)", f" to {said(unbound[0].name)} (inferred)")
    return ("not known: the source does not say which exchange the channel published to", "")


RULES: tuple[Rule, ...] = (
    Rule("publisher-without-confirms", "A channel publishing without confirms and not transactional: "
         "at-most-once. A warning when its messages go into a queue that keeps them across a restart (durable, "
         "neither exclusive nor auto-delete, not holding transient messages), at any rate over the window; info "
         "for plumbing (queues that keep nothing, one message, nothing lately); where the source cannot tell where "
         "it publishes, info under publish_rate_at_stake. Where the source cannot tell a transactional channel "
         "(the Prometheus plugin alone), a channel never confirmed is named all the same, its evidence saying it "
         "may be transactional.",
         f"Enable publisher confirms and handle them asynchronously; see {ACKS_GUIDE}, "
         "'Publisher Confirms'.",
         _without_confirms, needs=(CHANNELS,)),
    Rule("transactional-publisher", "A transactional channel publishing; info when nothing it publishes is at "
         "stake (as publisher-without-confirms judges it).", "Use publisher confirms instead of "
         f"transactions; see {ACKS_GUIDE}, 'Publisher Confirms'.",
         _transactional, needs=(CHANNELS, CHANNEL_TRANSACTIONAL)),
    Rule("publisher-nacked", "A confirm-mode channel whose publishes minus confirms minus unconfirmed grew "
         "over the window: the broker refused responsibility (inferred: the broker has no nack counter).",
         "Handle basic.nack by republishing or reporting; check queue length limits with x-overflow "
         f"reject-publish; see {ACKS_GUIDE}, 'Negative Acknowledgments for Publishes'.", _nacked,
         needs=(CHANNELS,)),
    Rule("unconfirmed-backlog", "A channel whose unconfirmed messages are many or growing.",
         "Check the disk, alarms and quorum queue health; bound the publisher's in-flight window; see "
         f"{ACKS_GUIDE}, 'Publisher Confirms and Guaranteed Delivery'.", _unconfirmed_backlog,
         needs=(CHANNELS,)),
    Rule("publisher-waits-each-confirm", "A confirm channel never seen with more than one publish unconfirmed "
         "(in confirm_wait_samples or more samples taken while it published over the window), and seen with one in "
         "confirm_wait_seen of them at least, that waits for its "
         "confirms confirm_wait_share of its time or more (inferred: the broker's unconfirmed count averaged, or its "
         "rate times the probes' median confirm latency): it publishes one message per confirm round trip. Info; "
         "a warning from confirm_wait_saturated, where it publishes at that ceiling.",
         "Publish a batch, then wait for its confirms, or stream them: keep a bounded number of publishes "
         "unconfirmed and handle confirms as they come (the Java client's ConfirmListener, pika's "
         "SelectConnection, aio-pika's publishes awaited together); see the 'Publisher Confirms' tutorial and "
         f"{ACKS_GUIDE}.", _waits_each_confirm, needs=(CHANNELS,)),
    Rule("unroutable-dropped", "A channel whose messages matched no queue and were dropped silently, over the "
         "window, naming the exchange where the source tells; info for fewer than unroutable_at_stake; critical "
         "on a confirm channel (the broker acked messages no queue holds) unless its other messages are plumbing.",
         "Bind a queue for every routing key in use, publish with mandatory to get them back, or set an "
         f"alternate exchange; see {RELIABILITY_GUIDE}, 'Unroutable Messages'.",
         _unroutable("drop_unroutable", "dropped silently"), needs=(CHANNELS,)),
    Rule("unroutable-returned", "A channel whose mandatory messages matched no queue and were returned, over the "
         "window, naming the exchange where the source tells; info for fewer than unroutable_at_stake; critical "
         "on a confirm channel (the broker acked each after returning it: a client that ignores returns lost "
         "them) unless its other messages are plumbing.",
         "Check bindings and routing keys; make sure the publisher handles basic.return; see "
         f"{RELIABILITY_GUIDE}, 'Unroutable Messages'.", _unroutable("return_unroutable", "returned"),
         needs=(CHANNELS,)),
)
