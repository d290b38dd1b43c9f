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
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import replace
from typing import Any

from ackscope.core.secret import Secret
from ackscope.model import snapshot as facts
from ackscope.model.snapshot import Snapshot
from ackscope.model.source import FATAL, FetchError, SourceFailed, as_fetch_error, partial

from . import routing
from .http import Readers
from .management import normalise, protocols, transfers
from .management.client import PAGES_UP_TO, ManagementClient
from .management.session_reads import SessionReads
from .prometheus_plugin import normalise as plugin_normalise
from .prometheus_plugin.listeners import MANAGEMENT, plugin_urls
from .reachability import Rejoining, plugins_to_ask, reconciled
from .selection import Selection

log = logging.getLogger("ackscope.sources")

LISTS = ("nodes", "vhosts", "connections", "channels", "consumers", "queues")
REMEMBERED_WITHIN = 1.0  # seconds a member the listeners do not list has to answer from its plugin
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
    # Where the plugin's per-channel counts were not read, the exchanges' counts are what tells (inferred).
    "routed": frozenset(),
    **protocols.MISSED_WITHOUT,
    **transfers.MISSED_WITHOUT,
}
# What only each node's Prometheus plugin counts, read beside the lists where the broker lists the plugin's
# listener: the messages dead-lettered or dropped, by reason (a quorum queue's delivery limit drops messages
# silently from RabbitMQ 4.0, and the management API counts none of it), and its quorum commit latency.
PLUGIN_SAMPLES = frozenset((*plugin_normalise.DEAD_LETTERED, *plugin_normalise.RAFT_COMMIT_LATENCY,
                            *plugin_normalise.PROTOCOL_COUNTS, plugin_normalise.UNREACHABLE_PEERS,
                            "rabbitmq_identity_info"))  # which node a given URL's plugin is


