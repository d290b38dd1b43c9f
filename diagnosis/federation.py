"""Rules about federation links (rabbitmq_federation): a federated exchange or queue that no longer receives from
its upstream."""

from __future__ import annotations

from collections.abc import Iterator

from ackscope.model.findings import Finding
from ackscope.model.snapshot import FEDERATION_LINKS, FederationLink

from .context import Context, Named, Rule


def _key(k: FederationLink) -> tuple[str, str, str, str]:
    return k.vhost, k.type, k.local, k.upstream


def _not_running(ctx: Context, rule: Rule) -> Iterator[Finding]:
    start = ctx.window_start or ctx.previous
    if start is None:
        return  # a link starts in a moment: one poll cannot tell it stopped
    before = {_key(k): k for k in start.federation_links}
    for k in ctx.snapshot.federation_links:
        then = before.get(_key(k))
        if k.status == "running" or then is None or then.status == "running":
            continue
        yield rule.finding(
            "warning", k.vhost, f"{k.type} {k.local}", Named(connection_name=f"Federation link (upstream: {k.upstream}"
                                                                             f", {k.type}: {k.local})",
                                                            client="RabbitMQ federation"),
            {"upstream": k.upstream, "type": k.type, "local": k.local, "upstream_name": k.upstream_name,
             "status": k.status, "status_at_window_start": then.status, "error": k.error, "uri": k.uri, "node": k.node,
             "source": "inferred: the upstream is another broker, whose queues are not read here; messages for this "
                       f"{k.type} wait there (or, for an exchange, are not routed here at all)"},
            f"federation link from upstream {k.upstream} to {k.type} {k.local} is {k.status}, not receiving"
            + (f": {k.error}" if k.error else "") + ".")


RULES: tuple[Rule, ...] = (
    Rule("federation-link-not-running", "A federation link that was not running (starting, error) at the window's "
         "start and is not now: the federated exchange or queue receives nothing from that upstream while messages "
         "for it wait upstream, or are not routed at all. The link's error is shown as the broker gives it.",
         "Read the link's error: an upstream URI that does not resolve or refuses the login, a missing upstream "
         "exchange or queue; fix the upstream (rabbitmqctl list_parameters federation-upstream) and see "
         "RabbitMQ guide 'Federation Plugin', 'Troubleshooting'.", _not_running, needs=(FEDERATION_LINKS,)),
)
