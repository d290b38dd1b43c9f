"""The rules: pure functions from a Context (snapshot, previous snapshot, probe statistics, thresholds) to
findings. Rule IDs are a contract: alerts and the UI key on them. The README's rules reference is generated
from RULES (python -m ackscope.apps.reference rules), so it cannot drift from the code.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace

from ackscope.core.quantile import beyond_largest_bucket, histogram_quantile
from ackscope.model.findings import Diagnosis, Finding, NotEvaluated, worst_first
from ackscope.model.probes import NAMESPACE, TargetStats, is_probe_connection
from ackscope.model.snapshot import (
    CHANNEL_TRANSACTIONAL,
    CHANNELS,
    CONNECTION_HEARTBEATS,
    CONNECTION_STATES,
    NODE_ALARMS,
    QUEUE_COUNTS,
    QUEUE_DURABILITY,
    QUEUE_PERSISTENT_COUNTS,
    Channel,
    Connection,
    Consumer,
    Queue,
    Snapshot,
    binding_limit,
)

from .thresholds import Thresholds

ACKS_GUIDE = "RabbitMQ guide 'Consumer Acknowledgements and Publisher Confirms'"
RELIABILITY_GUIDE = "RabbitMQ guide 'Reliability Guide'"


@dataclass(frozen=True)
class Context:
    snapshot: Snapshot
    previous: Snapshot | None = None  # the sample before, for growth between polls; None on the first poll
    probes: tuple[TargetStats, ...] = ()
    thresholds: Thresholds = Thresholds()
    # The snapshot at the start of the recent window (diagnosis.window.Recent) that rate-like rules judge;
    # the previous sample when None (`ackscope diagnose` reads twice, a window apart).
    window: Snapshot | None = None

    def __post_init__(self):
        s = self.snapshot
        object.__setattr__(self, "_queues", {(q.vhost, q.name): q for q in s.queues})
        object.__setattr__(self, "_channels", {c.name: c for c in s.channels})
        by_queue: dict[tuple[str, str], list[Consumer]] = {}
        for c in s.consumers:
            by_queue.setdefault((c.vhost, c.queue), []).append(c)
        object.__setattr__(self, "_consumers", by_queue)
        by_connection: dict[str, list[Channel]] = {}
        for ch in s.channels:
            by_connection.setdefault(ch.connection, []).append(ch)
        object.__setattr__(self, "_channels_of", by_connection)
        prev = self.previous
        object.__setattr__(self, "_prev_channels", {c.name: c for c in prev.channels} if prev else {})
        before: dict[tuple[str, str], list[Consumer]] = {}
        for c in prev.consumers if prev else ():
            before.setdefault((c.vhost, c.queue), []).append(c)
        object.__setattr__(self, "_prev_consumers", before)
        start = self.window or prev
        object.__setattr__(self, "_start", start)
        object.__setattr__(self, "_start_queues", {(q.vhost, q.name): q for q in start.queues} if start else {})
        object.__setattr__(self, "_start_channels", {c.name: c for c in start.channels} if start else {})

    def queue(self, vhost: str, name: str) -> Queue | None:
        return self._queues.get((vhost, name))

    def channel(self, name: str) -> Channel | None:
        return self._channels.get(name)

    def consumers_of(self, q: Queue) -> list[Consumer]:
        return self._consumers.get((q.vhost, q.name), [])

    def known_consumers_of(self, q: Queue) -> list[Consumer]:
        """The queue's consumers, to name them: this poll's, or the previous poll's where this one lists
        none while the queue counts some (the consumer list failed or lagged this time)."""
        mine = self.consumers_of(q)
        return mine if mine or not _n(q.consumers) else self._prev_consumers.get((q.vhost, q.name), [])

    def channels_of(self, connection: str) -> list[Channel]:
        return self._channels_of.get(connection, [])

    def previous_channel(self, name: str) -> Channel | None:
        return self._prev_channels.get(name)

    # -- the recent window ---------------------------------------------------------------------------------
    @property
    def window_seconds(self) -> float | None:
        """How long the window is: from its first snapshot to this one; None on the first poll."""
        if self._start is None or self.snapshot.taken_at <= self._start.taken_at:
            return None
        return self.snapshot.taken_at - self._start.taken_at

    def at_window_start(self, record: Channel | Queue) -> Channel | Queue | None:
        if isinstance(record, Queue):
            return self._start_queues.get((record.vhost, record.name))
        return self._start_channels.get(record.name)

    def over_window(self, record: Channel | Queue, stat: str) -> int | None:
        """How much one of a channel's or queue's counters grew over the window: since the window's first
        snapshot, or since the object appeared within it. None on the first poll or where it is unreported."""
        now = getattr(record.message_stats, stat)
        if now is None or self.window_seconds is None:
            return None
        then = self.at_window_start(record)
        return max(0, now - _n(getattr(then.message_stats, stat) if then is not None else 0))

    def window_rate(self, record: Channel | Queue, stat: str) -> float | None:
        """Per second over the window (see over_window)."""
        change = self.over_window(record, stat)
        return None if change is None else change / self.window_seconds


@dataclass(frozen=True)
class Rule:
    id: str
    meaning: str
    remedy: str
    check: Callable[[Context, Rule], Iterable[Finding]]
    needs: tuple[str, ...] = ()  # facts a source may not report (ackscope.model.snapshot's constants)

    def finding(self, severity: str, vhost: str, obj: str, who: Connection | Channel | Consumer | str,
                evidence: dict, explanation: str) -> Finding:
        """`who` is the record whose client is the culprit, or a queue's consumers already named."""
        if isinstance(who, str):
            name = client = who
        else:
            name, client = who.connection_name, who.identity or who.connection_name
        return Finding(self.id, severity, vhost, obj, name, evidence, explanation, self.remedy, client=client)


