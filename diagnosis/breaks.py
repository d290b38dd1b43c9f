"""Rules about where deliveries break: a consumer that stalls and the timeout that will end it, consumers the
broker timed out or cancelled, channels and connections it closed on an error or for missed heartbeats, connections
that churn. Each such break sends the unacked messages of its channel back to their queue, to be delivered again.
And the messages the broker's log says it dropped (a dead-letter cycle)."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass

from ackscope.model.events import (BROKER_LOG, CHANNEL_ERROR, CONNECTION_CLOSED, CONNECTION_ERROR, CONNECTION_OPENED,
                                   CONSUMER_TIMEOUT, DEAD_LETTER_CYCLE, EVENT_EXCHANGE, EVENTS, INEQUIVALENT_ARGUMENTS,
                                   MESSAGE_DROPPED, UNKNOWN_DELIVERY_TAG, BrokerEvent, cause)
from ackscope.model.findings import Finding
from ackscope.model.snapshot import CHANNELS, CONNECTIONS, STATISTICS_INTERVAL, Consumer, Queue

from .context import ACKS_GUIDE, Context, Named, Rule, few, num, rounded
from .holding import link_key, stranded
from .links import link_culprit, link_object

CONSUMERS_GUIDE = "RabbitMQ guide 'Consumers', 'Delivery Acknowledgement Timeout'"
DEFAULT_TIMEOUT_MS = 1_800_000  # RabbitMQ's consumer_timeout when nothing sets another: 30 minutes
UNDEFINED_TIMEOUT_MS = 86_400_000  # 4.3's quorum queues, where consumer_timeout is no number (rabbit_queue_type)
MISSED_HEARTBEATS = "missed_heartbeats"  # the cause of a connection the broker closed for missed heartbeats
DLX_GUIDE = "RabbitMQ guide 'Dead Letter Exchanges', 'Dead-Lettered Messages and Cycles'"


# -- the timeout in force, and what it will do ------------------------------------------------------------------
@dataclass(frozen=True)
class Timeout:
    ms: int | None  # None: no timeout applies (RabbitMQ 4.3's classic queues and streams)
    source: str  # where the figure came from, for the evidence
    next: str  # what the broker does at the timeout, on this release and queue type
    known: bool = True  # False where the figure is RabbitMQ's default, inferred because the broker did not say


def timeout_in_force(ctx: Context, consumer: Consumer, q: Queue | None) -> Timeout:
    """The consumer timeout that applies to `consumer`, where that figure came from, and what the broker does
    when it passes: the consumer's own figure (/api/consumers, 4.x), else its queue's argument or policy (3.12+),
    else the node's consumer_timeout (--cli), else the last timeout the node's log shows it applied, else
    RabbitMQ's default (an inference)."""
    release = ctx.release
    if release is not None and release >= (4, 3) and (q is None or not q.type):
        nxt = ("it depends on the queue's type, which the source does not say: a quorum queue's consumer is "
               "cancelled at the timeout and its messages returned; a classic queue's is never timed out")
    elif release is not None and release >= (4, 3):
        if q.type != "quorum":
            return Timeout(None, f"RabbitMQ {release[0]}.{release[1]} evaluates consumer timeouts for quorum queues "
                           "only (release notes 4.3.0)",
                           f"nothing: no timeout applies to a {q.type} queue from RabbitMQ 4.3, so "
                           "the deliveries stay held until the consumer acks them or its connection closes")
        nxt = ("the broker returns each delivery held past it to the queue (each times out on its own, from when it "
               "was delivered) and cancels the consumer: a basic.cancel the "
               "client sees only if it declared the consumer_cancel_notify capability, else its channel is closed; "
               "RabbitMQ 4.3 logs nothing of it")
    else:
        nxt = ("the broker closes the channel (PRECONDITION_FAILED, 'delivery acknowledgement timed out') and every "
               "unacked message on it is requeued and delivered again, to this consumer or another" +
               ("; RabbitMQ 3.x checks about once a minute, so the close comes up to a minute after the timeout"
                if release is not None and release < (4, 0) else ""))
    if consumer.consumer_timeout_ms:
        return Timeout(consumer.consumer_timeout_ms, "the broker's own figure for this consumer (/api/consumers)", nxt)
    if q is not None and q.consumer_timeout_ms and (release is None or release >= (3, 12)):
        return Timeout(q.consumer_timeout_ms, "the queue's x-consumer-timeout argument or consumer-timeout policy",
                       nxt)
    settings = ctx.snapshot.settings
    if settings is not None:
        where = f"node {settings.node}'s consumer_timeout (rabbitmq.conf, read with --cli)"
        if settings.consumer_timeout_ms is not None:
            return Timeout(settings.consumer_timeout_ms, where, nxt)
        if release is not None and release >= (4, 3):
            return Timeout(UNDEFINED_TIMEOUT_MS, f"{where}: undefined, which RabbitMQ 4.3 takes for 24 hours", nxt)
        return Timeout(None, f"{where}: undefined", "nothing: the node times out no consumer, so the deliveries "
                       "stay held until the consumer acks them or its connection closes")
    logged = [e.timeout_ms for e in _events(ctx, CONSUMER_TIMEOUT) if e.timeout_ms]
    if logged:
        return Timeout(logged[-1], "the broker's log: the timeout it applied last ('Timeout value used')", nxt)
    return Timeout(DEFAULT_TIMEOUT_MS, "inferred: RabbitMQ's default of 30 minutes; this broker does not say which "
                   "applies (rabbitmq.conf consumer_timeout: give --cli to read it)", nxt, known=False)


