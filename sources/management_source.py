"""The source of a broker whose management statistics are on: the management API's lists (management/), and from
each node's Prometheus plugin (prometheus_plugin/) only what the API does not count. /api/overview first, then
every list in parallel, all within one deadline, normalised into a Snapshot.

/api/overview goes first, alone: it proves the API is reachable and the login good, so a broker that is
down or a wrong password costs one request per read, not a burst against every endpoint. A list that fails
after it costs only its own part: the poll is partial (Snapshot.unread), and the rules that need what the list
gives say "not evaluated" (RabbitMQ 4.0 and 4.3 answer a paginated /api/vhosts with HTTP 500, for one).
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import replace
from typing import Any

from ackscope.core.secret import Secret
from ackscope.model import snapshot as facts
from ackscope.model.snapshot import Snapshot
from ackscope.model.source import FATAL, FetchError, SourceFailed, as_fetch_error, partial

from .http import Readers
from .management import normalise, protocols
from .management.client import PAGES_UP_TO, ManagementClient
from .prometheus_plugin import normalise as plugin_normalise
from .prometheus_plugin.listeners import plugin_urls
from .selection import Selection

log = logging.getLogger("ackscope.sources")

LISTS = ("nodes", "vhosts", "connections", "channels", "consumers", "queues")
MISSING_FOR = 15.0  # seconds a field must be missing from every answer before it is said to be
# What a poll misses when one list fails while the others answer: the rules that need it say "not evaluated".
MISSED_WITHOUT = {
    "nodes": frozenset({facts.NODE_ALARMS}),
    "vhosts": frozenset(),
    "connections": frozenset({facts.CONNECTIONS, facts.CONNECTION_HEARTBEATS, facts.CONNECTION_STATES}),
    "channels": frozenset({facts.CHANNELS, facts.CHANNEL_TRANSACTIONAL}),
    "consumers": frozenset({facts.CHANNELS}),
    "queues": frozenset({facts.QUEUE_COUNTS, facts.QUEUE_DURABILITY, facts.QUEUE_PERSISTENT_COUNTS,
                         facts.QUEUE_DEAD_LETTERED_HELD}),
    "metrics": frozenset({facts.DEAD_LETTER_COUNTS}),
    # A vhost whose exchanges could not be read leaves what its unconfirmed publishers put at stake unknown: the
    # rule then judges them by their rate, and says so.
    "exchanges": frozenset(),
    **protocols.MISSED_WITHOUT,
}
# What only each node's Prometheus plugin counts, read beside the lists where the broker lists the plugin's
# listener: the messages dead-lettered or dropped, by reason (a quorum queue's delivery limit drops messages
# silently from RabbitMQ 4.0, and the management API counts none of it), and its quorum commit latency.
PLUGIN_SAMPLES = frozenset((*plugin_normalise.DEAD_LETTERED, *plugin_normalise.RAFT_COMMIT_LATENCY,
                            *plugin_normalise.PROTOCOL_COUNTS))


class ManagementSource:
    name = "management"

    def __init__(self, base_url: str, username: str, password: Secret, *, timeout: float = 5.0,
                 deadline: float = 10.0, verify: bool | str = True, selection: Selection = Selection(),
                 pages_up_to: float = PAGES_UP_TO):
        """ValueError when `base_url` is not an http(s) URL without credentials. Lists of more than
        `pages_up_to` objects are asked for in one answer."""
        self.client = ManagementClient(base_url, username, password, timeout=timeout, verify=verify)
        self.base_url = self.client.base_url
        self.deadline = deadline  # seconds one read may take, all endpoints together
        self.selection = selection
        self.pages_up_to = pages_up_to
        self._pool = ThreadPoolExecutor(max_workers=len(LISTS) + 2, thread_name_prefix="ackscope-fetch")
        self._built = normalise.Built()  # the last poll's channels and consumers, for the next
        self._plugins = Readers(username, password, timeout=timeout, verify=verify, what="Prometheus plugin")
        self._missing_said: set[str] = set()
        self._missing_since: dict[str, float] = {}  # a field missing from every answer since (monotonic)

    def read(self) -> Snapshot:
        taken_at, deadline = time.time(), time.monotonic() + self.deadline
        raw, errors = self.fetch(deadline)
        per_node = raw.pop("metrics", None)
        self._say_missing(raw)
        while True:
            try:
                snapshot = normalise.snapshot(raw, taken_at, self.selection, self._built)
                break
            except normalise.MalformedResponse as e:
                # A list that is not the shape its endpoint has costs its part, as one that did not answer does.
                errors.append(FetchError(e.endpoint, "malformed", str(e).split(": ", 1)[-1]))
                if e.endpoint == "overview" or sum(1 for e in errors if e.endpoint in LISTS) == len(LISTS):
                    raise SourceFailed(errors) from None
                raw[e.endpoint] = []
        if per_node is None:  # no node lists its plugin: the counters are not known, and that is no error
            snapshot = replace(snapshot, unreported=snapshot.unreported | {facts.DEAD_LETTER_COUNTS})
        else:
            counted, latency, deliveries = per_node
            snapshot = replace(snapshot, dead_lettered=counted, protocol_counts=deliveries, nodes=tuple(
                replace(n, quorum_commit_latency_seconds=latency[n.name]) if latency.get(n.name) is not None else n
                for n in snapshot.nodes))
        snapshot, failed = protocols.read(snapshot, self.client, deadline, self._pool)
        errors = sorted([*errors, *failed], key=lambda e: e.endpoint)
        return partial(snapshot, errors, frozenset().union(*(MISSED_WITHOUT[e.endpoint] for e in errors)))

    def _say_missing(self, raw: dict[str, Any]) -> None:
        """Fields a release (one ackscope has never seen, say) does not send: each said once, the rest read. A
        field is said once it has been missing from every answer for MISSING_FOR seconds: a node just started,
        or a queue just declared, has no statistics for a few seconds, whatever its release."""
        now, missing = time.monotonic(), set(normalise.missing_fields(raw))
        # An empty list tells nothing of its fields: a field of one keeps the time it was first missing.
        judged, before = {e for e in normalise.EXPECTED if raw.get(e)}, self._missing_since
        self._missing_since = {**{f: since for f, since in before.items() if f.split(".")[0] not in judged},
                               **{f: before.get(f, now) for f in missing}}
        new = sorted(f for f, since in self._missing_since.items()
                     if now - since >= MISSING_FOR and f not in self._missing_said)
        if new:
            self._missing_said.update(new)
            version = raw["overview"].get("rabbitmq_version") if isinstance(raw["overview"], dict) else None
            log.warning("RabbitMQ %s sends no %s: what %s is not reported, the rest is", version or "(unknown)",
                        ", ".join(new), "they give" if len(new) > 1 else "it gives")

    def _node_metrics(self, urls: dict[str, str], deadline: float) -> tuple[tuple, dict[str, float | None], tuple]:
        """Every listed node's dead-letter counters, quorum commit latency and deliveries per protocol, each from
        the node's own plugin (they are per node)."""
        found, latency, deliveries = [], {}, []
        for node, url in sorted(urls.items()):
            text = self._plugins.at(url).get("metrics", "/metrics", {}, deadline, "text/plain").decode("utf-8", "replace")
            samples = plugin_normalise.parse(text, "metrics", PLUGIN_SAMPLES)
            counted = plugin_normalise.dead_lettered(samples, node)
            if counted is None:
                raise FetchError("metrics", "incomplete", f"{url}/metrics counts no dead-lettered messages (a "
                                 "RabbitMQ before 3.10, or an answer cut short)")
            found.extend(counted)
            latency[node] = plugin_normalise.quorum_commit_latency(samples)
            deliveries.extend(plugin_normalise.protocol_counts(samples, node))
        return tuple(found), latency, tuple(deliveries)

    def fetch(self, deadline: float | None = None) -> tuple[dict[str, Any], list[FetchError]]:
        """Every endpoint's JSON ([] for a list that failed), the nodes' dead-letter counters ("metrics", where
        the overview lists their plugins), and what failed; SourceFailed when the overview fails, every list
        does, or one fails for a reason that is the configuration's (FATAL). Bounded by `deadline` (monotonic; by
        default the source's deadline from now)."""
        deadline = time.monotonic() + self.deadline if deadline is None else deadline
        try:
            raw = {"overview": self.client.fetch("overview", deadline)}
        except FetchError as e:
            raise SourceFailed([e]) from None
        totals = normalise.object_totals(raw["overview"])
        futures = {self._pool.submit(self.client.fetch, name, deadline,
                                     paginate=totals.get(name, 0) <= self.pages_up_to): name for name in LISTS}
        urls = plugin_urls(raw["overview"], self.base_url)
        if urls:
            futures[self._pool.submit(self._node_metrics, urls, deadline)] = "metrics"
        done, pending = wait(futures, timeout=max(0.0, deadline - time.monotonic()))
        errors = [FetchError(futures[f], "deadline", f"no complete answer within the {self.deadline:g}s "
                             "poll deadline") for f in pending]
        for future in done:
            if future.exception() is not None:
                errors.append(as_fetch_error(futures[future], future.exception()))
            else:
                raw[futures[future]] = future.result()
        if sum(1 for e in errors if e.endpoint in LISTS) == len(LISTS) or any(e.reason in FATAL for e in errors
                                                                              if e.endpoint in LISTS):
            raise SourceFailed(errors)
        for e in errors:
            if e.endpoint in LISTS:
                raw[e.endpoint] = []
        raw["exchanges"], raw["bindings"] = self._routes(raw["channels"], deadline, errors)
        return raw, sorted(errors, key=lambda e: e.endpoint)

    def _routes(self, channels: Any, deadline: float, errors: list[FetchError]) -> tuple[list, list]:
        """The exchanges and bindings of each vhost where a channel publishes without confirms or in transactions
        (a healthy broker has none: nothing is read); a vhost that fails is left out whole, its error added."""
        vhosts = [v for v in normalise.publishing_at_risk(channels) if self.selection.vhost(v)]

        def both(vhost: str) -> tuple[Any, Any]:
            return (self.client.fetch("exchanges", deadline, vhost=vhost),
                    self.client.fetch("bindings", deadline, vhost=vhost))
        futures = {self._pool.submit(both, v): v for v in vhosts}
        done, pending = wait(futures, timeout=max(0.0, deadline - time.monotonic()))
        exchanges, bindings = [], []
        for future in futures:
            if future in pending:
                errors.append(FetchError("exchanges", "deadline", f"no complete answer within the {self.deadline:g}s "
                                         "poll deadline"))
            elif future.exception() is not None:
                errors.append(as_fetch_error("exchanges", future.exception()))
            elif all(isinstance(part, list) and all(isinstance(i, dict) for i in part) for part in future.result()):
                exchanges.extend(future.result()[0])
                bindings.extend(future.result()[1])
            else:
                errors.append(FetchError("exchanges", "malformed", f"the exchanges or bindings of vhost "
                                         f"{futures[future]!r} are not JSON lists of objects"))
        return exchanges, bindings

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.client.close()