def _n(v) -> int:
    return v or 0


MAX_NAMED = 3  # consumers a queue finding names before it counts the rest


def _consumers_of(ctx: Context, q: Queue) -> str:
    """Who consumes from a queue, for a queue finding's culprit: its consumers' clients (Connection.identity),
    the first few and a count of the rest ("" when nobody consumes)."""
    names = sorted({c.identity or c.connection_name or f"channel {c.channel}" for c in ctx.known_consumers_of(q)})
    if len(names) <= MAX_NAMED:
        return ", ".join(names)
    return f"{', '.join(names[:MAX_NAMED])} and {len(names) - MAX_NAMED} more"


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 3)


# -- consumers -------------------------------------------------------------------------------------------
def _prefetch_unlimited(ctx: Context, rule: Rule) -> Iterator[Finding]:
    for con in ctx.snapshot.consumers:
        ch = ctx.channel(con.channel)
        if con.ack_required is not True or con.prefetch_count != 0 or ch is None or _n(ch.global_prefetch_count):
            continue
        unacked = _n(ch.messages_unacked)
        # A latent risk with nothing at stake is info: no message is held (yet).
        severity = ("critical" if unacked >= ctx.thresholds.unlimited_prefetch_unacked_critical
                    else "warning" if unacked > 0 else "info")
        yield rule.finding(severity, con.vhost, f"channel {con.channel}",
                           con, {"queue": con.queue, "prefetch": 0, "unacked": unacked},
                           f"consumer {con.consumer_tag} on queue {con.queue} acks manually with no prefetch "
                           f"limit: the broker pushes it every message it can; it holds {unacked} unacked.")


def _auto_ack(ctx: Context, rule: Rule) -> Iterator[Finding]:
    t = ctx.thresholds
    for con in ctx.snapshot.consumers:
        if con.ack_required is not False:
            continue
        q = ctx.queue(con.vhost, con.queue)
        ready = _n(q.messages_ready) if q else 0
        rate = ctx.window_rate(q, "deliver_get") if q else None
        busy = ready >= t.auto_ack_backlog or (rate or 0) >= t.auto_ack_delivery_rate
        yield rule.finding("warning" if busy else "info", con.vhost, f"channel {con.channel}", con,
                           {"queue": con.queue, "ready": ready, "delivery_rate": _round(rate),
                            "window_seconds": _round(ctx.window_seconds)},
                           f"consumer {con.consumer_tag} on queue {con.queue} uses automatic acknowledgement: a "
                           "message counts as delivered once written to the socket and is lost if the "
                           "connection drops; no prefetch limit protects the consumer from being flooded.")


def _prefetch_saturated(ctx: Context, rule: Rule) -> Iterator[Finding]:
    seen = set()
    for con in ctx.snapshot.consumers:
        ch, q = ctx.channel(con.channel), ctx.queue(con.vhost, con.queue)
        if ch is None or q is None or con.ack_required is not True or (ch.name, q.name) in seen:
            continue
        seen.add((ch.name, q.name))
        if _n(q.messages_ready) == 0:
            continue
        full = next(((unacked, limit) for unacked, limit in _held_against(ctx, ch, q)
                     if limit is not None and unacked >= limit), None)
        if full is None:
            continue
        unacked, limit = full
        yield rule.finding("warning", con.vhost, f"channel {ch.name}", ch,
                           {"queue": q.name, "unacked": unacked, "prefetch_limit": limit,
                            "ready": q.messages_ready},
                           f"the consumer holds {unacked} unacked, its whole prefetch of {limit}, "
                           f"while {q.messages_ready} messages wait in {q.name}: the consumer is the bottleneck.")


def _held_against(ctx: Context, ch: Channel, q: Queue) -> list[tuple[int, int | None]]:
    """Unacked deliveries and the limit that binds them: the whole channel's against the channel's limit;
    and, where the channel's consumers of the queue are all of the queue's consumers, the queue's unacked
    against their own prefetch (capped by the channel-wide one): one consumer of a channel can be full
    while the channel, with room for its other consumers, is not."""
    held = [(_n(ch.messages_unacked), ch.prefetch_limit)]
    mine = [c.prefetch_count for c in ctx.consumers_of(q) if c.channel == ch.name]
    if mine and len(mine) == _n(q.consumers) and q.messages_unacked is not None and None not in mine:
        held.append((q.messages_unacked, binding_limit(mine, ch.global_prefetch_count)))
    return held


def _prefetch_one(ctx: Context, rule: Rule) -> Iterator[Finding]:
    for con in ctx.snapshot.consumers:
        q = ctx.queue(con.vhost, con.queue)
        ch = ctx.channel(con.channel)
        # Prefetch 1 as it binds: the consumer's own, or a channel-wide 1 (Celery's acks_late with
        # worker_prefetch_multiplier=1 sets global QoS 1 and leaves the consumer's at 0).
        limit = ch.limit_for(con.prefetch_count) if ch is not None else con.prefetch_count
        if con.ack_required is not True or limit != 1 or q is None:
            continue
        if _n(q.messages_ready) < ctx.thresholds.prefetch_one_backlog:
            continue
        yield rule.finding("warning", con.vhost, f"channel {con.channel}", con,
                           {"queue": q.name, "prefetch": 1, "ready": q.messages_ready},
                           f"a consumer with prefetch 1 drains {q.name}, which holds {q.messages_ready} ready "
                           "messages: every delivery waits for the previous ack's round trip.")