# -- a consumer that stalls -------------------------------------------------------------------------------------
def stalled(ctx: Context) -> dict[str, float]:
    """Channel name -> seconds it has held deliveries to its manual-ack consumers and settled none (at least):
    for those held past thresholds.stalled_consumer_seconds, or past half the consumer timeout in force where the
    broker says which applies and half of it is sooner (a consumer that long without an ack is at risk of the
    timeout, however short the timeout is)."""
    def compute() -> dict[str, float]:
        if ctx.held is None:
            return {}
        now = ctx.snapshot.taken_at
        # A channel whose consumer the broker dropped is consumer-cancelled-by-broker's, not a stall any more.
        dropped = {channel for channel, _ in ctx.held.gone}
        found = {}
        for name, since in ctx.held.since.items():
            manual = [c for c in ctx.consumers_on(name) if c.ack_required]
            if name in dropped or not manual or now - since < _stall_after(ctx, manual[0]):
                continue
            found[name] = now - since
        return found
    return ctx.once("stalled", compute)


def _stall_after(ctx: Context, consumer: Consumer) -> float:
    """Seconds without an ack after which a consumer holding deliveries is stalled: the floor, or half the timeout
    in force where the broker said which applies and that is sooner, but never less than STATISTICS_INTERVAL (two
    polls closer than that may read the same counters)."""
    floor = ctx.thresholds.stalled_consumer_seconds
    timeout = timeout_in_force(ctx, consumer, ctx.queue(consumer.vhost, consumer.queue))
    return min(floor, max(STATISTICS_INTERVAL, timeout.ms / 2000)) if timeout.known and timeout.ms else floor


def stuck(ctx: Context) -> set[str]:
    """The channels whose consumers hold deliveries they do not settle: stalled, or dropped by their queue while
    the channel still claims the deliveries (4.3). Neither is a slow consumer."""
    return set(stalled(ctx)) | ({channel for channel, _ in ctx.held.gone} if ctx.held is not None else set())


def _stalled(ctx: Context, rule: Rule) -> Iterator[Finding]:
    for name, held_for in sorted(stalled(ctx).items()):
        ch = ctx.channel(name)
        consumers = [c for c in ctx.consumers_on(name) if c.ack_required]
        if ch is None or not consumers:
            continue
        first = consumers[0]
        q = ctx.queue(first.vhost, first.queue)
        timeout = timeout_in_force(ctx, first, q)
        unacked = num(ch.messages_unacked)
        evidence = {"queue": first.queue, "queue_type": q.type if q is not None else None,
                    "consumer_tag": first.consumer_tag, "unacked": unacked, "prefetch_limit": ch.prefetch_limit,
                    "held_for_at_least_seconds": round(held_for), "acks_since": 0,
                    "timeout_ms": timeout.ms, "timeout_source": timeout.source, "next": timeout.next,
                    "rabbitmq": ctx.snapshot.overview.rabbitmq_version}
        if timeout.ms is None:
            severity, when = "warning", ""
        else:
            left = timeout.ms / 1000 - held_for
            evidence["timeout_in_at_most_seconds"] = max(0, round(left))
            severity = "warning" if held_for >= timeout.ms / 2000 else "info"
            when = (f" The timeout in force is {timeout.ms / 1000:g} s ({timeout.source}): at most "
                    f"{max(0, left):.0f} s from now, {timeout.next}." if left > 0 else
                    f" The timeout in force ({timeout.ms / 1000:g} s, {timeout.source}) has passed: {timeout.next}.")
        yield rule.finding(
            severity, ch.vhost, f"channel {ch.name}", ch, evidence,
            f"consumer {first.consumer_tag} on {first.queue} holds {unacked} unacked deliveries and has acked none "
            f"for at least {held_for:.0f} s: it is stalled, not slow (a slow consumer acks, late). " +
            (f"Then {timeout.next}." if timeout.ms is None else when.strip()),
            None if timeout.ms is not None else
            "Find why the consumer stopped acking (a hung callback, a deadlock, an exception swallowed before the "
            "ack); then restart it: its deliveries go back to the queue when its channel closes. Set a consumer "
            "timeout on a quorum queue if the broker should take them back by itself.")


