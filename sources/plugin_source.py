"""The Prometheus plugin as a source, for brokers whose management statistics are off (the official
container image's default): the management API for what it still lists (overview, nodes, vhosts, queues with
their type and durability, connections), the plugin's per-object families for every count and counter.

With `channels_listed`, for a large broker whose statistics are on: channels and consumers as the management
API lists them (named, attributed, with their counters), and only the queues' counts from the plugin, which
costs the broker a fraction of the management API's queue listing (docs/benchmarks.md)."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace

from ackscope.core.secret import Secret
from ackscope.model import snapshot as facts
from ackscope.model.snapshot import Queue, Snapshot
from ackscope.model.source import FATAL, FetchError, SourceFailed, as_fetch_error, partial

from .cli import CliEnricher
from .http import Readers
from .management import normalise as management_normalise
from .management import protocols, transfers
from .management.client import PAGES_UP_TO, ManagementClient
from .management.session_reads import SessionReads
from .prometheus_plugin import normalise
from .prometheus_plugin.exposition import Samples
from .prometheus_plugin.listeners import default_url, plugin_urls
from .reachability import Rejoining, reconciled
from .selection import Selection

log = logging.getLogger("ackscope.sources")

LISTS = ("nodes", "vhosts", "connections")  # what the management API lists without statistics, every poll
CHANNEL_LISTS = ("channels", "consumers")  # with channels_listed: from the management API
# With channels_listed the channels are read every poll (their counts move), the consumers only when they may
# have changed: a consumer keeps its queue, tag, prefetch and ack mode for life, and listing 5,000 of them cost
# the broker 0.5-0.6 s of CPU a poll (docs/benchmarks.md). So the list is read again within the poll when the
# channels' consumer counts differ from it (a consumer came or went), and at least every this many seconds.
CONSUMER_LIST_MAX_AGE = 60.0
# The queue list is read for what the plugin does not say (type, durability), which a queue keeps for life:
# at start and when the plugin reports a queue the list does not have, within the poll; and every this many
# seconds in the background, for the next poll to use (so no poll waits for it). In one answer: 10 pages cost
# the broker 5x the CPU of one at 5,000 queues (docs/benchmarks.md).
QUEUE_LIST_MAX_AGE = 60.0
QUEUE_COLUMNS = ("name", "vhost", "type", "durable", "auto_delete", "exclusive", "state", "node",
                 *management_normalise.REPLICAS, *management_normalise.DEAD_LETTERING)
PLUGIN = ("metrics", "metrics/detailed")  # each node's; read in this order: /metrics names the node
# What a poll misses when one plugin endpoint fails: the rules that need it say "not evaluated".
MISSED_WITHOUT = {"metrics/detailed": frozenset({facts.CHANNELS, facts.QUEUE_COUNTS}),
                  "metrics": frozenset({facts.NODE_ALARMS}),
                  "connections": frozenset({facts.CONNECTIONS}),
                  **{name: frozenset({facts.CHANNELS}) for name in CHANNEL_LISTS}}


@dataclass(frozen=True)
class ConsumerList:
    raw: list  # /api/consumers as the management API answered
    per_channel: dict[str, int]  # channel name: how many consumers the list gives it
    read_at: float  # monotonic

    @classmethod
    def of(cls, raw: list) -> ConsumerList:
        per_channel: dict[str, int] = {}
        for c in management_normalise.objects(raw, "consumers"):
            name = management_normalise.consumer_channel(c)
            per_channel[name] = per_channel.get(name, 0) + 1
        return cls(raw, per_channel, time.monotonic())

    def agrees_with(self, channels: list) -> bool:
        """Whether the channels count the consumers this list gives each of them, and no others."""
        counted = {str(c.get("name", "")): c.get("consumer_count") for c in channels if isinstance(c, dict)}
        return {name: n for name, n in counted.items() if n} == self.per_channel


@dataclass(frozen=True)
class QueueList:
    queues: dict[tuple[str, str], Queue]  # (vhost, name): the queue as the management API lists it
    read_at: float  # monotonic
    unlisted: frozenset[tuple[str, str]] = frozenset()  # reported by the plugin, not in the list when read


@dataclass(frozen=True)
class Counted:
    """A queue list's queues with the plugin's counts, as one poll's answer gave them."""
    listed: QueueList
    queues: dict[tuple[str, str], Queue]  # (vhost, name): the queue with its counts