def _requeue_loop(ctx: Context, rule: Rule) -> Iterator[Finding]:
    t = ctx.thresholds
    for q in ctx.snapshot.queues:
        redeliver, deliver = ctx.window_rate(q, "redeliver"), ctx.window_rate(q, "deliver_get")
        if redeliver is None or deliver is None or redeliver < t.requeue_min_rate:
            continue
        if redeliver < t.requeue_ratio * deliver:
            continue
        critical = deliver > 0 and redeliver >= 0.9 * deliver
        yield rule.finding("critical" if critical else "warning", q.vhost, f"queue {q.name}", _consumers_of(ctx, q),
                           {"redeliver_rate": _round(redeliver), "deliver_rate": _round(deliver),
                            "window_seconds": _round(ctx.window_seconds), "consumers": q.consumers},
                           f"{redeliver:.1f} of {deliver:.1f} deliveries per second on {q.name} are redeliveries: "
                           "consumers reject or nack with requeue and the same messages come straight back "
                           "(a poison message, or every consumer failing), burning network and CPU.")


# -- publishers ------------------------------------------------------------------------------------------
def _touching(ch: Channel, **evidence) -> dict:
    """A channel finding's evidence, with the queues and exchanges the channel touched where the source
    says: they name a channel known only by its process id (the Prometheus plugin's)."""
    if ch.queues:
        evidence["queues"] = list(ch.queues)
    if ch.exchanges:
        evidence["exchanges"] = list(ch.exchanges)
    return evidence


def _publishing(ch: Channel) -> bool:
    return _n(ch.message_stats.publish) > 0


def _at_stake(ctx: Context, ch: Channel) -> tuple[bool, float | None]:
    """Whether a channel publishes enough over the window for its way of publishing to matter, and at what
    rate: a framework's control traffic (Celery's events and pidbox replies, a few small messages a minute)
    is not the same warning as an application's stream of orders."""
    rate = ctx.window_rate(ch, "publish")
    return rate is not None and rate >= ctx.thresholds.publish_rate_at_stake, rate


def _without_confirms(ctx: Context, rule: Rule) -> Iterator[Finding]:
    for ch in ctx.snapshot.channels:
        if _publishing(ch) and ch.confirm is False and ch.transactional is False:
            stake, rate = _at_stake(ctx, ch)
            yield rule.finding("warning" if stake else "info", ch.vhost, f"channel {ch.name}", ch,
                               _touching(ch, published=ch.message_stats.publish, confirm=False,
                                         publish_rate=_round(rate), window_seconds=_round(ctx.window_seconds)),
                               f"the channel has published {ch.message_stats.publish} messages without publisher "
                               "confirms: nothing tells it whether the broker took them (at-most-once)" + (
                                   "." if stake else f"; it publishes little (under "
                                   f"{ctx.thresholds.publish_rate_at_stake:g}/s lately), so this is info."))


def _transactional(ctx: Context, rule: Rule) -> Iterator[Finding]:
    for ch in ctx.snapshot.channels:
        if _publishing(ch) and ch.transactional is True:
            yield rule.finding("warning", ch.vhost, f"channel {ch.name}", ch,
                               _touching(ch, published=ch.message_stats.publish, transactional=True),
                               "the channel publishes in AMQP transactions, which cost a round trip (and on "
                               "slow disks an fsync) per commit: the guide puts them at about 250x slower than "
                               "confirms ('ackscope bench confirms' measures it on this broker).")


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
        before = ctx.previous_channel(ch.name)
        # The broker samples these counters at slightly different moments, so one poll can show a gap that
        # the next closes; nacks are cumulative and stay. Only a gap seen in two samples in a row counts: two
        # polls that read the same sample (the management API refreshes it every few seconds) are one.
        if nacked is None or nacked <= 0 or before is None or (_inferred_nacks(before) or 0) <= 0 \
                or not _sampled_anew(ch, before):
            continue
        # And only nacks of the recent window: a channel nacked once an hour ago is not nacked now.
        start = ctx.at_window_start(ch)
        recent = nacked - (_inferred_nacks(start) or 0 if start is not None else 0)
        if recent > 0:
            s = ch.message_stats
            yield rule.finding("warning", ch.vhost, f"channel {ch.name}", ch,
                               _touching(ch, published=s.publish, confirmed=s.confirm,
                                         unconfirmed=ch.messages_unconfirmed, inferred_nacked=nacked,
                                         nacked_in_window=recent, window_seconds=_round(ctx.window_seconds)),
                               f"about {recent} publishes in the last {ctx.window_seconds:.0f}s were neither "
                               "confirmed nor are still awaiting a confirm: "
                               "the broker refused responsibility for them with basic.nack (for example a full "
                               "queue with x-overflow reject-publish). The broker has no nack counter; ackscope "
                               "infers this from publish minus confirm minus unconfirmed.")