# -- timeouts and cancels that happened ----------------------------------------------------------------------------
def _events(ctx: Context, *kinds: str) -> list[BrokerEvent]:
    return [e for e in ctx.breaks.events if e.kind in kinds] if ctx.breaks is not None else []


def _who(e: BrokerEvent) -> Named:
    """The client an event names: its connection's own name, its library, or, without either, its peer."""
    peer = (e.connection or "").split(" -> ")[0].rsplit(":", 1)[0]
    as_user = f" as {e.user}" if e.user else ""  # a login refused names no user
    identity = e.connection_name or (f"{e.client} from {peer}" if e.client else
                                     f"unnamed client from {peer}{as_user}" if peer else "unknown client")
    return Named(e.connection_name or "", e.client or "", identity)


def _returned(ctx: Context, e: BrokerEvent) -> int | None:
    """What the closed channel held at the last poll before its close: the messages its close returned to their
    queues (an inference: deliveries after that poll are not counted)."""
    if e.connection is None or e.channel is None:
        return None
    name = f"{e.connection} ({e.channel})"  # the management API's name for the channel
    for s, ch in ((ctx.previous, ctx.previous_channel(name)), (ctx.window_start, ctx.channel_at_window_start(name))):
        if s is not None and s.taken_at <= e.at and ch is not None:
            return ch.messages_unacked
    return None


def _timed_out(ctx: Context, rule: Rule) -> Iterator[Finding]:
    groups: dict[tuple, list[BrokerEvent]] = defaultdict(list)
    for e in _events(ctx, CONSUMER_TIMEOUT):
        if e.link is None:  # an AMQP 1.0 link's release closes no channel: _released says it
            groups[(e.vhost or "", _who(e).identity, e.queue or "")].append(e)
    for (vhost, identity, queue), events in sorted(groups.items()):
        last = events[-1]
        returned = [n for e in events if (n := _returned(ctx, e)) is not None]
        evidence = {"timeouts": len(events), "queue": queue or "not named by this release's log",
                    "timeout_ms": last.timeout_ms, "consumer_tag": last.consumer_tag,
                    "delivery_tag": last.delivery_tag, "window_seconds": rounded(ctx.thresholds.window_seconds),
                    "source": BROKER_LOG, "broker_said": last.text}
        if returned:
            evidence["messages_returned_at_least"] = sum(returned)
            evidence["messages_returned_inferred_from"] = "each closed channel's unacked at the poll before its close"
        yield rule.finding(
            "warning", vhost, f"channel {last.connection} ({last.channel})", _who(last), evidence,
            f"the broker closed {len(events)} channel(s) of {identity} because a consumer held a delivery past the "
            f"consumer timeout ({num(last.timeout_ms) / 1000:g} s){' on ' + queue if queue else ''}: every unacked "
            "message on the channel went back to the queue and is delivered again (a duplicate for whoever "
            "processes it), and the client must open a channel and subscribe again.")


