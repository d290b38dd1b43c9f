"""What a channel's publishes put at stake: the queues they reach, whether those queues keep messages across a
restart (durable, neither exclusive nor auto-delete), and whether the messages are persistent, as far as the
source tells. A publisher without confirms or in transactions is a warning when it puts messages at stake, at
any rate; a framework's plumbing (transient messages to exclusive or auto-delete queues, one start-up message)
is info; where the source cannot tell, its rate decides, and the finding says so."""

from __future__ import annotations

from dataclasses import dataclass, field

from ackscope.model.snapshot import QUEUE_PERSISTENT_COUNTS, Channel, Exchange, Queue

from .context import MAX_NAMED, Context, few, num


@dataclass(frozen=True)
class Stakes:
    """True: messages go into a queue that keeps them across a restart; False: they cannot (plumbing, nothing
    lately, one message); None: the source does not tell. `evidence` says what decided it, `why` in a sentence."""

    at_stake: bool | None
    why: str
    evidence: dict = field(default_factory=dict)
    reached_queues: bool = True  # False where its messages reached no queue at all (unroutable-dropped's)


def lately(ctx: Context, record: Channel | Queue | Exchange) -> int | None:
    """What a channel published, or a queue or an exchange took, over the window; on the first poll (no window
    yet), all it counts."""
    return ctx.over_window(record, "publish") if ctx.window_seconds is not None else record.message_stats.publish


def judge(ctx: Context, ch: Channel) -> Stakes:
    return ctx.once(("stakes", ch.name), lambda: _judged(ctx, ch))


def _judged(ctx: Context, ch: Channel) -> Stakes:
    published = lately(ctx, ch)
    if not published:
        return Stakes(False, "it published nothing lately", {"published_in_window": published})
    if published == 1:
        return Stakes(False, "it published a single message lately (a start-up message)",
                      {"published_in_window": 1})
    queues, how = _destinations(ctx, ch, published)
    evidence = {"published_in_window": published, "routing": how}
    if isinstance(queues, bool):  # decided whichever queues it reached; which those are is not known
        return Stakes(queues, "every queue the vhost's publishes reached lately " + (
            "keeps messages across a restart, whichever this channel's reached" if queues else
            "keeps nothing across a restart (exclusive, auto-delete, non-durable, or holding transient messages)"),
            evidence)
    return _into(ctx, queues, evidence)


def destination(ctx: Context, vhost: str, queue: str | None, exchange: str | None) -> Stakes:
    """What messages sent into a queue, or an exchange, of this broker put at stake (a shovel's destination):
    the queue's keeping, or that of the queues the exchange is bound to where the vhost's exchanges were read."""
    if exchange:
        exchanges = [x for x in ctx.snapshot.exchanges if x.vhost == vhost]
        x = next((x for x in exchanges if x.name == exchange), None)
        if x is None:
            return _into(ctx, None, {"routing": f"the bindings of exchange {exchange} were not read"})
        return _into(ctx, _reached(ctx, x, exchanges, []), {"routing": f"the bindings of exchange {exchange}"})
    if queue is None:
        return _into(ctx, None, {"routing": "its destination names neither a queue nor an exchange"})
    return _into(ctx, [ctx.queue(vhost, queue) or queue], {"routing": f"its destination queue {queue}"})


def _into(ctx: Context, queues: list[Queue | str] | None, evidence: dict) -> Stakes:
    """The stakes of messages that go into `queues` (None: not known, `evidence`'s routing says why)."""
    if queues is None:  # why is the evidence's `routing`, said once
        return Stakes(None, "where its messages go is not known", evidence)
    if not queues:
        return Stakes(False, "its messages reached no queue (see unroutable-dropped)", evidence, reached_queues=False)
    kept = [q for q in queues if _keeps(ctx, q) is True]
    if kept:
        evidence["at_stake"] = [_described(ctx, q) for q in kept[:MAX_NAMED]]
        return Stakes(True, f"its messages go into {'durable queue' if len(kept) == 1 else 'durable queues'} "
                      f"{few(q.name for q in kept)}, which keep{'s' if len(kept) == 1 else ''} them across a "
                      "restart", evidence)
    evidence["queues"] = [_described(ctx, q) for q in queues[:MAX_NAMED]]
    if any(_keeps(ctx, q) is None for q in queues):
        return Stakes(None, "whether the queues it reaches keep messages is not known", evidence)
    return Stakes(False, "it reaches only queues that keep nothing across a restart (exclusive, auto-delete, "
                  "non-durable, or holding transient messages)", evidence)


