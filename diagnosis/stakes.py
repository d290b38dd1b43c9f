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
    if queues is None:
        return Stakes(None, "where its messages go is not known (" + how + ")", evidence)
    if not queues:
        return Stakes(False, "its messages reached no queue (see unroutable-dropped)", evidence)
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
    queues each reaches, and whether each reaches a queue that keeps messages."""

    took: tuple[Exchange, ...]
    reach: dict[str, list[Queue | str]]
    at_stake: dict[str, bool]


def _routes(ctx: Context, vhost: str) -> _Routes | None:
    """The vhost's routes, computed once per evaluation; None where its exchanges were not read."""
    def compute() -> _Routes | None:
        exchanges = [x for x in ctx.snapshot.exchanges if x.vhost == vhost]
        if not exchanges:
            return None
        took = tuple(x for x in exchanges if lately(ctx, x))
        by_name = _by_name(ctx, vhost, exchanges) if any(x.name == "" for x in took) else []
        reach = {x.name: _reached(ctx, x, exchanges, by_name) for x in took}
        return _Routes(took, reach, {x.name: any(_keeps(ctx, q) is True for q in reach[x.name]) for x in took})
    return ctx.once(("routes", vhost), compute)


def _destinations(ctx: Context, ch: Channel, published: int) -> tuple[list[Queue | str] | None, str]:
    """The queues the channel's publishes reach (a name where the queue is not in the snapshot), and how that
    is known; None where it is not."""
    if ch.routed_into is not None:
        return [ctx.queue(ch.vhost, n) or n for n in ch.routed_into], "counted by the broker per channel and queue"
    routes = _routes(ctx, ch.vhost)
    if routes is None:
        return None, "the source does not say which exchange a channel publishes to"
    took = few(x.name or "(default)" for x in routes.took)
    if routes.took and len(set(routes.at_stake.values())) == 1:
        every = sorted({q.name if isinstance(q, Queue) else q: q for x in routes.took for q in routes.reach[x.name]
                        }.items())
        return [q for _, q in every], (
            "inferred: the management API does not say which exchange a channel publishes to; every exchange of "
            f"the vhost that took publishes lately ({took}) routes "
            + ("into a queue that keeps messages" if next(iter(routes.at_stake.values())) else "only into queues "
               "that keep nothing"))
    matched = [x for x in routes.took if lately(ctx, x) == published]
    if len(matched) == 1:
        x = matched[0]
        return routes.reach[x.name], (f"inferred: the channel's {published} publishes lately equal those exchange "
                                      f"{x.name or '(default)'} took, the only exchange of the vhost that took as "
                                      "many")
    return None, ("the management API does not say which exchange a channel publishes to, and the exchanges "
                  f"of the vhost that took publishes lately ({took}) differ in what they put at stake")


def _by_name(ctx: Context, vhost: str, exchanges: list[Exchange]) -> list[Queue]:
    """What the default exchange reached lately (it routes by queue name, and the API counts no binding of it):
    the vhost's queues that took more publishes lately than the named exchanges bound to them did (inferred). An
    RPC server's replies through it are not tied to a durable queue that a named exchange fills."""
    bound: dict[str, int] = {}
    for e in exchanges:
        if e.name:
            for kind, name in e.bindings:
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
        for kind, name in e.bindings:
            if kind == "queue":
                queues[name] = ctx.queue(x.vhost, name) or name
            elif name not in seen and name in named:
                seen.add(name)
                todo.append(named[name])
    return [queues[n] for n in sorted(queues)]