def _cancelled(ctx: Context, rule: Rule) -> Iterator[Finding]:
    yield from _released(ctx, rule)
    if ctx.held is None:
        return
    for (channel, queue), gone in sorted(ctx.held.gone.items()):
        q = ctx.queue(gone.vhost, queue)
        ch = ctx.channel(channel)
        # Held long enough to be stalled: a consumer that just subscribed may be listed before its queue counts it.
        # How long, by its channel's holding now where it still holds: the poll that saw the consumer go may have
        # seen its channel's counters move a moment before (measured under load on 4.3.6).
        still = ctx.held.since.get(channel)
        held_for = max(gone.last_seen - gone.held_since, ctx.snapshot.taken_at - still if still is not None else 0)
        if q is None or q.type != "quorum" or ch is None or held_for < ctx.thresholds.stalled_consumer_seconds:
            continue
        nobody = num(q.consumers) == 0
        evidence = {"queue": queue, "consumer_tag": gone.consumer_tag, "unacked_when_last_seen": gone.unacked,
                    "held_for_at_least_seconds": round(held_for),
                    "ready": q.messages_ready, "consumers": q.consumers, "channel_open": True,
                    "inferred": "RabbitMQ 4.3 cancels a quorum queue's consumer past its timeout without logging "
                                "it: a consumer last seen holding deliveries, gone while its channel stays open (or "
                                "still listed on its channel while its queue counts no consumer)",
                    "source": "polls"}
        yield rule.finding(
            "critical" if nobody and num(q.messages_ready) > 0 else "warning", gone.vhost, f"channel {channel}", ch,
            evidence,
            f"consumer {gone.consumer_tag} on quorum queue {queue} held {gone.unacked} deliveries without acking "
            "and is gone while its channel stays open: RabbitMQ 4.3 cancelled it at the consumer timeout (an "
            "inference: the broker logs nothing) and returned its messages to the queue. The client's callback "
            "will not run again unless it handles basic.cancel and subscribes again." + (
                f" Nobody consumes from {queue} now: its {num(q.messages_ready)} ready messages wait until someone "
                "acts." if nobody else ""))


def _released(ctx: Context, rule: Rule) -> Iterator[Finding]:
    """AMQP 1.0 receivers past a quorum queue's consumer timeout (4.3): the queue took their deliveries back as
    ready and counts no consumer, while the link stays attached and still holds them unsettled (measured on 4.3.6:
    300 unsettled on the link, 300 ready and 0 consumers on the queue, nothing delivered again). Seen so for
    stalled_consumer_seconds at least (a queue's statistics lag a new link's by seconds); known, not inferred, where
    the broker's log says it released that link's deliveries from that queue (a warning, the first time for each
    link; the wait stands: a link of the same name attached again since would match the line too). A release the
    log tells of on a link no poll shows stranded (detached since, or not listed) is said from the log alone."""
    logged = {(e.vhost, e.connection, e.link): e for e in _events(ctx, CONSUMER_TIMEOUT) if e.link is not None}
    for link in ctx.snapshot.links if ctx.held is not None else ():
        said = logged.get((link.vhost, link.connection, link.name))
        if said is not None and said.queue != link.queue:
            said = None  # the name attached again, to another queue: the line is about the link that was
        since = ctx.held.stranded.get(link_key(link))
        if since is not None and said is not None:
            del logged[(link.vhost, link.connection, link.name)]  # said with the link once it has waited
        if since is None or ctx.snapshot.taken_at - since < ctx.thresholds.stalled_consumer_seconds:
            continue
        q = ctx.queue(link.vhost, link.queue or "")
        held = stranded(link, q)
        if not held:
            continue
        ready = num(q.messages_ready)
        known = "the broker's log says so" if said is not None else "an inference from the polls"
        evidence = {"queue": q.name, "link_unsettled": held, "ready": q.messages_ready,
                    "queue_consumers": q.consumers,
                    "seen_so_for_at_least_seconds": round(ctx.snapshot.taken_at - since),
                    "protocol": "AMQP 1.0"}
        if said is not None:
            evidence.update(source=f"{BROKER_LOG} and polls", broker_said=said.text)
        else:
            evidence.update(source="polls", inferred="RabbitMQ 4.3 releases an AMQP 1.0 receiver's deliveries at a "
                            "quorum queue's consumer timeout: the queue counts no consumer while the link holds them")
        yield rule.finding(
            "critical" if ready > 0 else "warning", link.vhost, link_object(link), link_culprit(link), evidence,
            f"AMQP 1.0 receiver '{link.name}' holds {held} deliveries it never settled, and quorum queue {q.name} took "
            f"them back at its consumer timeout ({known}): "
            f"the queue counts no consumer and {ready} messages wait, while the link stays attached and receives "
            "nothing. Settling those deliveries now does nothing; the receiver must detach and attach again.",
            _RELEASED_REMEDY)
    for (vhost, connection, name), e in sorted(logged.items()):
        yield rule.finding(
            "warning", vhost or "", f"link '{name}' of connection {connection}", _who(e),
            {"queue": e.queue, "protocol": "AMQP 1.0", "source": BROKER_LOG, "broker_said": e.text},
            f"the broker released the deliveries AMQP 1.0 receiver '{name}' held unsettled back to quorum queue "
            f"{e.queue} at its consumer timeout (its log says so; no poll has shown the link stranded with them "
            "beside a queue that counts no consumer, for stalled_consumer_seconds): they go "
            "to the queue's next consumer, a second delivery for whoever processes them, and a link still attached "
            "receives nothing more until it detaches and attaches again.",
            _RELEASED_REMEDY)