def _keeps(ctx: Context, q: Queue | str) -> bool | None:
    """Whether a queue would keep persistent messages across a broker restart, and holds such messages where
    the source counts them; None where the source does not say (the Prometheus plugin alone: no durability)."""
    if isinstance(q, str) or q.durable is None:
        return None
    if not q.durable or q.exclusive or q.auto_delete:
        return False
    depth = num(q.messages_ready) + num(q.messages_unacked)
    transient = (QUEUE_PERSISTENT_COUNTS not in ctx.snapshot.unreported and q.messages_persistent == 0
                 and depth > 0)
    return not transient


def _described(ctx: Context, q: Queue | str) -> dict:
    if isinstance(q, str):
        return {"queue": q, "durable": "unknown: the queue is not in the snapshot"}
    out: dict = {"queue": q.name, "durable": q.durable}
    if q.exclusive or q.auto_delete:
        out["exclusive" if q.exclusive else "auto_delete"] = True
    depth = num(q.messages_ready) + num(q.messages_unacked)
    if QUEUE_PERSISTENT_COUNTS in ctx.snapshot.unreported or q.messages_persistent is None:
        out["persistent"] = "not reported by the source"
    elif depth:
        out["persistent"] = f"{q.messages_persistent} of the {depth} messages it holds"
    else:
        out["persistent"] = "unknown: it holds no message now"
    return out


@dataclass(frozen=True)
class _Routes:
    """What a vhost's exchanges tell of where its publishes went lately: the exchanges that took publishes, the
    queues each reaches, and what the queues each reaches keep (True, False, None: not known)."""

    took: tuple[Exchange, ...]
    reach: dict[str, list[Queue | str]]
    keeps: dict[str, frozenset[bool | None]]


def _routes(ctx: Context, vhost: str) -> _Routes | None:
    """The vhost's routes, computed once per evaluation; None where its exchanges were not read."""
    def compute() -> _Routes | None:
        exchanges = [x for x in ctx.snapshot.exchanges if x.vhost == vhost]
        if not exchanges:
            return None
        took = tuple(x for x in exchanges if lately(ctx, x))
        by_name = _by_name(ctx, vhost, exchanges) if any(x.name == "" for x in took) else []
        reach = {x.name: _reached(ctx, x, exchanges, by_name) for x in took}
        return _Routes(took, reach, {x.name: frozenset(_keeps(ctx, q) for q in reach[x.name]) for x in took})
    return ctx.once(("routes", vhost), compute)


def _destinations(ctx: Context, ch: Channel, published: int) -> tuple[list[Queue | str] | bool | None, str]:
    """The queues the channel's publishes reach (a name where the queue is not in the snapshot), and how that
    is known: exactly, where the source counts per channel and queue; else inferred from the management API's
    counts, naming only queues the counts tie to this channel. True (or False) where every queue the vhost's
    publishes reached lately keeps messages (or none does), so that which of them this channel reached does not
    matter; None where it does and is not known."""
    if ch.routed_into is not None:
        how = "counted by the broker per channel and queue" + (f" ({ch.routed_match})" if ch.routed_match else "")
        return [ctx.queue(ch.vhost, n) or n for n in ch.routed_into], how
    routes = _routes(ctx, ch.vhost)
    if routes is None:
        return None, "the source does not say which exchange a channel publishes to"
    took = few(x.name or "(default)" for x in routes.took)
    # The one exchange, or the one queue the default exchange fed by name, that took as many publishes lately as
    # the channel published: the channel's, where nothing else took as many.
    exchanges = [x for x in routes.took if x.name and _as_many(lately(ctx, x), published)]
    by_name = [q for q in routes.reach.get("", []) if isinstance(q, Queue) and _as_many(lately(ctx, q), published)]
    # And the only channel of the vhost that published as many (itself among them): two alike are told apart by
    # nothing. The vhost's counts are gathered once, not per channel judged.
    counts = ctx.once(("published lately", ch.vhost), lambda: [num(lately(ctx, c)) for c in ctx.snapshot.channels
                                                               if c.vhost == ch.vhost])
    if len(exchanges) + len(by_name) == 1 and sum(1 for n in counts if _as_many(published, n)) == 1:
        if exchanges:
            x = exchanges[0]
            return routes.reach[x.name], (f"inferred: the channel's {published} publishes lately match the "
                                          f"{lately(ctx, x)} exchange {x.name} took, the only exchange of the vhost "
                                          "that took as many")
        q = by_name[0]
        return by_name, (f"inferred: the channel's {published} publishes lately match the {lately(ctx, q)} queue "
                         f"{q.name} took through the default exchange, the only one that took as many")
    kept = frozenset().union(*(routes.keeps[x.name] for x in routes.took))
    if kept in ({True}, {False}):
        return True in kept, ("inferred: the management API does not say which exchange a channel publishes to; "
                              f"every queue the exchanges that took publishes lately ({took}) reach "
                              + ("keeps messages" if True in kept else "keeps nothing"))
    return None, ("the management API does not say which exchange a channel publishes to, and the queues the "
                  f"exchanges that took publishes lately ({took}) reach differ in what they keep")


