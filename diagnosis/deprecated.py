"""Deprecated features the broker says are in use today (/api/deprecated-features/used, RabbitMQ 3.13 and later):
permitted now, logged by the broker, and refused by a later release. upgrade-check (diagnosis/upgrade.py) says what
a given release will refuse; this says, on the release running, that something uses them now."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from ackscope.model.findings import Finding
from ackscope.model.snapshot import Queue, Snapshot

from .context import Context, Rule, few

def _queue(q: Queue) -> str:
    return q.name if q.vhost == "/" else f"{q.name} (vhost {q.vhost})"


# What uses a feature, where the snapshot shows it: the broker lists the feature, not its users (inferred from them).
USERS: dict[str, tuple[str, Callable[[Snapshot], list[str]]]] = {
    "transient_nonexcl_queues": ("queues neither durable nor exclusive", lambda s: [
        _queue(q) for q in s.queues if q.durable is False and q.exclusive is False]),
    "global_qos": ("channels with a channel-wide prefetch (basic.qos global)", lambda s: [
        c.identity or c.connection_name or c.name for c in s.channels if c.global_prefetch_count]),
    "queue_master_locator": ("queues declared with x-queue-master-locator", lambda s: [
        _queue(q) for q in s.queues if any(k == "x-queue-master-locator" for k, _ in q.arguments)]),
}
# A phase in which a feature still works only because the node's configuration permits it
# (deprecated_features.permit.<feature> = true): the next release may remove it outright.
PERMITTED_BY_CONFIGURATION = "denied_by_default"


def _used(ctx: Context, rule: Rule) -> Iterator[Finding]:
    s = ctx.snapshot
    for f in s.deprecated_used or ():
        evidence = {"feature": f.name, "phase": f.phase, "doc_url": f.doc_url,
                    "said_by": "the broker (/api/deprecated-features/used)"}
        users = ""
        if f.name in USERS:
            what, find = USERS[f.name]
            found = find(s)
            if found:
                evidence["used_by"] = few(found)
                evidence["used_by_from"] = f"inferred: the {what}"
                users = f" by {few(found)}"
        configured = f.phase == PERMITTED_BY_CONFIGURATION
        yield rule.finding(
            "warning" if configured else "info", "", f"deprecated feature {f.name}", None, evidence,
            f"the broker says deprecated feature {f.name} is in use{users} ({f.phase.replace('_', ' ')}"
            + (": it works only because this node's configuration permits it" if configured else "")
            + "); a later release refuses it.")


def _before_the_list(release: tuple[int, int] | None) -> str | None:
    if release is not None and release < (3, 13):
        return "RabbitMQ before 3.13 keeps no list of deprecated features in use"
    return None


RULES = (
    Rule("deprecated-feature-used", "A deprecated feature the broker says is in use today (its "
         "/api/deprecated-features/used, 3.13 and later), with what uses it where the snapshot shows it: info while "
         "the release permits it by default, a warning where only the node's configuration permits it.",
         "Follow the feature's doc_url and stop using it before the release that refuses it (`ackscope upgrade-check "
         "--to` names which); see RabbitMQ guide 'Deprecated Features'.", _used, inapplicable=_before_the_list),
)