def _unconfirmed_backlog(ctx: Context, rule: Rule) -> Iterator[Finding]:
    t = ctx.thresholds
    for ch in ctx.snapshot.channels:
        if ch.confirm is not True or ch.messages_unconfirmed is None:
            continue
        before = ctx.previous_channel(ch.name)
        growth = (ch.messages_unconfirmed - _n(before.messages_unconfirmed)) if before else 0
        # Growth counts only on top of a backlog the previous poll saw too: a healthy publisher's burst,
        # caught in flight by one poll, is confirmed a few milliseconds later.
        grew = growth >= t.unconfirmed_growth and before is not None and _n(before.messages_unconfirmed) > 0
        if ch.messages_unconfirmed >= t.unconfirmed_backlog or grew:
            yield rule.finding("warning", ch.vhost, f"channel {ch.name}", ch,
                               _touching(ch, unconfirmed=ch.messages_unconfirmed, growth=growth),
                               f"{ch.messages_unconfirmed} published messages await their confirm: the broker is "
                               "slow to take responsibility (disk, a blocked queue, a quorum queue without its "
                               "majority), and a crash now would leave the publisher to republish them.")


def _unroutable(stat: str, what: str):
    def check(ctx: Context, rule: Rule) -> Iterator[Finding]:
        for ch in ctx.snapshot.channels:
            # What happened in the window, not since the channel opened: one message at a client's start-up
            # stays in the lifetime count for the life of the connection.
            count = ctx.over_window(ch, stat)
            if not count:
                continue
            seconds = ctx.window_seconds
            # One message is info: Celery's worker drops one by design at start-up (a broadcast nobody is
            # bound to yet); a loss that repeats within the window is a warning.
            severity = "warning" if count >= ctx.thresholds.unroutable_at_stake else "info"
            yield rule.finding(severity, ch.vhost, f"channel {ch.name}", ch,
                               _touching(ch, **{f"{stat}_in_window": count, "window_seconds": _round(seconds),
                                                "rate": _round(count / seconds),
                                                stat: getattr(ch.message_stats, stat)}),
                               f"in the last {seconds:.0f}s the channel published {count} messages that matched no "
                               f"queue and were {what}.")
    return check


# -- queues ----------------------------------------------------------------------------------------------
def _transient_in_durable(ctx: Context, rule: Rule) -> Iterator[Finding]:
    for q in ctx.snapshot.queues:
        if q.durable is not True or q.type != "classic" or q.messages_persistent is None:
            continue
        total = _n(q.messages_ready) + _n(q.messages_unacked)
        transient = total - q.messages_persistent
        if transient > 0:
            yield rule.finding("warning", q.vhost, f"queue {q.name}", _consumers_of(ctx, q),
                               {"messages": total, "persistent": q.messages_persistent, "transient": transient},
                               f"durable queue {q.name} holds {transient} transient messages: the queue survives "
                               "a broker restart, they do not.")


def _non_durable_backlog(ctx: Context, rule: Rule) -> Iterator[Finding]:
    for q in ctx.snapshot.queues:
        total = _n(q.messages_ready) + _n(q.messages_unacked)
        if q.durable is False and total >= ctx.thresholds.non_durable_backlog:
            # An exclusive or auto-delete queue dies with its consumer by design (a framework's reply or
            # event queue): losing it on a restart is what it is for, so info.
            temporary = q.exclusive is True or q.auto_delete is True
            yield rule.finding("info" if temporary else "warning", q.vhost, f"queue {q.name}", _consumers_of(ctx, q),
                               {"messages": total, "durable": False, "exclusive": q.exclusive},
                               f"non-durable queue {q.name} holds {total} messages: a broker restart deletes the "
                               "queue and all of them.")


def _gets(ctx: Context, q: Queue) -> tuple[int | None, int | None]:
    """basic.get fetches from the queue over the window: with manual ack, and with no ack."""
    return ctx.over_window(q, "get"), ctx.over_window(q, "get_no_ack")


def _no_consumers(ctx: Context, rule: Rule) -> Iterator[Finding]:
    for q in ctx.snapshot.queues:
        if q.consumers == 0 and _n(q.messages_ready) >= ctx.thresholds.no_consumers_backlog \
                and not any(_gets(ctx, q)):  # a queue polled with basic.get is read: queue-polled judges it
            yield rule.finding("warning", q.vhost, f"queue {q.name}", "",
                               {"ready": q.messages_ready, "consumers": 0},
                               f"{q.messages_ready} messages wait in {q.name} and nothing consumes from it.")


def _polled(ctx: Context, rule: Rule) -> Iterator[Finding]:
    t = ctx.thresholds
    for q in ctx.snapshot.queues:
        with_ack, no_ack = _gets(ctx, q)
        if q.consumers != 0 or not (with_ack or no_ack):
            continue
        ready, seconds, gets = _n(q.messages_ready), ctx.window_seconds, _n(with_ack) + _n(no_ack)
        losing, behind = bool(no_ack), ready >= t.no_consumers_backlog
        yield rule.finding("warning" if losing or behind else "info", q.vhost, f"queue {q.name}", "",
                           {"gets_with_ack": with_ack, "gets_without_ack": no_ack, "ready": ready,
                            "get_rate": _round(gets / seconds), "window_seconds": _round(seconds)},
                           f"{q.name} has no consumer and is read by polling with basic.get "
                           f"({gets} fetches in the last {seconds:.0f}s)"
                           + (f", {no_ack} of them without ack: a fetched message is gone even if the reader "
                              "dies before handling it" if losing else "")
                           + (f"; {ready} messages wait: a get costs a round trip per message, a consumer "
                              "is pushed them" if behind else "") + ".")