_RELEASED_REMEDY = ("Restart the receiver (detach and attach its link), then make it settle each delivery within the "
                    "consumer timeout, or raise the queue's x-consumer-timeout; see the RabbitMQ 4.3 release notes on "
                    "quorum queue consumer timeouts.")


# -- channels and connections closed on an error -------------------------------------------------------------------
_REMEDIES = {
    UNKNOWN_DELIVERY_TAG: "Ack each delivery once, on the channel that received it, and never after a reconnect "
    "(delivery tags are per channel and start again at 1): look for a double ack (an ack in a finally block and "
    f"another in the handler), an ack of a message received on another channel, or an ack after recovery; see "
    f"{ACKS_GUIDE}, 'Acknowledging Multiple Deliveries at Once' and 'Delivery Tags'.",
    INEQUIVALENT_ARGUMENTS: "Declare the queue or exchange with the arguments it already has (a client and a "
    "policy that disagree, or two services declaring it differently); move such settings to a policy, which can "
    "change without a redeclare.",
    "not_found": "Declare the queue or exchange before using it, or wait for whoever owns it; an exclusive or "
    "auto-delete queue vanishes with its connection.",
    "access_refused": "Give the user the permission it lacks (rabbitmqctl set_permissions), or keep out of the "
    "reserved amq.* names.",
    "resource_locked": "An exclusive queue belongs to the connection that declared it: use a queue of your own, "
    "or drop exclusive.",
    "frame_error": "The client sent a frame the broker could not parse: update the client library, and make sure "
    "no two threads write to one connection at once.",
    "not_allowed": "The client asked for a vhost that does not exist or that its user may not use: create the vhost "
    "or correct the client's URL, and give the user its permissions (rabbitmqctl set_permissions).",
    "channel_error": "The client used a channel in a way AMQP does not allow (a second channel.open, a method on a "
    "closed channel): update the client library, and use each channel from one thread only.",
    "handshake_timeout": "Something opened a TCP connection and did not complete the AMQP handshake within the "
    "broker's handshake_timeout: a TCP health check (harmless), a client speaking TLS or another protocol to the "
    "plain AMQP port, or one too slow to log in (a slow authentication backend). Point TLS clients at the TLS "
    "listener; give health checks a real AMQP connection or the HTTP API.",
    MISSED_HEARTBEATS: "The client answered none of the broker's heartbeats for two intervals: its I/O thread was "
    "blocked (a blocking connection doing long work in a callback without serving the connection; pika: run the "
    "work in a thread and ack with add_callback_threadsafe, or call process_data_events during it), or the "
    "network dropped. Do not turn heartbeats off: a dead peer would then hold its deliveries for hours. See "
    "RabbitMQ guide 'Detecting Dead TCP Connections with Heartbeats'.",
}
# Refusals that fail the same way each time a client repeats them: a client closed on one of these REPEATED times
# in the window is no longer doing its work (every send or declare it makes fails), not merely unlucky.
_CANNOT_WORK = {INEQUIVALENT_ARGUMENTS: "the queue exists with other arguments, so each declare of it fails",
                "access_refused": "the broker refuses it the same way each time (a wrong password, a permission, a "
                                  "reserved name)",
                "not_allowed": "the vhost it asks for does not exist or is not its user's"}
REPEATED = 3
# Causes that harm no AMQP client the broker could name (a TCP health check closes so too): said, not warned of.
_HARMLESS = {"handshake_timeout"}
# A connection refused these before it was open: it held no channel, no delivery.
_BEFORE_OPEN = {"handshake_timeout", "access_refused", "not_allowed"}