class ManagementSource:
    name = "management"

    def __init__(self, base_url: str, username: str, password: Secret, *, timeout: float = 5.0,
                 deadline: float = 10.0, verify: bool | str = True, selection: Selection = Selection(),
                 pages_up_to: float = PAGES_UP_TO, prometheus_urls: Sequence[str] = ()):
        """ValueError when `base_url` or a URL of `prometheus_urls` is not an http(s) URL without credentials.
        Lists of more than `pages_up_to` objects are asked for in one answer. `prometheus_urls`: each member's
        plugin, asked at every poll instead of where the listeners say (the node asked lists none of the members
        it does not reach)."""
        self.client = ManagementClient(base_url, username, password, timeout=timeout, verify=verify)
        self.base_url = self.client.base_url
        self.deadline = deadline  # seconds one read may take, all endpoints together
        self.selection = selection
        self.pages_up_to = pages_up_to
        self._pool = ThreadPoolExecutor(max_workers=len(LISTS) + 2, thread_name_prefix="ackscope-fetch")
        self._built = normalise.Built()  # the last poll's channels and consumers, for the next
        self._sessions = SessionReads()  # each AMQP 1.0 connection's last sessions, asked again when it moved
        self._plugins = Readers(username, password, timeout=timeout, verify=verify, what="Prometheus plugin")
        self._given = tuple(self._plugins.at(url).base_url for url in prometheus_urls)
        self._named: dict[str, str] = {}  # a given plugin's URL: the node its /metrics last named
        self._missing_said: set[str] = set()
        self._missing_since: dict[str, float] = {}  # a field missing from every answer since (monotonic)
        # Each member's plugin, as the listeners last listed it: a node lists only the listeners of the members it
        # reaches, and under a partition the others' plugins still say whether they run.
        self._known_urls: dict[str, str] = {}
        self._known_apis: dict[str, str] = {}  # and each member's management API, to ask a cut-off node's own view
        self._peers = Readers(username, password, timeout=timeout, verify=verify, what="management plugin")
        self._rejoining = Rejoining()

    def read(self) -> Snapshot:
        taken_at, deadline = time.time(), time.monotonic() + self.deadline
        raw, errors = self.fetch(deadline)
        per_node = raw.pop("metrics", None)
        heard = raw.pop("plugins_heard")
        routed = raw.pop("routed", [])
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
        snapshot = routing.attribute(snapshot, routed)
        if per_node is None:  # no node lists its plugin, or the read failed: the counters are not known
            snapshot = replace(snapshot, unreported=snapshot.unreported | {facts.DEAD_LETTER_COUNTS})
            # A paused member hangs the read past the deadline, its own plugin or the node asked's (seen on 4.3.6):
            # a member listed not running that was not heard is silent, or once resumed and answering it is taken
            # as cut off rather than rejoining. One whose plugin answered before the read failed was heard.
            self._rejoining.heard(snapshot.nodes, dict.fromkeys(heard), time.monotonic())
        else:
            counted, latency, deliveries, answered = per_node
            nodes = tuple(replace(n, quorum_commit_latency_seconds=latency[n.name])
                          if latency.get(n.name) is not None else n for n in snapshot.nodes)
            answered = self._rejoining.heard(nodes, answered, time.monotonic())
            unseen = [n.name for n in nodes if n.running is False and n.name in answered]
            snapshot = replace(snapshot, dead_lettered=counted, protocol_counts=deliveries,
                               nodes=reconciled(nodes, snapshot.overview.node, answered, self._views(unseen)))
        if not any(e.endpoint == "nodes" for e in errors):
            # Members that left the cluster are forgotten, as the node list says: only where it was read. A poll
            # without it (a 3.10 node's API waits for its peers' net ticks in a split's first seconds) forgot
            # them all, and the cut-off members, whose listeners are no longer listed, were never asked again.
            members = {n.name for n in snapshot.nodes}
            self._known_urls = {node: url for node, url in self._known_urls.items() if node in members}
            self._known_apis = {node: url for node, url in self._known_apis.items() if node in members}
        snapshot, failed = protocols.read(snapshot, self.client, deadline, self._pool, self._sessions)
        snapshot, moved = transfers.read(snapshot, self.client, deadline, self._pool, self.selection)
        errors = sorted([*errors, *failed, *moved], key=lambda e: e.endpoint)
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

    def _views(self, unseen: list[str]) -> dict[str, tuple[str, ...]]:
        """What each node cut off from the one asked lists as not running itself, from its own management API:
        which side of a partition it is on. Asked side by side, each within a second of its own (only under a
        partition, so a poll may outlast its deadline by that second); one that does not answer is left out."""
        def view(node: str) -> tuple[str, ...] | None:
            url = self._known_apis.get(node)
            if url is None:
                return None
            try:
                listed = self._peers.at(url).json("nodes", "/api/nodes", {"columns": "name,running"},
                                                  time.monotonic() + REMEMBERED_WITHIN)
            except FetchError:
                return None
            if not isinstance(listed, list):
                return None
            return tuple(sorted(str(n.get("name")) for n in listed if isinstance(n, dict) and n.get("running") is False))
        found = dict(zip(unseen, self._pool.map(view, unseen)))
        return {node: seen for node, seen in found.items() if seen is not None}

    def _node_metrics(self, plugins: dict[str, tuple[str, bool]], reached: set[str], deadline: float,
                      heard: set[str]) -> tuple[tuple, dict[str, float | None], tuple, dict[str, int | None]]:
        """Every member's dead-letter counters, quorum commit latency and deliveries per protocol, each from the
        node's own plugin (they are per node), and the peers each counts unreachable, by the node its plugin names.
        `plugins` as plugins_to_ask gives them: one that need not answer (a member the node asked does not reach:
        down, or on the other side of a partition) that does not is no failed read. Of the URLs given, one for a
        member the node asked reaches (`reached`, as its listeners say; any, where they list none) must answer: a
        FetchError otherwise, since every count would be missing unsaid. `heard` is filled as it goes: each
        member whose plugin answered, by the node it names, should the read not complete."""
        found, latency, deliveries, answered = [], {}, [], {}
        for url, (known, required) in sorted(plugins.items()):
            # A member nobody lists may be paused or hung: a second is its bound, not the poll's whole deadline.
            bound = deadline if required else min(deadline, time.monotonic() + REMEMBERED_WITHIN)
            try:
                body = self._plugins.at(url).get("metrics", "/metrics", {}, bound, "text/plain")
            except FetchError:
                if required:
                    raise
                continue
            text = body.decode("utf-8", "replace")
            samples = plugin_normalise.parse(text, "metrics", PLUGIN_SAMPLES)
            node = plugin_normalise.node_name(samples) or known
            if url in self._given and node != url:
                self._named[url] = node
            counted = plugin_normalise.dead_lettered(samples, node)
            if counted is None:
                raise FetchError("metrics", "incomplete", f"{url}/metrics counts no dead-lettered messages (a "
                                 "RabbitMQ before 3.10, or an answer cut short)")
            found.extend(counted)
            latency[node] = plugin_normalise.quorum_commit_latency(samples)
            deliveries.extend(plugin_normalise.protocol_counts(samples, node))
            answered[node] = plugin_normalise.unreachable_peers(samples)
            heard.add(node)
        if self._given and not any(node in reached for node in answered) and (reached or not answered):
            raise FetchError("metrics", "connection", f"no plugin of {', '.join(self._given)} answered for a member "
                             "the node asked reaches")
        return tuple(found), latency, tuple(deliveries), answered

    def fetch(self, deadline: float | None = None) -> tuple[dict[str, Any], list[FetchError]]:
        """Every endpoint's JSON ([] for a list that failed), the nodes' dead-letter counters ("metrics", where
        the overview lists their plugins), the members whose plugin answered ("plugins_heard", as far as the read
        got), and what failed; SourceFailed when the overview fails, every list
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
        remembered = {node: url for node, url in self._known_urls.items() if node not in urls}
        self._known_urls.update(urls)
        self._known_apis.update(plugin_urls(raw["overview"], self.base_url, MANAGEMENT))
        heard: set[str] = set()
        if urls or self._given:
            plugins = plugins_to_ask(urls, remembered, self._given, self._named)
            futures[self._pool.submit(self._node_metrics, plugins, set(urls), deadline, heard)] = "metrics"
        done, pending = wait(futures, timeout=max(0.0, deadline - time.monotonic()))
        raw["plugins_heard"] = frozenset(heard)  # as far as the read got, should it not have completed
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
        raw["exchanges"], raw["bindings"], raw["routed"] = self._routes(raw["channels"], raw.get("queues"), urls,
                                                                        deadline, errors)
        return raw, sorted(errors, key=lambda e: e.endpoint)

    def _routes(self, channels: Any, queues: Any, urls: dict[str, str], deadline: float, errors: list[FetchError]
                ) -> tuple[list, list, list]:
        """The exchanges and bindings of each vhost where a channel publishes without confirms or in transactions,
        or where a queue that can dead-letter without a rejection dead-letters through a named exchange (a healthy
        broker has neither: nothing is read), and each node plugin's count of the first kind's publishes per
        channel and queue; a vhost that fails is left out whole, as is a plugin, its error added."""
        at_risk = [v for v in normalise.publishing_at_risk(channels) if self.selection.vhost(v)]
        vhosts = sorted(set(at_risk) | {v for v in normalise.dead_lettering_by_exchange(queues)
                                        if self.selection.vhost(v)})
        if not vhosts:
            return [], [], []
        counted = self._pool.submit(self._routed, at_risk, urls, deadline) if urls and at_risk else None

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
        routed = []
        if counted is not None:
            try:
                routed = counted.result(timeout=max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                errors.append(FetchError("routed", "deadline", f"no complete answer within the {self.deadline:g}s "
                                         "poll deadline"))
            except Exception as e:  # a plugin that fails costs what it would tell, never the poll
                errors.append(as_fetch_error("routed", e))
        return exchanges, bindings, routed

    def _routed(self, vhosts: list[str], urls: dict[str, str], deadline: float) -> list:
        """Each node's count, from its own plugin, of the publishes per channel and queue in `vhosts` (a channel
        lives on one node)."""
        found = []
        for _node, url in sorted(urls.items()):
            body = self._plugins.at(url).get("routed", "/metrics/detailed",
                                             {"family": list(plugin_normalise.ROUTE_FAMILIES), "vhost": vhosts},
                                             deadline, "text/plain")
            samples = plugin_normalise.parse(body.decode("utf-8", "replace"), "routed", plugin_normalise.ROUTE_SAMPLES)
            found.extend(plugin_normalise.channel_routes(samples))
        return found

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.client.close()