# -- connections and nodes -------------------------------------------------------------------------------
def _heartbeat_disabled(ctx: Context, rule: Rule) -> Iterator[Finding]:
    for c in ctx.snapshot.connections:
        if c.heartbeat_seconds != 0:
            continue
        # What a silent network failure would cost: deliveries held by its consumers, or a publisher that
        # keeps writing into a dead socket. An idle connection (Celery's producer pool) is info.
        channels = ctx.channels_of(c.name)
        consuming = any(_n(ch.consumer_count) > 0 for ch in channels)
        publishing = any(_at_stake(ctx, ch)[0] for ch in channels)
        yield rule.finding("warning" if consuming or publishing else "info", c.vhost, f"connection {c.name}", c,
                           {"heartbeat_seconds": 0, "client": c.client, "consumes": consuming,
                            "publishes_at_stake": publishing},
                           "the connection negotiated no heartbeat: if the network fails silently, neither "
                           "side notices for minutes (about 11 with Linux defaults)" + (
                               ", and its unacked messages stay locked to a dead consumer." if consuming else
                               ", and its publishes go into a dead socket." if publishing else
                               "; it neither consumes nor publishes much, so this is info."))


def _blocked(ctx: Context, rule: Rule) -> Iterator[Finding]:
    for c in ctx.snapshot.connections:
        if c.blocked:
            yield rule.finding("info" if c.state == "flow" else "warning", c.vhost, f"connection {c.name}",
                               c, {"state": c.state},
                               "the broker holds back this connection's publishes" + (
                                   " with credit flow control: it publishes faster than queues absorb."
                                   if c.state == "flow" else ": a resource alarm (memory or disk) blocks every "
                                   "publishing connection until it clears."))


def _alarm(field: str, what: str):
    def check(ctx: Context, rule: Rule) -> Iterator[Finding]:
        for n in ctx.snapshot.nodes:
            if getattr(n, f"{field}_alarm"):
                evidence = ({"mem_used": n.mem_used, "mem_limit": n.mem_limit} if field == "mem"
                            else {"disk_free": n.disk_free, "disk_free_limit": n.disk_free_limit})
                yield rule.finding("critical", "", f"node {n.name}", "", evidence,
                                   f"node {n.name} raised its {what} alarm: every publishing connection in the "
                                   "cluster is blocked until it clears.")
    return check


# -- the cluster -----------------------------------------------------------------------------------------
def _node_down(ctx: Context, rule: Rule) -> Iterator[Finding]:
    running = [n.name for n in ctx.snapshot.nodes if n.running]
    for n in ctx.snapshot.nodes:
        if n.running is not False:
            continue
        # Its classic queues stay homed there, unavailable; a quorum queue led there elects a leader elsewhere
        # while a majority of its members runs, so what still names this node has none.
        stranded = sorted(f"{q.vhost}/{q.name}" for q in ctx.snapshot.queues if q.node == n.name)
        replicas = sum(1 for q in ctx.snapshot.queues if q.members and n.name in q.members)
        had = sum(1 for c in ctx.previous.connections if c.node == n.name) if ctx.previous else 0
        said = [f"{len(stranded)} queue(s) still on it are unavailable until it returns" if stranded else "",
                f"{replicas} replicated queue(s) lost a member there" if replicas else "",
                f"its {had} client connection(s) were closed: clients must reconnect to another node and consume "
                "again" if had else ""]
        yield rule.finding("critical", "", f"node {n.name}", "", {
            "running": running, "queues_on_it": len(stranded), "examples": stranded[:5],
            "replicated_queues_with_a_member_on_it": replicas, "connections_it_had": had},
            f"cluster member {n.name} is not running" + "".join(f"; {x}" for x in said if x) + ".")


def _partition(ctx: Context, rule: Rule) -> Iterator[Finding]:
    for n in ctx.snapshot.nodes:
        if n.partitions:
            yield rule.finding("critical", "", f"node {n.name}", "", {"cannot_reach": list(n.partitions)},
                               f"node {n.name} reports a network partition: it cannot reach "
                               f"{', '.join(n.partitions)}. Each side may go on alone (pause_minority stops the "
                               "minority; autoheal restarts the losers, dropping what they accepted).")