def _closed_on_error(ctx: Context, rule: Rule) -> Iterator[Finding]:
    groups: dict[tuple, list[BrokerEvent]] = defaultdict(list)
    for e in _events(ctx, CHANNEL_ERROR, CONNECTION_ERROR, CONNECTION_CLOSED):
        if e.kind != CONNECTION_CLOSED or e.reason == "missed heartbeats":  # the broker's close, not the client's
            groups[(CONNECTION_ERROR if e.kind == CONNECTION_CLOSED else e.kind, e.vhost or "", _who(e).identity,
                    cause(e))].append(e)
    for (kind, vhost, identity, why), events in sorted(groups.items()):
        last = events[-1]
        what = "channel" if kind == CHANNEL_ERROR else "connection"
        returned = [n for e in events if (n := _returned(ctx, e)) is not None]
        evidence = {"closed": len(events), "reason": why, "operation": last.operation, "broker_said": last.text,
                    "window_seconds": rounded(ctx.thresholds.window_seconds), "source": BROKER_LOG}
        queues = Counter(e.queue for e in events if e.queue)
        if queues:
            evidence["queue"] = few(queues)
        if returned:
            evidence["messages_returned_at_least"] = sum(returned)
            evidence["messages_returned_inferred_from"] = "each closed channel's unacked at the poll before its close"
        obj = f"channel {last.connection} ({last.channel})" if kind == CHANNEL_ERROR else f"connection {last.connection}"
        severity, stuck = "warning", ""
        # The same refusal, again and again: on the same queue where the log names one.
        times = max(queues.values()) if queues else len(events)
        # One client is known by its connection's name, its library or its user; refusals from one address told by
        # none of them (logins refused behind one NAT) may be many clients refused once each.
        one_client = bool(last.connection_name or last.client or last.user)
        if why in _CANNOT_WORK and times >= REPEATED and one_client:
            severity = "critical"
            stuck = (f" It was refused this way {times} times in the window ({_CANNOT_WORK[why]}): the client can no "
                     "longer do its work (what it sends or declares there never arrives) until someone acts.")
            evidence["repeated_at_least"] = REPEATED
        elif why in _HARMLESS:
            severity = "info"
        if why == MISSED_HEARTBEATS:
            said = (f"the broker closed {len(events)} connection(s) of {identity} because the client missed its "
                    f"heartbeats ({last.text}).")
        else:
            said = (f"the broker closed {len(events)} {what}(s) of {identity} on an error: "
                    f"{(last.operation + ' ') if last.operation else ''}{last.reason}: {last.text}.")
        after = (" The client never had a working connection." if kind == CONNECTION_ERROR and why in _BEFORE_OPEN
                 else f" A closed {what} returns its unacked messages to their queues (delivered again) and its "
                 "client must open it again.")
        yield rule.finding(severity, vhost, obj, _who(last), evidence, said + after + stuck,
                           _REMEDIES.get(why))


# -- messages the broker dropped ---------------------------------------------------------------------------------
def _dead_letter_cycles(ctx: Context, rule: Rule) -> Iterator[Finding]:
    groups: dict[tuple[str, ...], list[BrokerEvent]] = defaultdict(list)
    for e in _events(ctx, MESSAGE_DROPPED):
        if e.reason == DEAD_LETTER_CYCLE and e.queues:
            groups[e.queues].append(e)
    for listed, events in sorted(groups.items()):
        # The broker lists the queue the message was dead-lettered into, then those it died in, the most recent
        # first: read backwards, the message's path; it was dropped leaving the queue it died in last.
        path, dropped_from, into = tuple(reversed(listed)), listed[1], listed[0]
        # Neither release names the vhost: the one whose queues bear every name of the cycle, if only one does.
        names = set(listed)
        holding = sorted({q.vhost for q in ctx.snapshot.queues
                          if q.name == dropped_from and all(ctx.queue(q.vhost, n) is not None for n in names)})
        vhost = holding[0] if len(holding) == 1 else ""
        evidence = {"queues": list(path), "dropped_from": dropped_from, "dead_lettered_into": into,
                    "lines": len(events), "broker_said": events[-1].text, "source": BROKER_LOG,
                    "logged": "once per cycle and queue process (the broker's words: 'will not be logged again'): "
                              "later drops in the same cycle are not logged, so at least this many were dropped",
                    "vhost": (f"{vhost} (inferred: the only vhost with queues of every name of the cycle; the log "
                              "names none)") if vhost else
                             "not named by the log" + (f": one of {few(holding)}" if holding else "")}
        yield rule.finding(
            "critical", vhost, f"queue {dropped_from}", None, evidence,
            f"the broker dropped at least {len(events)} message(s) in the dead-letter cycle {' -> '.join(path)}: "
            f"each died in {dropped_from} and was dead-lettered back into {into}, where it had died before, with no "
            "reject on its way; the broker drops such a message instead of looping it. It had been accepted (and "
            "confirmed, to a publisher using confirms) when it entered the cycle: it is gone from the cycle (a copy "
            "the dead-letter exchange routed to a queue outside it, where one is bound, is kept).",
            None)


