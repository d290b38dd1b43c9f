"""Dead-letter cycles: queues that dead-letter into each other. The broker drops a message that would come back to a
queue it was dead-lettered from unless a consumer rejected it somewhere on the way round; a work ⇄ retry loop that a
message enters by expiry, a length limit or a delivery limit loses it at the second hop, and the broker says so once
in its log (diagnosis/breaks.py reads that). Named here from the topology alone, before any loss.

A hop is claimed only where the broker's own routing is known: the default exchange with a dead-letter routing key,
or a named exchange of a known type whose binding keys match that key (fanout: any key). A dead-letter exchange
that routes by each message's own key, a headers exchange or one not read makes no claim."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache

from ackscope.core.durations import describe
from ackscope.model.findings import Finding
from ackscope.model.snapshot import QUEUE_COUNTS, Exchange, Queue

from .context import Context, Rule


@dataclass(frozen=True)
class Hop:
    """One queue's dead letters reaching the next queue of a cycle, and how."""

    queue: Queue
    to: str  # the next queue's name
    route: str  # in words: the exchange, its type and the key


def _topic_matches(pattern: str, key: str) -> bool:
    """Whether a topic binding key matches a routing key: `*` stands for one word, `#` for zero or more."""
    words, keys = pattern.split("."), key.split(".")

    @lru_cache(maxsize=None)
    def match(i: int, j: int) -> bool:
        if i == len(words):
            return j == len(keys)
        if words[i] == "#":
            return any(match(i + 1, k) for k in range(j, len(keys) + 1))
        return j < len(keys) and words[i] in ("*", keys[j]) and match(i + 1, j + 1)
    return match(0, 0)


def routed(x: Exchange, key: str, exchanges: dict[str, Exchange], seen: frozenset[str] = frozenset()
            ) -> list[tuple[str, str]] | None:
    """The queues exchange `x` routes `key` to, each with the route in words, through exchange-to-exchange
    bindings too; None where the routing is not known (a headers exchange, a type not reported, a bound exchange
    not read)."""
    if x.type not in ("direct", "fanout", "topic"):
        return None
    found: list[tuple[str, str]] = []
    for kind, destination, binding_key in x.bindings:
        if x.type == "direct" and binding_key != key or x.type == "topic" and not _topic_matches(binding_key, key):
            continue
        how = f"exchange '{x.name}' ({x.type}" + (f", binding key '{binding_key}')" if x.type != "fanout" else ")")
        if kind == "queue":
            found.append((destination, how))
        elif destination not in seen:
            inner = exchanges.get(destination)
            further = routed(inner, key, exchanges, seen | {x.name}) if inner is not None else None
            if further is None:
                return None
            found.extend((q, f"{how}, then {route}") for q, route in further)
    return found


def _hops(q: Queue, exchanges: dict[str, Exchange]) -> list[Hop]:
    """Where the queue's dead letters go, as far as the broker's routing is known; none where it is not."""
    key = q.dead_letter_routing_key
    if not q.dead_letters or key is None:  # each message's own routing key: where it goes is the publisher's
        return []
    if q.dead_letter_exchange == "":
        return [Hop(q, key, f"the default exchange, routing key '{key}'")]
    x = exchanges.get(q.dead_letter_exchange)
    reached = routed(x, key, exchanges) if x is not None else None
    return [Hop(q, to, f"{how}, routing key '{key}'") for to, how in reached or ()]


def _without_rejection(q: Queue) -> str | None:
    """How a message can leave the queue as a dead letter without a consumer rejecting it, in words; None where it
    cannot as far as its settings show (a publisher's per-message TTL is not shown anywhere)."""
    ways = []
    if q.message_ttl_ms is not None:
        ways.append(f"expiry (its message TTL of {describe(q.message_ttl_ms / 1000)})")
    if q.length_limited and q.overflow_mode in ("drop-head", "reject-publish-dlx"):
        ways.append("its length limit")
    if q.type == "quorum" and q.delivery_limit is not None:
        ways.append(f"its delivery limit of {q.delivery_limit}")
    return " or ".join(ways) or None


def cycles(ctx: Context) -> Iterator[list[Hop]]:
    """The dead-letter cycles among the snapshot's queues, each once: a walk that visits every queue and hop once
    (a long dead-letter chain costs its length, not its square), yielding the loop each hop back into the walk's
    own path closes."""
    by_vhost: dict[str, list[Queue]] = {}
    for q in ctx.snapshot.queues:
        if q.dead_letters:
            by_vhost.setdefault(q.vhost, []).append(q)
    for vhost, queues in sorted(by_vhost.items()):
        exchanges = {x.name: x for x in ctx.snapshot.exchanges if x.vhost == vhost}
        hops = {q.name: _hops(q, exchanges) for q in queues}
        done: set[str] = set()
        for first in sorted(hops):
            if first in done:
                continue
            # The walk's path: each queue on it with the hops from it not yet followed.
            path: list[Hop] = []
            on_path = {first: 0}
            pending = [iter(hops[first])]
            while pending:
                hop = next(pending[-1], None)
                if hop is None:
                    pending.pop()
                    left = path.pop().to if path else first
                    done.add(left)
                    on_path.pop(left, None)
                    continue
                if hop.to in on_path:  # back into the path: the loop from there to this hop
                    yield path[on_path[hop.to]:] + [hop]
                elif hop.to in hops and hop.to not in done:
                    on_path[hop.to] = len(path) + 1
                    path.append(hop)
                    pending.append(iter(hops[hop.to]))


def _cycle(ctx: Context, rule: Rule) -> Iterator[Finding]:
    for path in cycles(ctx):
        ways = [(h.queue, _without_rejection(h.queue)) for h in path]
        if any(way is None for _, way in ways):
            continue  # a consumer's rejection on the way round keeps messages going: the broker allows that cycle
        names = [h.queue.name for h in path] + [path[0].queue.name]
        loop = " → ".join(names)
        vhost = path[0].queue.vhost
        yield rule.finding(
            "warning", vhost, f"dead-letter cycle {loop}", None,
            {"cycle": loop,
             "hops": [f"{h.queue.name} dead-letters by {way}, through {h.route}, into {h.to}"
                      for h, (_, way) in zip(path, ways)],
             "messages_in_the_cycle_now": sum((q.messages_ready or 0) + (q.messages_unacked or 0) for q, _ in ways)},
            f"queues {', '.join(names[:-1])} dead-letter into each other ({loop}), and each can dead-letter a message "
            "without a consumer rejecting it: a message that goes round by " + "; then by ".join(
                f"{way} in {q.name}" for q, way in ways)
            + " is dropped by the broker when it would come back to a queue it already left (its cycle rule), "
              "after its publisher was told it was safe.")


RULES: tuple[Rule, ...] = (
    Rule("dead-letter-cycle", "Queues that dead-letter into each other where a message can go round without a "
         "consumer rejecting it (expiry, a length limit, a delivery limit): the broker drops it at the second hop. "
         "From the queues' settings and the dead-letter exchanges' bindings, before any loss.",
         "Break the cycle's blind spot: let a consumer reject (basic.reject without requeue) on the way round, or "
         "send the retry queue's dead letters to the work queue only after a rejection, or give the last hop a "
         "parking queue outside the cycle; see RabbitMQ guide 'Dead Letter Exchanges', 'Dead-Lettered Messages "
         "Routing Cycles'.", _cycle, needs=(QUEUE_COUNTS,)),
)