def _as_many(taken: int | None, published: int) -> bool:
    """Whether an exchange or queue took as many publishes lately as a channel made. The API's lists are read
    moments apart and its counters move in steps of its statistics interval, so a publisher's count and its
    destination's can stand a step apart: one message, or a twentieth of a busy channel's."""
    return taken is not None and abs(taken - published) <= max(1, published // 20)


def _by_name(ctx: Context, vhost: str, exchanges: list[Exchange]) -> list[Queue]:
    """What the default exchange reached lately (it routes by queue name, and the API counts no binding of it):
    the vhost's queues that took more publishes lately than the named exchanges bound to them did (inferred). An
    RPC server's replies through it are not tied to a durable queue that a named exchange fills."""
    bound: dict[str, int] = {}
    for e in exchanges:
        if e.name:
            for kind, name, _ in e.bindings:
                if kind == "queue":
                    bound[name] = bound.get(name, 0) + num(lately(ctx, e))
    return [q for q in ctx.snapshot.queues if q.vhost == vhost and num(lately(ctx, q)) > bound.get(q.name, 0)]


def _reached(ctx: Context, x: Exchange, exchanges: list[Exchange], by_name: list[Queue]) -> list[Queue | str]:
    """The queues an exchange routes into, through exchange-to-exchange bindings too (`by_name`: what the
    default exchange reached)."""
    named = {e.name: e for e in exchanges}
    seen, todo, queues = {x.name}, [x], {}
    while todo:
        e = todo.pop()
        if e.name == "":
            queues.update((q.name, q) for q in by_name)
        for kind, name, _ in e.bindings:
            if kind == "queue":
                queues[name] = ctx.queue(x.vhost, name) or name
            elif name not in seen and name in named:
                seen.add(name)
                todo.append(named[name])
    return [queues[n] for n in sorted(queues)]


def publishers_into(ctx: Context, q: Queue) -> tuple[list[Channel], str]:
    """The channels whose publishes reached queue `q` over the window, and how that is known: counted per channel
    and queue where the source counts so, else tied to it by the exchanges' counts, else the one channel of the
    vhost that published as many as the queue took (both inferred); none, and why, where nothing tells."""
    found, how, publishing = [], "the source does not say which channels publish into the queue", []
    for ch in ctx.snapshot.channels:
        published = lately(ctx, ch) if ch.vhost == q.vhost else None
        if not published:
            continue
        queues, why = _destinations(ctx, ch, published)
        if isinstance(queues, list) and any((x.name if isinstance(x, Queue) else x) == q.name for x in queues):
            found.append(ch)
            how = why
        elif isinstance(queues, list):  # known to publish elsewhere: never tied to this queue by its count
            continue
        publishing.append((ch, published))
    took = lately(ctx, q)
    alike = [ch for ch, published in publishing if took and _as_many(took, published)]
    if not found and len(alike) == 1:
        return alike, (f"inferred: the channel's {lately(ctx, alike[0])} publishes lately match the {took} the queue "
                       "took, and no other channel of the vhost published as many")
    return found, how
