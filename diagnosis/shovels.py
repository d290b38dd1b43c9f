"""Rules about shovels, the broker's own consumers and publishers (rabbitmq_shovel): what their ack mode puts at
stake, a shovel that stopped while its source fills, a shovel its destination blocks."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import unquote, urlsplit

from ackscope.model.findings import Finding
from ackscope.model.snapshot import QUEUE_COUNTS, SHOVEL_STATES, SHOVELS, Queue, Shovel

from . import stakes
from .context import RELIABILITY_GUIDE, Context, Named, Rule, num, rounded

SHOVEL_GUIDE = "RabbitMQ guide 'Shovel plugin'"
# What each ack mode weaker than on-confirm loses when the shovel, its connections or a node fails.
LOSES = {
    "no-ack": "every message it has received and not yet published: the source forgot each on delivery (up to its "
              "prefetch-count in flight, and what waits in its buffers)",
    "on-publish": "every message it has published and the destination has not yet written: the source forgot each "
                  "once it was sent, before the destination confirmed it",
}


def here(uri: str, vhost: str | None) -> str | None:
    """The vhost of this broker that a shovel URI names, or None for another broker's: a URI without a host
    ("amqp://", "amqp:///orders") is the shovel's own node, in the vhost its path names, else the shovel's own
    (RabbitMQ's rabbit_shovel_parameters). A URI by network address may be this broker too: not inferred."""
    first = uri.split(", ")[0]
    try:
        parts = urlsplit(first)
    except ValueError:
        return None
    if parts.hostname:
        return None
    path = unquote(parts.path[1:]) if parts.path.startswith("/") else ""
    return path or vhost or "/"


def _source_queue(ctx: Context, v: Shovel) -> Queue | None:
    vhost = here(v.source_uri, v.vhost)
    return ctx.queue(vhost, v.source_queue) if vhost is not None and v.source_queue else None


def _who(v: Shovel) -> Named:
    """The shovel as a culprit: the connection it opens is named "Shovel <name>" by the broker."""
    return Named(connection_name=f"Shovel {v.name}", client="RabbitMQ shovel", identity=f"Shovel {v.name}")


def _described(v: Shovel) -> dict:
    return {"shovel": v.name, "type": v.type, "state": v.state, "node": v.node, "ack_mode": v.ack_mode,
            "source": v.source_queue or (f"exchange {v.source_exchange}" if v.source_exchange else None),
            "source_uri": v.source_uri,
            "destination": v.destination_queue or (f"exchange {v.destination_exchange}"
                                                   if v.destination_exchange is not None else None),
            "destination_uri": v.destination_uri}


def _at_window_start(ctx: Context) -> dict[tuple[str, str], Shovel]:
    start = ctx.window_start or ctx.previous
    return ctx.once("shovels-at-start", lambda: {v.key: v for v in start.shovels} if start else {})


def _forwarded(ctx: Context, v: Shovel) -> int | None:
    """What the shovel forwarded over the window (4.1 and later count it); None where not known."""
    then = _at_window_start(ctx).get(v.key)
    if v.forwarded is None or then is None or then.forwarded is None:
        return None
    return v.forwarded - then.forwarded if v.forwarded >= then.forwarded else v.forwarded


def _without_confirms(ctx: Context, rule: Rule) -> Iterator[Finding]:
    for v in ctx.snapshot.shovels:
        if v.ack_mode not in LOSES or not (v.moving or v.state is None):
            continue
        vhost = here(v.destination_uri, v.vhost)
        if vhost is None:
            judged = stakes.Stakes(None, "its destination is another broker, whose queues are not read here",
                                   {"routing": "the destination is on another broker"})
        else:
            judged = stakes.destination(ctx, vhost, v.destination_queue, v.destination_exchange)
        moved = _forwarded(ctx, v)
        if judged.at_stake is False or moved == 0:
            severity = "info"
        else:
            severity = "warning"
        yield rule.finding(
            severity, v.vhost or "", f"shovel {v.name}", _who(v),
            {**_described(v), "forwarded": v.forwarded, "forwarded_in_window": moved,
             "loses_on_failure": LOSES[v.ack_mode], "stakes": judged.why, **judged.evidence},
            f"shovel {v.name} {'moves' if v.state else 'is defined to move'} messages with ack-mode {v.ack_mode}"
            f"{'' if v.state else ' (its state is not known)'}: a failure of the shovel, its connections or "
            f"a node loses {LOSES[v.ack_mode].split(':')[0]}; {judged.why}.")


def _not_running(ctx: Context, rule: Rule) -> Iterator[Finding]:
    before = _at_window_start(ctx)
    if ctx.window_start is None and ctx.previous is None:
        return  # a shovel starts or restarts in a moment: one poll cannot tell it stopped
    alarms = sorted(n.name for n in ctx.snapshot.nodes if n.mem_alarm or n.disk_free_alarm)
    for v in ctx.snapshot.shovels:
        then = before.get(v.key)
        if v.state is None or v.moving or then is None or then.moving:
            continue
        q = _source_queue(ctx, v)
        evidence = {**_described(v), "reason": v.reason, "state_at_window_start": then.state}
        if q is None:
            severity, what = "warning", "its source is not a queue of this broker: whether messages wait is not known"
        else:
            depth, start = num(q.messages_ready), ctx.at_window_start(q)
            grew = depth - num(start.messages_ready) if start is not None else None
            near = q.max_length is not None and depth >= 0.9 * q.max_length
            evidence |= {"source_ready": depth, "source_grew_in_window": grew, "max_length": q.max_length,
                         "nodes_in_alarm": alarms, "window_seconds": rounded(ctx.window_seconds)}
            if not grew or grew <= 0:
                severity = "info"
                what = f"{depth} messages wait in {q.name}, which is not growing"
            else:
                severity = "critical" if near or alarms else "warning"
                what = (f"{q.name} grew by {grew} to {depth} messages"
                        + (f", near its length limit of {q.max_length}" if near else "")
                        + (f"; nodes in alarm ({', '.join(alarms)}) block its publishers next" if alarms else ""))
        yield rule.finding(severity, v.vhost or "", f"shovel {v.name}", _who(v), evidence,
                           f"shovel {v.name} is {v.state}, not moving messages"
                           + (f" ({v.reason})" if v.reason else "") + f": {what}.")


def _blocked(ctx: Context, rule: Rule) -> Iterator[Finding]:
    before = {v.key: v for v in ctx.previous.shovels} if ctx.previous else {}
    for v in ctx.snapshot.shovels:
        then = before.get(v.key)
        if v.state != "blocked" or then is None or then.state != "blocked":
            continue
        vhost = here(v.destination_uri, v.vhost)
        alarms = sorted(n.name for n in ctx.snapshot.nodes if n.mem_alarm or n.disk_free_alarm) if vhost else []
        yield rule.finding(
            "warning", v.vhost or "", f"shovel {v.name}", _who(v),
            {**_described(v), "pending": v.pending, "nodes_in_alarm": alarms or None},
            f"shovel {v.name} is blocked by its destination ({v.destination_uri or 'this broker'}), which stopped "
            "reading its publishes (a resource alarm there)"
            + (f": nodes {', '.join(alarms)} are in alarm" if alarms else "")
            + (f"; {v.pending} messages wait in the shovel" if v.pending else "") + ".")


RULES: tuple[Rule, ...] = (
    Rule("shovel-without-confirms", "A running shovel whose ack-mode is weaker than on-confirm: no-ack forgets a "
         "message at the source once received, on-publish once published, before the destination confirms it. A "
         "warning when it moves messages into a queue that keeps them (as publisher-without-confirms judges a "
         "queue) or where that is not known (another broker's queue); info where its destination keeps nothing "
         "or it forwarded nothing over the window. The ack mode is read from the shovel's definition "
         "(/api/parameters/shovel): a static shovel's is not known.",
         f"Set ack-mode on-confirm on the shovel (its definition's \"ack-mode\"); see {SHOVEL_GUIDE}, "
         f"'Acknowledgement Modes', and {RELIABILITY_GUIDE}.", _without_confirms, needs=(SHOVELS, QUEUE_COUNTS)),
    Rule("shovel-not-running", "A shovel that was not running (starting, terminated) at the window's start and is "
         "not now: a warning while its source queue grows, or where its source is not a queue of this broker; "
         "critical when that queue nears its length limit or a node is in a resource alarm; info while messages "
         "wait without growing.", "Read the shovel's reason and the node's log (\"Shovel ... could not "
         "connect\"): a destination down or refusing the login, a source queue deleted; restart it with "
         f"'rabbitmqctl restart_shovel'; see {SHOVEL_GUIDE}.", _not_running, needs=(SHOVEL_STATES, QUEUE_COUNTS)),
    Rule("shovel-blocked", "A shovel its destination has blocked for two polls (state blocked: the destination's "
         "connection is under a resource alarm), where the broker reports it (RabbitMQ 4.x).",
         "Clear the destination's memory or disk alarm; see RabbitMQ guide 'Memory and Disk Alarms'.",
         _blocked, needs=(SHOVEL_STATES,),
         # Measured: 3.10.8 says "running" with its destination in alarm; 4.0.5 and 4.3.6 give blocked_status.
         inapplicable=lambda release: "RabbitMQ before 4.0 reports no shovel's blocked status (3.10 measured)"
         if release is not None and release < (4, 0) else None),
)