# -- churn ---------------------------------------------------------------------------------------------------------
_PORT = re.compile(r":\d+$")


def _churn(ctx: Context, rule: Rule) -> Iterator[Finding]:
    per_minute = ctx.thresholds.churn_connections_per_minute
    if ctx.breaks is not None and (ctx.breaks.told_by(BROKER_LOG) or ctx.breaks.told_by(EVENT_EXCHANGE)):
        yield from _churn_by_client(ctx, rule, per_minute)
        return
    start, window = ctx.window_start, ctx.window_seconds
    then = start.overview.churn if start is not None else None
    now = ctx.snapshot.overview.churn
    if window is None or then is None or now is None or now.connections_opened is None or then.connections_opened is None:
        return
    opened = now.connections_opened - then.connections_opened
    rate = opened * 60 / window
    if opened <= 0 or rate < per_minute:
        return
    open_now = len(ctx.snapshot.connections)
    # Info: which client it is, polls cannot say, and a test suite or a deploy churns the whole broker too.
    yield rule.finding(
        "info", "", "cluster", None,
        {"connections_opened": opened, "per_minute": rounded(rate), "window_seconds": rounded(window),
         "connections_open_now": open_now, "source": "polls (the broker's churn counters)",
         "clients": "not known: a connection shorter than a poll is invisible to polls; give --broker-log or "
                    "--event-exchange"},
        f"the broker opened {opened} connections in the last {window:.0f} s ({rate:.1f} a minute) while "
        f"{open_now} are open now: some client opens a connection per message or reconnects in a loop. Which one "
        "polls cannot tell; the broker's log (--broker-log) or its event exchange (--event-exchange) names it.")


def _churn_by_client(ctx: Context, rule: Rule, per_minute: float) -> Iterator[Finding]:
    window = ctx.thresholds.window_seconds
    # A connection still open is no churn, whoever else opens connections from its address: only those that came and
    # went count. Each client that names its connections is a client of its own; unnamed ones are told apart by
    # library, address and user only.
    open_now = set() if CONNECTIONS in ctx.snapshot.unreported else {c.name for c in ctx.snapshot.connections}
    groups: dict[tuple[str, ...], list[BrokerEvent]] = defaultdict(list)
    for e in _events(ctx, CONNECTION_OPENED):
        if e.connection in open_now:
            continue
        peer = _PORT.sub("", (e.connection or "").split(" -> ")[0])
        key = (e.vhost or "", e.user or "", peer, e.connection_name or "", "" if e.connection_name else e.client or "")
        groups[key].append(e)
    for (vhost, user, peer, name, library), events in sorted(groups.items()):
        span = max(events[-1].at - events[0].at, 1.0)
        rate = len(events) * 60 / max(span, min(window, 60.0))
        if len(events) < 3 or rate < per_minute:
            continue
        clients = few({e.client for e in events if e.client})
        who = Named(name, clients, name or (f"{library} clients from {peer} as {user}" if library else
                                            f"unnamed clients from {peer} as {user}"))
        yield rule.finding(
            "warning", vhost, f"connections named {name}" if name else f"clients from {peer} as {user}"
            + (f" ({library})" if library else ""), who,
            {"connections_opened": len(events), "per_minute": rounded(rate), "seconds": rounded(span),
             "peer_host": peer, "user": user, "source": few({e.source for e in events}),
             "counted": "connections opened and closed since; those still open are not churn"},
            f"{who.identity} opened {len(events)} connections in {span:.0f} s ({rate:.1f} a minute) that closed "
            "again: a connection per message, or a reconnect loop. Each costs a TCP and AMQP handshake, a process on "
            "the broker and, for a consumer, its unacked deliveries at every close.",
            "Keep one long-lived connection per process and open channels on it; publish many messages per "
            "connection; if it reconnects in a loop, read why it was closed (the broker's log). See RabbitMQ guide "
            "'Connections', 'Connection Churn'.")


