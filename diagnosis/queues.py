"""Rules about queues: durability against what they hold, backlogs nobody consumes, polling."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from ackscope.core.durations import describe
from ackscope.model.findings import STAMPED, Finding
from ackscope.model.snapshot import (DEAD_LETTER_COUNTS, QUEUE_COUNTS, QUEUE_DEAD_LETTERED_HELD, QUEUE_DURABILITY,
                                     QUEUE_PERSISTENT_COUNTS, Queue)

from .context import MAX_NAMED, RELIABILITY_GUIDE, Context, Rule, consumers_named, few, named_channels, num, rounded
from .dead_letter_cycles import routed
from .stakes import publishers_into


def _transient_in_durable(ctx: Context, rule: Rule) -> Iterator[Finding]:
    for q in ctx.snapshot.queues:
        if q.durable is not True or q.type != "classic" or q.messages_persistent is None:
            continue
        total = num(q.messages_ready) + num(q.messages_unacked)
        transient = total - q.messages_persistent
        if transient > _arriving(ctx, q):
            yield rule.finding("warning", q.vhost, f"queue {q.name}", consumers_named(ctx, q),
                               {"messages": total, "persistent": q.messages_persistent, "transient": transient},
                               f"durable queue {q.name} holds {transient} transient messages: the queue survives "
                               "a broker restart, they do not.")


# How long the broker may take to count a persistent message as persistent: 4.3.6's classic queues, loaded, counted a
# healthy publisher's last messages (two a second, all persistent) as not yet persistent across polls a second apart;
# 3.10.8, loaded, listed three persistent messages as ready and none persistent at a poll (its persistent count comes
# with the queue's statistics, later than its depth).
PERSISTENT_COUNT_LAG = 5.0


def _arriving(ctx: Context, q: Queue) -> int:
    """How many of the queue's messages may be too new for its persistent count: all that was published into it (or
    what its depth grew by, where more) since the newest poll at least PERSISTENT_COUNT_LAG seconds old (the previous poll, one kept of the window, or
    the window's start); all of its messages where no poll is that old, or the queue is newer."""
    now = ctx.snapshot.taken_at
    held = num(q.messages_ready) + num(q.messages_unacked)
    polls = [s for s in (ctx.previous, ctx.earlier, ctx.window_start)
             if s is not None and s.taken_at <= now - PERSISTENT_COUNT_LAG]
    if not polls:
        return held
    then = next((p for p in max(polls, key=lambda s: s.taken_at).queues if (p.vhost, p.name) == (q.vhost, q.name)),
                None)
    if then is None:
        return held
    # The management API leaves out a counter never counted: a queue nobody published into has none. Dead-lettered
    # messages arrive without moving it: what the depth grew by is a floor on what arrived.
    published = num(q.message_stats.publish) - num(then.message_stats.publish)
    grew = held - (num(then.messages_ready) + num(then.messages_unacked))
    return max(published, grew) if published >= 0 else held  # a counter that fell: the queue was declared anew


def _non_durable_backlog(ctx: Context, rule: Rule) -> Iterator[Finding]:
    for q in ctx.snapshot.queues:
        total = num(q.messages_ready) + num(q.messages_unacked)
        if q.durable is False and total >= ctx.thresholds.non_durable_backlog:
            # An exclusive or auto-delete queue dies with its consumer by design (a framework's reply or
            # event queue): losing it on a restart is what it is for, so info.
            temporary = q.exclusive is True or q.auto_delete is True
            yield rule.finding("info" if temporary else "warning", q.vhost, f"queue {q.name}", consumers_named(ctx, q),
                               {"messages": total, "durable": False, "exclusive": q.exclusive},
                               f"non-durable queue {q.name} holds {total} messages: a broker restart deletes the "
                               "queue and all of them.")


def _gets(ctx: Context, q: Queue) -> tuple[int | None, int | None]:
    """basic.get fetches from the queue over the window: with manual ack, and with no ack."""
    return ctx.over_window(q, "get"), ctx.over_window(q, "get_no_ack")


def _age(ctx: Context, q: Queue) -> dict:
    """The evidence of how long the queue's oldest message has waited, and where that comes from."""
    oldest = ctx.oldest_message(q)
    if oldest is None:
        return {}
    return {"oldest_message_age_s": rounded(oldest.age_seconds),
            "age_from": "the head message's timestamp property (its publisher's clock)" if oldest.source == STAMPED
            else "inferred: a lower bound, ready messages no delivery has reached since (assumes messages leave "
                 "only by delivery)"}


def _no_consumers(ctx: Context, rule: Rule) -> Iterator[Finding]:
    for q in ctx.snapshot.queues:
        # A stream's messages_ready is what it retains, read again by whoever subscribes: no backlog.
        if not q.stream and q.consumers == 0 and num(q.messages_ready) >= ctx.thresholds.no_consumers_backlog \
                and not any(_gets(ctx, q)):  # a queue polled with basic.get is read: queue-polled judges it
            yield rule.finding("warning", q.vhost, f"queue {q.name}", None,
                               {"ready": q.messages_ready, "consumers": 0, **_age(ctx, q)},
                               f"{q.messages_ready} messages wait in {q.name} and nothing consumes from it.")


def _waiting(ctx: Context, rule: Rule) -> Iterator[Finding]:
    limit = ctx.thresholds.oldest_message_seconds
    for q in ctx.snapshot.queues:
        oldest = ctx.oldest_message(q)
        if q.stream or not num(q.consumers) or oldest is None or oldest.age_seconds < limit:
            continue  # nobody consuming is no-consumers-backlog's
        at_least = "" if oldest.source == STAMPED else "at least "
        yield rule.finding(
            "warning", q.vhost, f"queue {q.name}", consumers_named(ctx, q),
            {"ready": q.messages_ready, "unacked": q.messages_unacked, "consumers": q.consumers,
             "delivered_over_window": ctx.over_window(q, "deliver_get"), **_age(ctx, q)},
            f"the oldest message of {q.name} has waited {at_least}{describe(oldest.age_seconds)} though "
            f"{q.consumers} consumer(s) are attached: they take nothing from it, or less than arrives.")


def _dead_lettering_stuck(ctx: Context, rule: Rule) -> Iterator[Finding]:
    for q in ctx.snapshot.queues:
        # Held at the window's start (or, where it held none yet then, at the poll before) and no fewer now: the
        # target has confirmed none of them since.
        then, since = ctx.at_window_start(q), ctx.window_start
        if then is None or not then.messages_dlx:
            then, since = ctx.previous_queue(q), ctx.previous
        held, before = q.messages_dlx, then.messages_dlx if then is not None else None
        # One poll is no trend; an earlier poll's record may be this very one (an idle queue's, unchanged, is
        # shared between snapshots), so the polls' times tell, not the records.
        if not held or not before or held < before or since is None or since.taken_at >= ctx.snapshot.taken_at:
            continue
        limit = q.max_length
        total = num(q.messages_ready) + num(q.messages_unacked) + held
        full = limit is not None and total >= 0.9 * limit
        exchange, key, why = _dead_letters_not_taken(ctx, q)
        yield rule.finding(
            "critical" if full else "warning", q.vhost, f"queue {q.name}", consumers_named(ctx, q),
            {"dead_lettered_held": held, "held_earlier": before, "dead_letter_strategy": q.dead_letter_strategy,
             "dead_letter_target": q.dead_letter_target, "dead_letter_exchange": exchange, "routing_key": key,
             "why": why, "messages": total, "max_length": limit},
            f"quorum queue {q.name} holds {held} dead-lettered messages that {q.dead_letter_target} has not confirmed "
            f"({before} earlier in the window): at-least-once dead-lettering stopped, and they stay in the queue"
            + (f", which is near its length limit of {limit}: publishers are refused next" if full else "")
            + f". Why: {'; '.join(why)}.")


# What a full queue does that refuses what is routed to it (the at-least-once dead-letterer's publish included).
_REFUSING = ("reject-publish", "reject-publish-dlx")


def _dead_letters_not_taken(ctx: Context, q: Queue) -> tuple[str, str, list[str]]:
    """Where the queue's dead letters should go and what does not take them, in words: the exchange, the routing
    key, and one fact per reason (an exchange that does not exist, no binding for the key, a queue full with
    reject-publish), each destination's; "not known: ..." where the snapshot does not say (its settings not shown,
    the vhost's exchanges not read, each message's own key, a headers exchange)."""
    if q.dead_letters is None:
        return "not known", "not known", ["not known: the source does not show the queue's settings"]
    key = q.dead_letter_routing_key
    said_key = (f"'{key}' (the queue's dead-letter routing key)" if key is not None
                else "each message's own (not known: the queue sets no dead-letter routing key)")
    name = q.dead_letter_exchange
    if name is None:
        return "none set", said_key, ["the queue sets no dead-letter exchange"]
    if name == "":
        if key is None:
            return "the default exchange", said_key, ["not known: the default exchange routes each message to the "
                                                      "queue its own routing key names, which the snapshot does not "
                                                      "hold"]
        return "the default exchange", said_key, _not_taken_by(ctx, q.vhost, [(key, "the default exchange")])
    exchanges = {x.name: x for x in ctx.snapshot.exchanges if x.vhost == q.vhost}
    if not exchanges:  # a vhost read lists at least its default exchange
        failed = [u.message for u in ctx.snapshot.unread if u.endpoint == "exchanges"]
        return f"exchange '{name}'", said_key, [f"not known: the exchanges of vhost '{q.vhost}' were not read at "
                                                "this poll" + (f" ({failed[0]})" if failed else "")]
    x = exchanges.get(name)
    if x is None:
        return f"exchange '{name}'", said_key, [f"exchange '{name}' does not exist in vhost '{q.vhost}'"]
    exchange = f"exchange '{name}' ({x.type or 'type not reported'})"
    if not x.bindings:
        return exchange, said_key, [f"exchange '{name}' has no bindings: it routes them nowhere"]
    if x.type not in ("direct", "fanout", "topic"):
        return exchange, said_key, [f"not judged: exchange '{name}' routes "
                                    + ("by the messages' headers, which are not read" if x.type == "headers"
                                       else "by rules of its type that ackscope does not follow")]
    if key is None and (x.type != "fanout" or any(kind == "exchange" for kind, _, _ in x.bindings)):
        return exchange, said_key, [f"not known: exchange '{name}' routes by each message's own routing key, which "
                                    "the snapshot does not hold"]
    reached = routed(x, key or "", exchanges)
    if reached is None:
        return exchange, said_key, [f"not known: exchange '{name}' routes through an exchange that is not read, of "
                                    "a type not reported, or a headers exchange"]
    if not reached:
        keys = few(f"'{k}'" for _, _, k in x.bindings)
        return exchange, said_key, [f"exchange '{name}' has no binding for key '{key}' (its binding keys: {keys}): it "
                                    "routes them nowhere"]
    return exchange, said_key, _not_taken_by(ctx, q.vhost, reached)


def _not_taken_by(ctx: Context, vhost: str, reached: list[tuple[str, str]]) -> list[str]:
    """Why each queue the dead letters reach (its name, and the route in words) does not take them, one fact each;
    where every one shows room, that it is not known why."""
    first: dict[str, str] = {}
    for name, route in reached:
        first.setdefault(name, route)  # a queue bound twice: its first route
    facts, room = [], []
    for name, route in first.items():
        t = ctx.queue(vhost, name)
        if t is None:
            facts.append(f"not known: queue '{name}' (through {route}) is not among the queues read: it does not "
                         "exist, or the queue selection leaves it out")
            continue
        depth = num(t.messages_ready) + num(t.messages_unacked)
        if t.overflow_mode in _REFUSING and t.max_length is not None and depth >= t.max_length:
            facts.append(f"queue '{name}' (through {route}) refuses them: full, {depth} messages against its limit "
                         f"of {t.max_length}, overflow {t.overflow_mode}")
        elif t.overflow_mode in _REFUSING and t.max_length_bytes is not None:
            facts.append(f"not known: queue '{name}' (through {route}) refuses them when full (overflow "
                         f"{t.overflow_mode}, a limit of {t.max_length_bytes} bytes), and its size in bytes is not "
                         "read")
        else:
            room.append(f"queue '{name}' ({depth} messages" + (f" against its limit of {t.max_length}, overflow "
                                                               f"{t.overflow_mode}" if t.max_length is not None else "")
                        + ")")
    if not facts:
        return [f"not known: every queue they reach takes them as far as the snapshot shows ({few(room)})"]
    more = len(facts) - MAX_NAMED
    return facts[:MAX_NAMED] + ([f"and {more} more queues they reach that refuse them or are not judged"]
                                if more > 0 else [])


def _polled(ctx: Context, rule: Rule) -> Iterator[Finding]:
    t = ctx.thresholds
    for q in ctx.snapshot.queues:
        with_ack, no_ack = _gets(ctx, q)
        if q.consumers != 0 or not (with_ack or no_ack):
            continue
        ready, seconds, gets = num(q.messages_ready), ctx.window_seconds, num(with_ack) + num(no_ack)
        losing, behind = bool(no_ack), ready >= t.no_consumers_backlog
        yield rule.finding("warning" if losing or behind else "info", q.vhost, f"queue {q.name}", None,
                           {"gets_with_ack": with_ack, "gets_without_ack": no_ack, "ready": ready,
                            "get_rate": rounded(gets / seconds), "window_seconds": rounded(seconds)},
                           f"{q.name} has no consumer and is read by polling with basic.get "
                           f"({gets} fetches in the last {seconds:.0f}s)"
                           + (f", {no_ack} of them without ack: a fetched message is gone even if the reader "
                              "dies before handling it" if losing else "")
                           + (f"; {ready} messages wait: a get costs a round trip per message, a consumer "
                              "is pushed them" if behind else "") + ".")



# -- messages the broker gives up on ---------------------------------------------------------------------
# The nodes' dead-letter counters' strategy labels, and whether each means the queue has a dead-letter target.
_TARGETED = {"disabled": False, "at_most_once": True, "at_least_once": True}


@dataclass(frozen=True)
class Removal:
    """Messages one reason removed over the window from queues of one type with one dead-letter strategy: what
    the nodes counted (per node, queue type, reason and strategy: no queue named), and the queues that could
    have done it. A queue is a candidate only where its settings can produce the reason and strategy and its own
    counters show messages leaving it without acks; a queue deleted within the window that could have done it
    is named as such. The count is the queue's only where it is the one candidate: else it is unattributed."""

    reason: str  # delivery_limit | expired | maxlen | rejected
    queue_type: str
    dropped: bool | None  # no dead-letter target: gone; None where neither the counters nor the queue say
    counted: int | None  # the nodes' count over the window; None where the counters were not read
    nodes: tuple[str, ...]  # where they were counted
    candidates: tuple[tuple[Queue, int], ...]  # live queues that could have, with what left each without acks
    deleted: tuple[Queue, ...]  # queues at the window's start, deleted since, whose settings could have

    @property
    def queue(self) -> Queue | None:
        """The one queue that could have done it; None where none or several could (unattributed)."""
        return self.candidates[0][0] if len(self.candidates) == 1 and not self.deleted else None

    @property
    def many(self) -> int:
        """How many messages: the nodes' count where read and unattributed; for the one candidate, no more than
        its own counters show leaving it (the rest of the nodes' count came from queues not seen: deleted between
        polls, another vhost's, ackscope's own probes')."""
        left = sum(n for _, n in self.candidates)
        if self.counted is None:
            return left
        return min(self.counted, left) if self.queue is not None else self.counted

    def evidence(self, ctx: Context) -> dict:
        how = "dropped" if self.dropped else "dead_lettered" if self.dropped is False else "dead_lettered_or_dropped"
        counted = {f"{how}_on_nodes": self.counted, "nodes": list(self.nodes)} if self.counted is not None else {}
        out = {"reason": self.reason, **counted, "window_seconds": rounded(ctx.window_seconds),
               "queue_type": self.queue_type}
        q = self.queue
        if q is not None:
            left = self.candidates[0][1]
            refused = q.overflow_mode in ("reject-publish", "reject-publish-dlx")
            out |= {"left_queue_without_ack": left, "delivery_limit": q.delivery_limit,
                    "dead_letter_target": q.dead_letter_target, "overflow": q.overflow_mode,
                    "max_length": q.max_length, "redelivered": ctx.over_window(q, "redeliver"),
                    "attribution": "inferred: " + (
                        "the broker counts these per node, not per queue; this queue is the only one whose settings "
                        f"can do it and whose counters show messages leaving it without acks ({left})"
                        if self.counted is not None else
                        "its Prometheus plugin was not read, so nothing counts removals; this queue's counters show "
                        f"{left} messages leaving it without acks after redeliveries")
                    + (", an upper bound: the broker counts the publishes the queue refused as published"
                       if refused else "")}
        else:
            out |= {"attribution": "unattributed: the broker counts these per node, not per queue",
                    "could_have": [f"queue {c.name} ({c.vhost}): {left} left it without acks"
                                   for c, left in self.candidates[:MAX_NAMED]] or "no live queue",
                    "deleted_in_window": [f"queue {d.name} ({d.vhost})" for d in self.deleted[:MAX_NAMED]]
                    or "none seen"}
        return out

    def unattributed(self) -> str:
        """Why no queue is named, in words."""
        if not self.candidates and not self.deleted:
            return ("no live queue's settings and counters fit: a queue declared and deleted between two polls, or "
                    "one whose counters have not moved yet")
        could = [f"{c.name}" for c, _ in self.candidates] + [f"{d.name} (deleted in the window)" for d in self.deleted]
        return f"one of {few(could)} could have"


def removals(ctx: Context, reasons: tuple[str, ...]) -> Iterator[Removal]:
    """What each of `reasons` removed over the window. With the nodes' dead-letter counters, each count (reason,
    queue type, strategy) goes with the queues whose settings can produce it (see _can_remove) and whose counters
    show messages leaving them without acks. Without the counters only the delivery limit is inferred: from a
    limited quorum queue that redelivered and lost messages without acks, one Removal per such queue."""
    counted = ctx.dead_lettered_over_window()
    if counted is None:
        if "delivery_limit" in reasons:
            for q in ctx.snapshot.queues:
                left = ctx.removed_without_ack(q) if _can_remove(ctx, q, "delivery_limit", None) else None
                if left and q.type == "quorum":
                    yield Removal("delivery_limit", "quorum", None if q.dead_letters is None else not q.dead_letters,
                                  None, (), ((q, left),), ())
        return
    start = ctx.window_start
    for (reason, queue_type, strategy), nodes in sorted(counted.items()):
        if reason not in reasons:
            continue
        targeted = _TARGETED.get(strategy)
        found = tuple((q, left) for q in ctx.snapshot.queues
                      if q.type == queue_type and _can_remove(ctx, q, reason, targeted)
                      for left in (ctx.removed_without_ack(q),) if left)
        # Seen at the window's start or at the poll before, gone now.
        seen = {(q.vhost, q.name): q for s in (start, ctx.previous) if s is not None for q in s.queues}
        deleted = tuple(q for _, q in sorted(seen.items()) if q.type == queue_type
                        and ctx.queue(q.vhost, q.name) is None and _settings_fit(q, reason, targeted))
        yield Removal(reason, queue_type, None if targeted is None else not targeted, sum(nodes.values()),
                      tuple(sorted(nodes)), found, deleted)


def _settings_fit(q: Queue, reason: str, targeted: bool | None) -> bool:
    """Whether the queue's settings can remove a message for `reason` with a dead-letter target or without one
    (`targeted`; None: either). Settings not shown fit anything: they cannot rule a queue out."""
    if targeted is not None and q.dead_letters is not None and q.dead_letters != targeted:
        return False
    if reason == "maxlen":  # reject-publish refuses the new message instead: it never removes by length
        return q.length_limited is not False and q.overflow_mode in (None, "drop-head", "reject-publish-dlx")
    if reason == "delivery_limit":
        return q.type == "quorum" and (q.delivery_limit is not None or not q.settings_shown)
    return True  # any queue's messages can expire (a publisher's per-message TTL) or be rejected


def _can_remove(ctx: Context, q: Queue, reason: str, targeted: bool | None) -> bool:
    """Whether the live queue can be where the nodes counted `reason`: its settings fit, and it did what the
    reason needs over the window (the delivery limit: redeliveries; a rejection: a delivery)."""
    if not _settings_fit(q, reason, targeted):
        return False
    if reason == "maxlen" and q.max_length is not None:
        # Drop-head removes only from a full queue: one that held fewer at the window's start than its limit less
        # what was published into it since can never have been full.
        start = ctx.at_window_start(q)
        return num(start.messages_ready if start is not None else 0) + num(ctx.over_window(q, "publish")) \
            >= q.max_length
    if reason == "delivery_limit":
        return bool(ctx.over_window(q, "redeliver"))
    if reason == "rejected":
        return bool(ctx.over_window(q, "deliver_get"))
    return True


def _where(ctx: Context, r: Removal) -> tuple[str, str]:
    """A removal's vhost and object: its queue's where it is attributed, else the nodes' count itself."""
    q = r.queue
    if q is not None:
        return q.vhost, f"queue {q.name}"
    return "", f"{r.queue_type} queues on {few(r.nodes) or 'the nodes'}: {r.reason}"


def _delivery_limit(ctx: Context, rule: Rule) -> Iterator[Finding]:
    for r in removals(ctx, ("delivery_limit",)):
        q = r.queue
        what = ("dropped: no dead-letter exchange is set, so messages the broker had confirmed are gone"
                if r.dropped else "dead-lettered" + (f" to {q.dead_letter_target}" if q is not None else "")
                if r.dropped is False else "dead-lettered or dropped (the queue's settings are not shown)")
        whose = (f"of quorum queue {q.name} ({q.delivery_limit} deliveries)" if q is not None
                 else f"of a quorum queue, unattributed: {r.unattributed()}")
        vhost, obj = _where(ctx, r)
        yield rule.finding("critical" if r.dropped else "warning", vhost, obj,
                           consumers_named(ctx, q) if q is not None else None, r.evidence(ctx),
                           f"in the last {ctx.window_seconds:.0f}s about {r.many} messages reached the delivery limit "
                           f"{whose} and were {what}. Its consumers return them (reject or nack with requeue) until the "
                           "broker gives up on them.",
                           None if r.dropped else "Read what reaches the dead-letter exchange and find why the "
                           "consumers return these messages; see RabbitMQ guide 'Quorum Queues', 'Poison Message "
                           "Handling'.")


# Why a reason removes messages, for the finding's sentence; and how grave a drop is: a length limit destroys
# messages the broker confirmed to their publisher (critical); a consumer's reject without requeue is its own
# choice about a message it received (warning); a TTL drops by design (info).
_WHY = {"expired": "expired (their TTL passed)", "maxlen": "pushed out of the full queue (its length limit, "
        "overflow drop-head)", "rejected": "rejected by consumers without requeue"}
_GRAVITY = {"expired": "info", "maxlen": "critical", "rejected": "warning"}


def _dropped(ctx: Context, rule: Rule) -> Iterator[Finding]:
    for r in removals(ctx, tuple(_WHY)):
        if not r.dropped:
            continue
        q = r.queue
        evidence = r.evidence(ctx)
        who, publishers = None, []
        if q is not None:
            publishers, how = publishers_into(ctx, q)
            who = named_channels(publishers) if publishers else consumers_named(ctx, q)
            evidence |= {"publishers": few(ch.identity or ch.connection_name or ch.name for ch in publishers)
                         or "not known", "publishers_from": how}
        # Refused, not silently dropped: a reject-publish-dlx queue nacks the publish it dead-letters.
        nacked = q is not None and q.overflow_mode == "reject-publish-dlx"
        # Gone after a confirm where its publishers confirm (or cannot be told): critical. Publishers known to use
        # no confirms were told nothing; a length limit may drop by design there (a last-value queue).
        unconfirmed = q is not None and bool(publishers) and all(ch.confirm is False for ch in publishers)
        severity = "warning" if (nacked or unconfirmed) and r.reason == "maxlen" else _GRAVITY[r.reason]
        vhost, obj = _where(ctx, r)
        whose = f"of {q.name}" if q is not None else f"of {r.queue_type} queues, unattributed ({r.unattributed()})"
        yield rule.finding(severity, vhost, obj, who, evidence,
                           f"in the last {ctx.window_seconds:.0f}s about {r.many} messages {whose} were "
                           f"{_WHY[r.reason]} and dropped: no dead-letter exchange catches them."
                           + (" A TTL drops by design; if these messages matter, dead-letter them."
                              if r.reason == "expired" else
                              " Their publishers use no confirms: nobody was told they were safe; if the limit "
                              "drops by design, dead-letter what matters." if r.reason == "maxlen" and unconfirmed else
                              " Their publishers were told they were safe (a confirm comes when a message is "
                              "queued): they are gone." if r.reason == "maxlen" and not nacked else
                              " Their publishers were nacked (overflow reject-publish-dlx)." if nacked else ""))


RULES: tuple[Rule, ...] = (
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
    Rule("messages-waiting", "A queue with consumers whose oldest message has waited longer than "
         "oldest_message_seconds (300): from the head message's timestamp where publishers stamp it, else a lower "
         "bound from the queue's history (inferred). The stuck queue a depth threshold misses.",
         "Find why the consumers take nothing from it: stalled or at their prefetch (consumer-stalled, "
         "unacked-at-prefetch), fewer or slower than the rate in (add consumers), or a single active consumer "
         "holding it; see RabbitMQ guide 'Consumers'.", _waiting, needs=(QUEUE_COUNTS,)),
    Rule("dead-lettering-stuck", "A quorum queue dead-lettering at-least-once whose dead-lettered messages no "
         "target confirms over the window (messages_dlx held, not falling); critical near its length limit. Names "
         "the exchange, the routing key and what does not take them (an exchange that does not exist, no binding "
         "for the key, a queue full with reject-publish) from the vhost's exchanges and bindings, or says not known.",
         "Make the dead-letter target take them: create the dead-letter exchange, bind a queue for the routing "
         "key, or free the target queue (its length limit with reject-publish); see RabbitMQ guide 'Dead "
         "Lettering', 'At-Least-Once Dead Lettering'.", _dead_lettering_stuck,
         needs=(QUEUE_COUNTS, QUEUE_DEAD_LETTERED_HELD)),
    Rule("queue-polled", "A queue without consumers read with basic.get; a warning when gets go without ack "
         "(a fetched message is lost with its reader) or messages pile up.", "Consume with basic.consume, "
         "manual acks and a prefetch limit instead of polling; see RabbitMQ guide 'Consumers', 'Fetching "
         "Individual Messages (\"Pull API\")'.", _polled, needs=(QUEUE_COUNTS,)),
    Rule("delivery-limit-reached", "Messages that reached a quorum queue's delivery limit over the window: "
         "critical when dropped (no dead-letter exchange: confirmed messages are gone, RabbitMQ 4's default limit "
         "of 20 included), a warning when dead-lettered. From the nodes' dead-letter counters where the "
         "Prometheus plugin is read, attributed to the queue by its own counters (inferred).",
         "Set a dead-letter exchange on the queue (policy key dead-letter-exchange) so what the limit removes is "
         "kept, and find why consumers return these messages; see RabbitMQ guide 'Quorum Queues', 'Poison "
         "Message Handling'.", _delivery_limit, needs=(QUEUE_COUNTS,)),
    Rule("messages-dropped", "Messages a queue without a dead-letter exchange dropped over the window because "
         "they expired (info: a TTL drops by design), overflowed its length limit or were rejected without "
         "requeue (warning), from the nodes' dead-letter counters, attributed to the queue (inferred).",
         "Set a dead-letter exchange where these messages matter (policy key dead-letter-exchange); raise the "
         "length limit or use overflow reject-publish so publishers are told; see RabbitMQ guide 'Dead Letter "
         "Exchanges'.", _dropped, needs=(QUEUE_COUNTS, DEAD_LETTER_COUNTS)),
)