@dataclass(frozen=True)
class PluginAnswers:
    """One poll's answers of the nodes' plugins."""
    detailed: Samples | None  # the cluster's /metrics/detailed, the nodes' answers merged; None: none answered
    metrics: tuple[Samples, ...] | None  # each node's /metrics that answered; None: none did
    absent: tuple[str, ...]  # families asked for that an answer of /metrics/detailed lacks
    counted: Counted | None  # the listed queues with their counts, counted from a single node's answer
    nodes: frozenset[str]  # the nodes whose /metrics/detailed answered, by the names their /metrics gave
    queue_nodes: dict[tuple[str, str], str]  # (vhost, queue): the node whose answer reported it


def _endpoint(job) -> str:
    return job[0] if isinstance(job, tuple) else job


class PrometheusPluginSource:
    def __init__(self, management_url: str, prometheus_urls: Sequence[str] | None, username: str, password: Secret, *,
                 timeout: float = 5.0, deadline: float = 10.0, verify: bool | str = True,
                 selection: Selection = Selection(), cli: CliEnricher | None = None,
                 queue_list_every: float = QUEUE_LIST_MAX_AGE, channels_listed: bool = False,
                 consumer_list_every: float = CONSUMER_LIST_MAX_AGE):
        """ValueError when a URL is not an http(s) URL without credentials. `prometheus_urls`: each node's plugin
        (a node reports only its own queues, channels and alarms); None or empty: where the broker's listeners
        say they are, read again at every poll. `cli` enriches each poll; the queue list is read again in the
        background every `queue_list_every` seconds. `channels_listed`: the
        channels and consumers from the management API (whose statistics must be on), the consumers again only
        when the channels' counts differ from the last list or it is `consumer_list_every` seconds old."""
        self.management = ManagementClient(management_url, username, password, timeout=timeout, verify=verify)
        self._plugins = Readers(username, password, timeout=timeout, verify=verify, what="Prometheus plugin")
        self._given = tuple(self._plugins.at(url).base_url for url in prometheus_urls or ())
        self._listed: tuple[str, ...] = ()  # where the broker's listeners last said its nodes' plugins are
        self._listeners_said = False  # ... as opposed to the default place, taken because nothing said
        self._node_at: dict[str, str] = {}  # a plugin's URL: the node its /metrics last named
        self.deadline = deadline
        self.selection = selection
        # The lists, the queue list, the CLI, and two requests to each node's plugin: a cluster of up to five
        # nodes at once; the requests to more wait their turn.
        self._pool = ThreadPoolExecutor(max_workers=len(LISTS + CHANNEL_LISTS) + 2 + 2 * 5,
                                        thread_name_prefix="ackscope-fetch")
        self._alone = False  # the last read found no management API, only the plugin
        self._sessions = SessionReads()  # each AMQP 1.0 connection's last sessions, asked again when it moved
        self._rejoining = Rejoining()
        self._queue_list: QueueList | None = None
        self._queue_list_refresh: Future | None = None  # the background read, until a poll takes its result
        self.queue_list_every = queue_list_every
        self.cli = cli
        self.channels_listed = channels_listed
        self.name = "management+prometheus" if channels_listed else "prometheus"
        self._lists = LISTS + ("channels",) if channels_listed else LISTS
        self._consumer_list: ConsumerList | None = None
        self._built = management_normalise.Built()  # the last poll's channels and consumers, for the next
        self.consumer_list_every = consumer_list_every
        self.families = normalise.QUEUE_FAMILIES if channels_listed else normalise.FAMILIES
        # Families not asked for are as unknown as those left out (the channels, without the management API).
        self._unasked = tuple(f for f in normalise.FAMILIES if f not in self.families)

    @property
    def base_url(self) -> str:
        """Where the plugins are read, as far as known: the URLs given, or those last listed."""
        return ", ".join(self._given or self._listed) or self.management.base_url

    def answers(self) -> bool:
        """Whether a node's plugin answers /metrics."""
        deadline = time.monotonic() + self.deadline
        for url in self._plugin_urls(deadline):
            try:
                self._plugins.at(url).get("metrics", "/metrics", {}, deadline, "text/plain")
                return True
            except FetchError:
                continue
        return False

    def _plugin_urls(self, deadline: float) -> tuple[str, ...]:
        """The plugins to read: those given; else where the listeners said at the last poll (at the first, they
        are asked for now); else port 15692 of the management host."""
        if self._given:
            return self._given
        if not self._listed:
            try:
                self._heed(self.management.fetch("overview", deadline, columns=("node", "listeners")))
            except FetchError:
                pass
        return self._listed or (default_url(self.management.base_url),)

    def _heed(self, overview) -> None:
        """Take the plugins' places from the overview's listeners, where it lists any (with statistics off, no
        release does: then the last places known stand)."""
        urls = plugin_urls(overview, self.management.base_url)
        if urls:
            self._listed, self._listeners_said = tuple(sorted(urls.values())), True

    def read(self) -> Snapshot:
        taken_at, deadline = time.time(), time.monotonic() + self.deadline
        listed = self._queue_list
        urls = self._plugin_urls(deadline)
        # One node's answer is counted in its fetch thread; a cluster's answers only once they are merged.
        counting = listed if len(urls) == 1 else None
        jobs = {"overview": lambda: self.management.fetch("overview", deadline),
                # In one answer: on a broker this large, pages would cost it the square of the channels' count.
                **{name: (lambda name=name: self.management.fetch(name, deadline, paginate=name not in CHANNEL_LISTS))
                   for name in self._lists},
                **({"consumers": lambda: self._read_consumer_list(deadline)} if self._consumers_due() else {})}
        families = [("family", f) for f in (*self.families, normalise.STREAM_LAG_FAMILY)]
        for url in urls:
            # The plugin builds the whole answer before its first byte: for a broker of thousands of queues
            # that may take longer than one request's timeout on a busy node (at 50,000 queues it once
            # took over 5 s and the poll lost its queue counts), so it may take until the deadline.
            jobs[("metrics/detailed", url)] = lambda url=url: self._read_plugin(
                url, "metrics/detailed", families, deadline, len(urls) > 1,
                patient=listed is not None and len(listed.queues) > PAGES_UP_TO, listed=counting)
            jobs[("metrics", url)] = lambda url=url: self._read_plugin(url, "metrics", {}, deadline, len(urls) > 1)
        if listed is None:
            jobs["queues"] = lambda: self._read_queue_list(deadline)
        elif self._queue_list_refresh is None and time.monotonic() - listed.read_at >= self.queue_list_every:
            # No poll waits for it, so the poll's deadline is not its bound: at 50,000 queues on a busy node the
            # list outlasted a 30 s deadline and failed, though it would have served the next poll. Its own bound
            # is the next refresh.
            self._queue_list_refresh = self._pool.submit(
                self._read_queue_list, time.monotonic() + max(self.deadline, self.queue_list_every))
        futures = {self._pool.submit(job): name for name, job in jobs.items()}
        enrichment = self._pool.submit(self.cli.read, deadline) if self.cli is not None else None
        answers, failures = self._gather(futures, deadline)
        if isinstance(answers.get("overview"), dict) and not self._given:
            self._heed(answers["overview"])
        # A node the cluster lists as stopped has no plugin to read: that is its own finding, not a failed read.
        errors = [e for key, e in failures.items() if not self._stopped(key, answers.get("nodes"))]
        if self.channels_listed:
            self._consumers_for(answers, errors, deadline)
        plugin = self._plugin_samples(answers, errors, urls)
        detailed, metrics = plugin.detailed, plugin.metrics
        missed = {normalise.DECLARES[f][1] for f in plugin.absent}
        # The plugin is where every count comes from: without it there is nothing to say.
        if (detailed is None and metrics is None) or any(e.reason in FATAL for e in errors):
            raise SourceFailed(errors)

        management = {"overview", *self._lists}
        # A broker without the management plugin (only port 15692) is read from the plugin alone.
        alone = all(any(e.endpoint == name and e.reason in ("connection", "not_found") for e in errors)
                    for name in management)
        if alone != self._alone:
            if alone:
                log.info("no management API answers at %s: reading the Prometheus plugin alone (queues without "
                         "type or durability, no connections)", self.management.base_url)
            self._alone = alone
        counted = plugin.counted
        if alone:
            errors = [e for e in errors if e.endpoint not in (*management, "consumers", "queues")]
            base = normalise.plugin_only_base(detailed, metrics or (), taken_at, self.selection, plugin.queue_nodes)
        else:
            base, errors, counted = self._management_base(answers, errors, plugin, taken_at, deadline)
        snapshot = normalise.snapshot(base, detailed, metrics, self.selection, plugin.absent + self._unasked,
                                      channels_listed=self.channels_listed and not alone,
                                      counted=counted is not None and not alone)
        answered = {name: normalise.unreachable_peers(m) for m in metrics or () if (name := normalise.node_name(m))}
        answered = self._rejoining.heard(snapshot.nodes, answered, time.monotonic())
        snapshot = replace(snapshot, nodes=reconciled(snapshot.nodes, snapshot.overview.node, answered))
        missed |= frozenset().union(*(MISSED_WITHOUT.get(e.endpoint, ()) for e in errors
                                      if e.reason != "incomplete" or e.endpoint == "metrics"))  # its alarms
        if alone:  # what AMQP 1.0 and stream clients hold is the management API's to list
            snapshot = replace(snapshot, unreported=snapshot.unreported | {facts.AMQP10_LINKS, facts.STREAM_CLIENTS,
                                                                           facts.SHOVELS, facts.SHOVEL_STATES,
                                                                           facts.FEDERATION_LINKS})
        else:
            snapshot, failed = protocols.read(snapshot, self.management, deadline, self._pool, self._sessions)
            snapshot, moved = transfers.read(snapshot, self.management, deadline, self._pool, self.selection)
            errors = [*errors, *failed, *moved]
            missed |= frozenset().union(*({**protocols.MISSED_WITHOUT, **transfers.MISSED_WITHOUT}[e.endpoint]
                                          for e in [*failed, *moved]))
        snapshot = partial(snapshot, errors, missed)
        unread = self._unread_nodes(snapshot)
        if unread:
            snapshot = replace(snapshot, notes=(*snapshot.notes, unread))
        # The CLI's own read is bounded by the same deadline, and gives None rather than failing the poll.
        extra = enrichment.result() if enrichment is not None else None
        return normalise.enrich(snapshot, extra) if extra is not None else snapshot

    def _stopped(self, key, nodes) -> bool:
        """Whether `key` is a read of the plugin of a node the nodes' list (this poll's) says is not running."""
        node = self._node_at.get(key[1]) if isinstance(key, tuple) else None
        return node is not None and isinstance(nodes, list) and any(
            isinstance(n, dict) and n.get("name") == node and n.get("running") is False for n in nodes)

    def _unread_nodes(self, snapshot: Snapshot) -> str | None:
        """A note naming the running nodes whose plugin is not read because nothing says where it listens: the
        broker lists no listeners with its statistics off (no release does), and no URL was given for them."""
        if self._listeners_said:
            return None
        known = set(self._node_at.values())
        unread = sorted(n.name for n in snapshot.nodes if n.running and n.name not in known)
        if not unread or not known:
            return None
        return (f"the Prometheus plugin of {', '.join(unread)} is not read (with statistics off the broker lists "
                "no plugin listeners): the queues they lead have no counts, their channels and alarms are not "
                "seen; give --prometheus-url one URL per node")

    def _consumers_due(self) -> bool:
        listed = self._consumer_list
        return self.channels_listed and (listed is None or
                                         time.monotonic() - listed.read_at >= self.consumer_list_every)

    def _read_consumer_list(self, deadline: float) -> ConsumerList:
        raw = self.management.fetch("consumers", deadline)
        try:
            return ConsumerList.of(raw)
        except management_normalise.MalformedResponse as e:
            raise FetchError("consumers", "malformed", str(e).split(": ", 1)[-1]) from None

    def _consumers_for(self, answers: dict, errors: list[FetchError], deadline: float) -> None:
        """answers["consumers"]: the list read in this poll, or the last one while the channels agree with it;
        read again now when they do not (a consumer came or went since)."""
        if "consumers" in answers:
            self._consumer_list = answers.pop("consumers")
        elif any(e.endpoint == "consumers" for e in errors):
            return
        listed = self._consumer_list
        if listed is None or "channels" not in answers:
            return
        channels = answers["channels"]
        if isinstance(channels, list) and not listed.agrees_with(channels):
            try:
                self._consumer_list = listed = self._read_consumer_list(deadline)
            except FetchError as e:
                errors.append(e)
                return
        answers["consumers"] = listed.raw

    def _read_plugin(self, url: str, endpoint: str, params, deadline: float, named: bool, patient: bool = False,
                     listed: QueueList | None = None) -> tuple[Samples, tuple[str, ...], Counted | None]:
        """A plugin's answer read in the fetch thread: its samples, the families asked for that it lacks, and the
        `listed` queues with their counts from it. This overlaps the wait for the management API's channel list
        (parsing 70 ms and counting 40 ms at 5,000 queues). `named`: its errors name the URL (one of several)."""
        try:
            body = self._plugins.at(url).get(endpoint, f"/{endpoint}", params, deadline, "text/plain", patient)
            text = body.decode("utf-8", "replace")
            samples = normalise.parse(text, endpoint)
        except FetchError as e:
            if not named:
                raise
            raise FetchError(e.endpoint, e.reason, f"{url}: {str(e).split(': ', 1)[-1]}", e.status) from None
        lacking = normalise.missing_families(text, endpoint, self.families)
        if listed is None:
            return samples, lacking, None
        keys = list(listed.queues)
        queues = normalise.queue_counts(samples, listed.queues.values(), lacking + self._unasked)
        return samples, lacking, Counted(listed, dict(zip(keys, queues)))

    def _plugin_samples(self, answers: dict, errors: list[FetchError], urls: tuple[str, ...]) -> PluginAnswers:
        """The plugins' answers (see PluginAnswers); what lacks families is added to `errors`."""
        detailed: dict[str, Samples] = {}
        metrics, absent, counted = [], set(), None
        for url in urls:
            for endpoint in PLUGIN:
                if (endpoint, url) not in answers:
                    continue
                read, lacking, queues = answers.pop((endpoint, url))
                if lacking:
                    errors.append(FetchError(endpoint, "incomplete", f"{url}'s answer lacks {', '.join(lacking)} "
                                             "(an older RabbitMQ, or an answer cut short): what they give is not "
                                             "reported"))
                if endpoint == "metrics":
                    metrics.append(read)
                    node = normalise.node_name(read)
                    if node is not None:
                        self._node_at[url] = node
                else:
                    detailed[self._node_at.get(url, url)] = read
                    absent.update(lacking)
                    counted = queues
        listed = self._queue_list
        merged, queue_nodes = normalise.merged(detailed, {} if listed is None else
                                               {key: q.node for key, q in listed.queues.items()})
        return PluginAnswers(merged if detailed else None, tuple(metrics) if metrics else None,
                             tuple(f for f in self.families if f in absent), counted,
                             frozenset(n for n in detailed if n not in urls), queue_nodes)

    def _gather(self, futures: dict, deadline: float) -> tuple[dict, dict]:
        """({job: its answer}, {job: its FetchError}); a job is an endpoint, or (endpoint, a plugin's URL)."""
        done, pending = wait(futures, timeout=max(0.0, deadline - time.monotonic()))
        answers, failures = {}, {}
        for future in done:
            key = futures[future]
            error = future.exception()
            if error is None:
                answers[key] = future.result()
            else:
                failures[key] = as_fetch_error(_endpoint(key), error)
        for future in pending:
            key = futures[future]
            failures[key] = FetchError(_endpoint(key), "deadline", f"no complete answer within the {self.deadline:g}s "
                                       "poll deadline" + (f" from {key[1]}" if isinstance(key, tuple) else ""))
        return answers, failures

    def _read_queue_list(self, deadline: float, reported: frozenset[tuple[str, str]] = frozenset()) -> QueueList:
        raw = self.management.fetch("queues", deadline, columns=QUEUE_COLUMNS, paginate=False, statistics=False)
        try:
            queues = [management_normalise.queue(q) for q in management_normalise.objects(raw, "queues")]
        except management_normalise.MalformedResponse as e:
            raise FetchError("queues", "malformed", str(e).split(": ", 1)[-1]) from None
        by_key = {(q.vhost, q.name): q for q in queues
                  if self.selection.vhost(q.vhost) and self.selection.queue(q.name)}
        return QueueList(by_key, time.monotonic(), frozenset(reported - by_key.keys()))

    def _management_base(self, answers: dict, errors: list[FetchError], plugin: PluginAnswers, taken_at: float,
                         deadline: float) -> tuple[Snapshot, list[FetchError], Counted | None]:
        """The management API's statistics-free snapshot, with the queue list as last read (read again now
        if the plugin reports a queue it lacks); the plugin's own view where the API did not answer. Its queues
        are those `counted` (with their counts) when they were counted from the list it holds (then
        `plugin.counted` is returned, else None)."""
        detailed, metrics, counted = plugin.detailed, plugin.metrics or (), plugin.counted
        reported = normalise.reported_queues(detailed or {}, self.selection)
        refresh = self._queue_list_refresh
        if refresh is not None and refresh.done():  # read in the background since an earlier poll
            self._queue_list_refresh = None
            if refresh.exception() is None:
                answers["queues"] = refresh.result()
            else:
                errors.append(as_fetch_error("queues", refresh.exception()))
        if "queues" in answers:
            fresh = answers.pop("queues")
            self._queue_list = replace(fresh, unlisted=frozenset(reported - fresh.queues.keys()))
        listed = self._queue_list
        if listed is not None and reported - listed.queues.keys() - listed.unlisted and \
                not any(e.endpoint == "queues" for e in errors):
            try:  # a queue declared since the list was read
                self._queue_list = listed = self._read_queue_list(deadline, reported)
            except FetchError as e:
                errors.append(e)
        # Without the overview there is no management view to build on; a list that failed costs its own part.
        if any(e.endpoint == "overview" for e in errors) or listed is None:
            base = normalise.plugin_only_base(detailed, metrics, taken_at, self.selection, plugin.queue_nodes)
            if listed is not None:  # the types and durability known from the last list still hold
                base = replace(base, queues=tuple(listed.queues.get((q.vhost, q.name), q) for q in base.queues),
                               unreported=base.unreported - {facts.QUEUE_DURABILITY})
            return replace(base, notes=()), errors, None
        try:
            read = self.channels_listed and all(name in answers for name in CHANNEL_LISTS)
            listed_channels = {name: answers[name] if read else [] for name in CHANNEL_LISTS}
            unanswered = {name: [] for name in LISTS if name not in answers}
            base = management_normalise.snapshot({**answers, **unanswered, "queues": [], **listed_channels}, taken_at,
                                                 self.selection, self._built)
        except management_normalise.MalformedResponse as e:
            errors.append(FetchError(e.endpoint, "malformed", str(e).split(": ", 1)[-1]))
            return (replace(normalise.plugin_only_base(detailed, metrics, taken_at, self.selection,
                                                       plugin.queue_nodes), notes=()), errors, None)
        # A queue its node's plugin no longer reports was deleted since the list was read; queues of nodes whose
        # plugin was not read are in no answer at all, and stay as listed.
        if counted is None or counted.listed is not listed:
            counted = None
        queues = tuple(q if counted is None else counted.queues[key] for key, q in sorted(listed.queues.items())
                       if key in reported or q.node not in plugin.nodes)
        return replace(base, queues=queues), errors, counted

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.management.close()
        if self.cli is not None:
            self.cli.close()