RULES: tuple[Rule, ...] = (
    Rule("consumer-stalled", "A manual-ack consumer whose channel holds deliveries and has acked none for "
         "stalled_consumer_seconds, or for half the consumer timeout in force where the broker says which applies "
         "and that is sooner: stalled (or at risk of the timeout), not slow, and never called prefetch-saturated. "
         "Says when the timeout will end it, where that figure comes from and what the broker will do then, which "
         "differs by release and queue type; a warning from half the timeout.",
         "Find why the consumer stopped acking (a hung callback, a deadlock, an exception swallowed before the "
         "ack) and restart it; if its work is long by design, raise the timeout for its queue (x-consumer-timeout "
         f"or a consumer-timeout policy, RabbitMQ 3.12+). See {CONSUMERS_GUIDE}.", _stalled, needs=(CHANNELS,)),
    Rule("consumer-timed-out", "The broker closed a channel because a consumer held a delivery past the consumer "
         "timeout (the node's log): its unacked messages were requeued and delivered again.",
         "Ack within the timeout: process faster, or for long work ack early and keep your own record; or raise "
         f"the timeout for that queue (x-consumer-timeout, consumer-timeout policy; 3.12+). See {CONSUMERS_GUIDE}.",
         _timed_out, needs=(EVENTS,)),
    Rule("consumer-cancelled-by-broker", "RabbitMQ 4.3 and later: a quorum queue's consumer, last seen holding "
         "deliveries without acking, gone while its channel stays open, or an AMQP 1.0 receiver holding deliveries "
         "its queue took back: the broker timed it out, logging nothing of a 0-9-1 consumer (an inference from the "
         "polls) and, once a link, the release of an AMQP 1.0 receiver's deliveries (read from the log where it is "
         "given); critical when nobody consumes from the queue any more.",
         "Restart the consumer, and make the client handle basic.cancel (declare the consumer_cancel_notify "
         "capability and subscribe again in its cancel callback); find why it held its deliveries so long. See "
         f"{CONSUMERS_GUIDE}.", _cancelled, needs=(CHANNELS,),
         inapplicable=lambda r: "before RabbitMQ 4.3 a timed-out consumer's channel is closed (consumer-timed-out)"
         if r is not None and r < (4, 3) else None),
    Rule("closed-on-error", "The broker closed channels or connections of a client on an error (the node's log): "
         "an unknown delivery tag (a double ack, an ack on another channel or after a reconnect), a redeclare with "
         "other arguments, NOT_FOUND, ACCESS_REFUSED, RESOURCE_LOCKED, a frame error, a login or vhost refused, "
         "missed heartbeats; a handshake never completed (a TCP health check closes so too) at info. Each close "
         "requeues the channel's unacked messages. Critical when a client is refused the same way "
         f"{REPEATED} times or more in the window (a redeclare with other arguments, a login, a vhost, a "
         "permission): it can no longer do its work.", "Fix what the broker's message names; the finding's remedy "
         "is written for its reason.", _closed_on_error, needs=(EVENTS,)),
    Rule("dead-letter-cycle-dropped", "The broker's log says it dropped a message in a dead-letter cycle: "
         "dead-lettered back into a queue it had died in before (expired, or over a length limit) with no reject "
         "on its way. The message was accepted, and confirmed to a publisher using confirms: it is lost "
         "(critical). Names the cycle's queues; the vhost only where one alone holds them (the log names none).",
         "Break the cycle: dead-letter the retry queue into a parking queue that dead-letters nowhere, or count "
         "retries (the x-death header) and park the message past a limit; a cycle the consumer enters by "
         f"rejecting (basic.reject or nack without requeue) is let through by the broker. See {DLX_GUIDE}.",
         _dead_letter_cycles, needs=(EVENTS,)),
    Rule("connection-churn", "A client opening connections over and over (a connection per message, a reconnect "
         "loop), named where the broker's log or its event exchange is read; from polls alone, the broker's churn counters, with no "
         "client named.", "Keep one long-lived connection per process and open channels on it. See RabbitMQ guide "
         "'Connections', 'Connection Churn'.", _churn, needs=(CONNECTIONS,)),
)