def _quorum(ctx: Context, rule: Rule, *, lost: bool) -> Iterator[Finding]:
    for q in ctx.snapshot.queues:
        if q.type != "quorum" or not q.members or q.online is None:
            continue
        online = [m for m in q.online if m in q.members]
        missing = [m for m in q.members if m not in online]
        if not missing or (len(online) <= len(q.members) // 2) != lost:
            continue
        evidence = {"members": list(q.members), "online": online, "missing": missing, "leader": q.node,
                    "messages_ready": q.messages_ready}
        if lost:
            yield rule.finding("critical", q.vhost, f"queue {q.name}", _consumers_of(ctx, q), evidence,
                               f"only {len(online)} of the quorum queue's {len(q.members)} members are online, "
                               "not a majority: it has no leader, publishes to it are not confirmed (publishers "
                               "wait or time out) and its consumers get nothing until members return.")
        else:
            yield rule.finding("warning", q.vhost, f"queue {q.name}", _consumers_of(ctx, q), evidence,
                               f"{len(online)} of the quorum queue's {len(q.members)} members are online "
                               f"(missing: {', '.join(missing)}): it still confirms and delivers, but one more "
                               "failure " + ("costs its quorum." if len(online) - 1 <= len(q.members) // 2
                                             else "leaves it with fewer replicas.")
                               )


def _leaders_unbalanced(ctx: Context, rule: Rule) -> Iterator[Finding]:
    running = [n.name for n in ctx.snapshot.nodes if n.running]
    led = [q.node for q in ctx.snapshot.queues if q.node in running]
    if len(running) < 2 or len(led) < ctx.thresholds.leaders_unbalanced_min_queues:
        return
    counts = {n: led.count(n) for n in running}
    node = max(running, key=lambda n: (counts[n], n))
    share = counts[node] / len(led)
    if share <= ctx.thresholds.leaders_unbalanced_share:
        return
    yield rule.finding("warning" if share == 1 else "info", "", f"node {node}", "",
                       {"leaders": counts, "share": round(share, 3)},
                       f"node {node} leads {counts[node]} of the cluster's {len(led)} queues ({share:.0%}; "
                       f"quorum leaders and classic queues' homes): its CPU, disk and network carry most of "
                       "the traffic, and its failure moves most of the leaders at once.")


def _unsynchronised(ctx: Context, rule: Rule) -> Iterator[Finding]:
    for q in ctx.snapshot.queues:
        if not q.mirrors or q.synchronised_mirrors is None:
            continue
        behind = [m for m in q.mirrors if m not in q.synchronised_mirrors]
        if behind:
            yield rule.finding("warning", q.vhost, f"queue {q.name}", _consumers_of(ctx, q),
                               {"leader": q.node, "mirrors": list(q.mirrors), "unsynchronised": behind},
                               f"the classic mirrored queue's mirrors on {', '.join(behind)} are not synchronised: "
                               "if its leader fails now, a mirror that is promoted loses the messages it lacks "
                               "(ha-promote-on-failure), or the queue waits for the leader.")


# -- probes ----------------------------------------------------------------------------------------------
def _probe_labels(p: TargetStats) -> dict:
    return {"queue_type": p.queue_type, "persistent": p.persistent}


def _probe_latency(ctx: Context, rule: Rule) -> Iterator[Finding]:
    for p in ctx.probes:
        buckets = p.buckets("confirm_latency_seconds")
        p99 = histogram_quantile(buckets, 0.99)  # as Prometheus and the dashboard estimate it
        if p99 is None or p99 <= ctx.thresholds.probe_confirm_p99_seconds:
            continue
        if beyond_largest_bucket(buckets, 0.99):  # say how far we know it is
            evidence, told = {"confirm_p99_seconds_above": p99}, f"more than {p99:g}s"
        else:
            evidence, told = {"confirm_p99_seconds": round(p99, 6)}, f"about {p99:.3g}s"
        yield rule.finding("warning", "", f"probe {p.target}", "ackscope-probe", {**evidence, **_probe_labels(p)},
                           f"the probe's publisher waits {told} for 99% of its confirms on {p.queue_type} queue "
                           f"ackscope.probe.{p.target}.")


def _probe_lost(ctx: Context, rule: Rule) -> Iterator[Finding]:
    for p in ctx.probes:
        lost = p.counters.get("lost", 0)
        if lost > 0:
            yield rule.finding("critical" if p.persistent else "warning", "", f"probe {p.target}", "ackscope-probe",
                               {"lost": lost, "confirmed": p.counters.get("confirmed"), **_probe_labels(p)},
                               f"{lost:g} messages the broker confirmed were never delivered to the probe's "
                               "consumer within the loss deadline" + ("." if p.persistent else
                                                                       " (transient messages: a restart loses them)."))


def _probe_nacked(ctx: Context, rule: Rule) -> Iterator[Finding]:
    for p in ctx.probes:
        nacked = p.counters.get("nacked", 0)
        if nacked > 0:
            by_design = p.target == "reject-publish"
            yield rule.finding("info" if by_design else "warning", "", f"probe {p.target}", "ackscope-probe",
                               {"nacked": nacked, "published": p.counters.get("published"), **_probe_labels(p)},
                               f"the broker refused {nacked:g} of the probe's publishes with basic.nack" + (
                                   " (this target's queue rejects publishes when full, on purpose)." if by_design
                                   else "."))


def _probe_duplicates(ctx: Context, rule: Rule) -> Iterator[Finding]:
    for p in ctx.probes:
        dups = p.counters.get("duplicates", 0)
        if dups > 0:
            yield rule.finding("info", "", f"probe {p.target}", "ackscope-probe",
                               {"duplicates": dups, "republished": p.counters.get("republished"),
                                **_probe_labels(p)},
                               f"the probe received {dups:g} messages twice: at-least-once delivery at work "
                               "(a republish after a lost connection, or a redelivery of an ack that was lost).")


def _probe_down(ctx: Context, rule: Rule) -> Iterator[Finding]:
    for p in ctx.probes:
        if not p.up:
            yield rule.finding("warning", "", f"probe {p.target}", "ackscope-probe", _probe_labels(p),
                               f"the probe for ackscope.probe.{p.target} has no open publisher and consumer "
                               "channel: the broker is unreachable to it, refuses its login, or its queue "
                               "conflicts (see the exporter's log).")


RULES: tuple[Rule, ...] = (
    Rule("prefetch-unlimited", "A manual-ack consumer whose channel has prefetch 0 (unlimited); info while it "
         "holds nothing, critical when it holds many unacked messages.",
         f"Set basic.qos prefetch (100-300 is a good start); see {ACKS_GUIDE}, "
         "'Channel Prefetch Setting (QoS)'.", _prefetch_unlimited, needs=(CHANNELS,)),
    Rule("auto-ack-consumer", "A consumer with automatic acknowledgement; a warning when its queue has a backlog "
         "or a high delivery rate.", f"Use manual acks with a prefetch limit where losing a message matters; see "
         f"{ACKS_GUIDE}, 'Acknowledgement Modes'.", _auto_ack, needs=(CHANNELS,)),
    Rule("prefetch-saturated", "A consumer at its prefetch limit while its queue holds ready messages: the "
         "consumer is the bottleneck.", "Add consumers or make processing faster; raise prefetch only if "
         f"processing is fast and uniform. See {ACKS_GUIDE}, 'Channel Prefetch Setting (QoS)'.", _prefetch_saturated,
         needs=(CHANNELS, QUEUE_COUNTS)),
    Rule("prefetch-one", "Prefetch 1 on a queue with a backlog: throughput bound by round trips.",
         f"Raise prefetch (tens to hundreds) unless strict one-at-a-time fairness is required; see {ACKS_GUIDE}, "
         "'Consumer Acknowledgement Modes, Prefetch and Throughput'.", _prefetch_one,
         needs=(CHANNELS, QUEUE_COUNTS)),
    Rule("requeue-loop", "A queue redelivering, over the window, at a rate comparable to its delivery rate: a "
         "poison message, or every consumer requeues.",
         "Find the message consumers reject; nack without requeue to a dead-letter "
         f"exchange after a few attempts; see {ACKS_GUIDE}, 'Negative Acknowledgement and Requeuing of "
         "Deliveries'.", _requeue_loop, needs=(QUEUE_COUNTS,)),
    Rule("publisher-without-confirms", "A channel publishing without confirms and not transactional: "
         "at-most-once; info when it publishes under publish_rate_at_stake over the window.",
         f"Enable publisher confirms and handle them asynchronously; see {ACKS_GUIDE}, "
         "'Publisher Confirms'.",
         _without_confirms, needs=(CHANNELS, CHANNEL_TRANSACTIONAL)),
    Rule("transactional-publisher", "A transactional channel publishing.", "Use publisher confirms instead of "
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
    Rule("unroutable-dropped", "A channel whose messages matched no queue and were dropped silently, over the "
         "window; info for fewer than unroutable_at_stake.",
         "Bind a queue for every routing key in use, publish with mandatory to get them back, or set an "
         f"alternate exchange; see {RELIABILITY_GUIDE}, 'Unroutable Messages'.",
         _unroutable("drop_unroutable", "dropped silently"), needs=(CHANNELS,)),
    Rule("unroutable-returned", "A channel whose mandatory messages matched no queue and were returned, over the "
         "window; info for fewer than unroutable_at_stake.",
         "Check bindings and routing keys; make sure the publisher handles basic.return; see "
         f"{RELIABILITY_GUIDE}, 'Unroutable Messages'.", _unroutable("return_unroutable", "returned"),
         needs=(CHANNELS,)),
    Rule("transient-in-durable-queue", "A durable classic queue holding non-persistent messages (lost on "
         "restart).", "Publish with delivery mode 2 (persistent) where the messages must survive a restart; see "
         f"{RELIABILITY_GUIDE}, 'Queue Durability and Message Persistence'.",
         _transient_in_durable, needs=(QUEUE_COUNTS, QUEUE_PERSISTENT_COUNTS, QUEUE_DURABILITY)),
    Rule("non-durable-queue-backlog", "A non-durable queue holding messages; info for an exclusive or auto-delete "
         "queue.", "Declare the queue durable if "
         f"its messages must survive a restart; see {RELIABILITY_GUIDE}, 'Queue Durability'.", _non_durable_backlog,
         needs=(QUEUE_COUNTS, QUEUE_DURABILITY)),
    Rule("no-consumers-backlog", "Ready messages and no consumer.", "Start or fix the consumers, or set a TTL or "
         "length limit; see RabbitMQ guide 'Queues', 'Queue Length Limit' and 'TTL'.", _no_consumers,
         needs=(QUEUE_COUNTS,)),
    Rule("queue-polled", "A queue without consumers read with basic.get; a warning when gets go without ack "
         "(a fetched message is lost with its reader) or messages pile up.", "Consume with basic.consume, "
         "manual acks and a prefetch limit instead of polling; see RabbitMQ guide 'Consumers', 'Fetching "
         "Individual Messages (\"Pull API\")'.", _polled, needs=(QUEUE_COUNTS,)),
    Rule("heartbeat-disabled", "A connection with heartbeat 0; info when it neither consumes nor publishes "
         "at stake.", "Enable heartbeats (a timeout of 5-20 s is "
         f"common); see {RELIABILITY_GUIDE}, 'Detecting Dead TCP Connections with Heartbeats'.",
         _heartbeat_disabled, needs=(CONNECTION_HEARTBEATS,)),
    Rule("connection-blocked", "Connections blocked, blocking or in flow control.", "Find the alarm or the slow "
         "queue: memory and disk alarms block all publishers; flow control means queues lag behind publishers. "
         "See RabbitMQ guides 'Memory and Disk Alarms' and 'Flow Control'.",
         _blocked, needs=(CONNECTION_STATES,)),
    Rule("memory-alarm", "A node's memory alarm: every publisher in the cluster is blocked.", "Drain or purge "
         "queues, add consumers, raise vm_memory_high_watermark only with memory to spare; see RabbitMQ guide "
         "'Memory and Disk Alarms'.", _alarm("mem", "memory"), needs=(NODE_ALARMS,)),
    Rule("disk-alarm", "A node's disk alarm: every publisher in the cluster is blocked.", "Free disk space or "
         "drain queues; see RabbitMQ guide 'Memory and Disk Alarms'.", _alarm("disk_free", "free disk space"),
         needs=(NODE_ALARMS,)),
    Rule("node-down", "A cluster member that is not running: what lived there (queue leaders and homes, "
         "replicas, client connections).", "Restart the node or find why it stopped (its log, the host); clients "
         "must reconnect to another node and consume again; see RabbitMQ guide 'Clustering'.", _node_down),
    Rule("network-partition", "A node reporting a network partition, naming the nodes it cannot reach.",
         "Restore the network between them; choose a partition handling strategy (pause_minority) and restart "
         "the losing side; see RabbitMQ guide 'Clustering and Network Partitions'.", _partition),
    Rule("quorum-queue-degraded", "A quorum queue with fewer members online than configured, still a majority.",
         "Bring the missing members' nodes back; if a node is gone for good, replace the member "
         "(rabbitmq-queues delete_member / add_member, or grow); see RabbitMQ guide 'Quorum Queues'.",
         lambda ctx, rule: _quorum(ctx, rule, lost=False)),
    Rule("quorum-queue-no-quorum", "A quorum queue with no majority of its members online: publishes to it are "
         "not confirmed and its consumers get nothing.", "Bring members' nodes back until a majority runs; "
         "publishers should time out their confirms and not drop what is unconfirmed; see RabbitMQ guide "
         "'Quorum Queues', 'Availability'.", lambda ctx, rule: _quorum(ctx, rule, lost=True)),
    Rule("queue-leaders-unbalanced", "One node leads most of the cluster's queues (quorum leaders and classic "
         "queues' homes): info above the threshold share, a warning when it leads them all.",
         "Rebalance (rabbitmq-queues rebalance quorum) and declare queues with a leader locator "
         "(queue-leader-locator: balanced); see RabbitMQ guide 'Quorum Queues'.", _leaders_unbalanced),
    Rule("mirrored-queue-unsynchronised", "A classic mirrored queue (RabbitMQ 3.x) with mirrors that are not "
         "synchronised.", "Synchronise (rabbitmqctl sync_queue) or set ha-sync-mode: automatic; better, move to "
         "quorum queues: mirroring is removed in RabbitMQ 4.", _unsynchronised),
    Rule("probe-confirm-latency-high", "A probe's confirm latency p99 above the threshold.", "Look at disk "
         "latency, queue length and alarms; persistent messages wait for the message store's fsync, batched "
         f"every few hundred ms under load; see {ACKS_GUIDE}, 'Latency of Publisher Confirms'.", _probe_latency),
    Rule("probe-message-lost", "A confirmed probe message never delivered within the loss deadline (critical "
         "for persistent messages).", "Check the probe queue's history (restarts, deletions, policies such as "
         f"TTL or length limits) and the broker's logs; see {RELIABILITY_GUIDE}.", _probe_lost),
    Rule("probe-nacked", "The broker nacked probe publishes.", "Check the probe queue's length limit and "
         f"overflow behaviour and the broker's logs; see {ACKS_GUIDE}, 'Negative Acknowledgments for Publishes'.",
         _probe_nacked),
    Rule("probe-duplicates", "The probe received a message twice (at-least-once delivery at work).",
         f"Nothing to fix in the broker; consumers must be idempotent; see {RELIABILITY_GUIDE}, "
         "'At the Consumer'.", _probe_duplicates),
    Rule("probe-down", "A probe target without open publisher and consumer channels.", "Read the exporter's log: "
         "connection refused, login refused, or a probe queue declared with other arguments.", _probe_down),
)


def evaluate(ctx: Context) -> list[Finding]:
    """Every rule's findings, worst first."""
    return list(diagnose(ctx).findings)


def _without_probes(s: Snapshot | None) -> Snapshot | None:
    """The snapshot without the probes' own connections, channels, consumers and queues: the probe rules
    judge what the probes measure; the client rules never judge the client the probes are."""
    if s is None:
        return None
    return replace(s, connections=tuple(c for c in s.connections if not is_probe_connection(c.connection_name)),
                   channels=tuple(c for c in s.channels if not is_probe_connection(c.connection_name)),
                   consumers=tuple(c for c in s.consumers if not is_probe_connection(c.connection_name)),
                   queues=tuple(q for q in s.queues if not q.name.startswith(NAMESPACE)))


def diagnose(ctx: Context) -> Diagnosis:
    """Every rule whose needs the snapshot meets, run; the others named, with what they need."""
    ctx = replace(ctx, snapshot=_without_probes(ctx.snapshot), previous=_without_probes(ctx.previous))
    findings: list[Finding] = []
    skipped = []
    for rule in RULES:
        missing = tuple(n for n in rule.needs if n in ctx.snapshot.unreported)
        if missing:
            skipped.append(NotEvaluated(rule.id, missing))
        else:
            findings.extend(rule.check(ctx, rule))
    return Diagnosis(tuple(worst_first(findings)), tuple(skipped))
