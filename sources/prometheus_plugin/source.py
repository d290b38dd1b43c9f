"""The Prometheus plugin as a source, for brokers whose management statistics are off (the official
container image's default): the management API for what it still lists (overview, nodes, vhosts, queues with
their type and durability, connections), the plugin's per-object families for every count and counter.

With `channels_listed`, for a large broker whose statistics are on: channels and consumers as the management
API lists them (named, attributed, with their counters), and only the queues' counts from the plugin, which
costs the broker a fraction of the management API's queue listing (docs/benchmarks.md)."""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace

from ackscope.core.secret import Secret
from ackscope.model import snapshot as facts
from ackscope.model.snapshot import Queue, Snapshot
from ackscope.model.source import FATAL, FetchError, SourceFailed, as_fetch_error, partial

from ..cli import CliEnricher
from ..http import HttpReader
from ..management import normalise as management_normalise
from ..management.client import PAGES_UP_TO, ManagementClient
from ..selection import Selection
from . import normalise
from .listeners import default_url, plugin_urls

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
PLUGIN = ("metrics/detailed", "metrics")
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


class PrometheusPluginSource:
    def __init__(self, management_url: str, prometheus_url: str | None, username: str, password: Secret, *,
                 timeout: float = 5.0, deadline: float = 10.0, verify: bool | str = True,
                 selection: Selection = Selection(), cli: CliEnricher | None = None,
                 queue_list_every: float = QUEUE_LIST_MAX_AGE, channels_listed: bool = False,
                 consumer_list_every: float = CONSUMER_LIST_MAX_AGE):
        """ValueError when a URL is not an http(s) URL without credentials. `prometheus_url` None: where the
        broker's listeners say the plugin of the node answering the management API listens. `cli` enriches each poll; the
        queue list is read again in the background every `queue_list_every` seconds. `channels_listed`: the
        channels and consumers from the management API (whose statistics must be on), the consumers again only
        when the channels' counts differ from the last list or it is `consumer_list_every` seconds old."""
        self.management = ManagementClient(management_url, username, password, timeout=timeout, verify=verify)
        self._reader_at = lambda url: HttpReader(url, username, password, timeout=timeout, verify=verify,
                                                 what="Prometheus plugin")
        self._plugin = None if prometheus_url is None else self._reader_at(prometheus_url)
        self.deadline = deadline
        self.selection = selection
        self._pool = ThreadPoolExecutor(max_workers=len(LISTS + CHANNEL_LISTS) + 4,
                                        thread_name_prefix="ackscope-fetch")
        self._alone = False  # the last read found no management API, only the plugin
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
    def plugin(self) -> HttpReader:
        """The plugin's reader: at the URL given, or found at its first use (see listeners.plugin_urls)."""
        if self._plugin is None:
            self._plugin = self._reader_at(self._listed_url())
        return self._plugin

    @property
    def base_url(self) -> str:
        return self.plugin.base_url

    def _listed_url(self) -> str:
        """Where the listeners say the answering node's plugin is; port 15692 of the management host where the
        management API does not answer or lists none."""
        management_url = self.management.base_url
        try:
            overview = self.management.fetch("overview", time.monotonic() + self.deadline,
                                             columns=("node", "listeners"))
        except FetchError:
            return default_url(management_url)
        node = overview.get("node") if isinstance(overview, dict) else None
        return plugin_urls(overview, management_url).get(node) or default_url(management_url)

    def read(self) -> Snapshot:
        taken_at, deadline = time.time(), time.monotonic() + self.deadline
        listed = self._queue_list
        jobs = {"overview": lambda: self.management.fetch("overview", deadline),
                # In one answer: on a broker this large, pages would cost it the square of the channels' count.
                **{name: (lambda name=name: self.management.fetch(name, deadline, paginate=name not in CHANNEL_LISTS))
                   for name in self._lists},
                **({"consumers": lambda: self._read_consumer_list(deadline)} if self._consumers_due() else {}),
                # The plugin builds the whole answer before its first byte: for a broker of thousands of queues
                # that may take longer than one request's timeout on a busy node (at 50,000 queues it once
                # took over 5 s and the poll lost its queue counts), so it may take until the deadline.
                "metrics/detailed": lambda: self._read_plugin("metrics/detailed", self.plugin.get(
                    "metrics/detailed", "/metrics/detailed", [("family", f) for f in self.families], deadline,
                    "text/plain", patient=listed is not None and len(listed.queues) > PAGES_UP_TO), listed),
                "metrics": lambda: self._read_plugin("metrics", self.plugin.get("metrics", "/metrics", {}, deadline,
                                                                                "text/plain"))}
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
        answers, errors = self._gather(futures, deadline)
        if self.channels_listed:
            self._consumers_for(answers, errors, deadline)
        samples, absent, counted = self._plugin_samples(answers, errors)
        missed = {normalise.DECLARES[f][1] for f in absent}
        # The plugin is where every count comes from: without it there is nothing to say.
        if not samples or any(e.reason in FATAL for e in errors):
            raise SourceFailed(errors)
        detailed, metrics = samples.get("metrics/detailed"), samples.get("metrics")

        management = {"overview", *self._lists}
        # A broker without the management plugin (only port 15692) is read from the plugin alone.
        alone = all(any(e.endpoint == name and e.reason in ("connection", "not_found") for e in errors)
                    for name in management)
        if alone != self._alone:
            if alone:
                log.info("no management API answers at %s: reading the Prometheus plugin alone (queues without "
                         "type or durability, no connections)", self.management.base_url)
            self._alone = alone
        if alone:
            errors = [e for e in errors if e.endpoint not in (*management, "consumers", "queues")]
            base = normalise.plugin_only_base(detailed, metrics, taken_at, self.selection)
        else:
            base, errors, counted = self._management_base(answers, errors, detailed, metrics, taken_at, deadline,
                                                          counted)
        snapshot = normalise.snapshot(base, detailed, metrics, self.selection, absent + self._unasked,
                                      channels_listed=self.channels_listed and not alone,
                                      counted=counted is not None and not alone)
        missed |= frozenset().union(*(MISSED_WITHOUT.get(e.endpoint, ()) for e in errors
                                      if e.reason != "incomplete" or e.endpoint == "metrics"))  # its alarms
        snapshot = partial(snapshot, errors, missed)
        # The CLI's own read is bounded by the same deadline, and gives None rather than failing the poll.
        extra = enrichment.result() if enrichment is not None else None
        return normalise.enrich(snapshot, extra) if extra is not None else snapshot

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

    def _read_plugin(self, endpoint: str, body: bytes, listed: QueueList | None = None
                     ) -> tuple[dict, tuple[str, ...], Counted | None]:
        """A plugin answer read in the fetch thread: its samples, the families asked for that it lacks, and the
        `listed` queues with their counts from it. This overlaps the wait for the management API's channel list
        (parsing 70 ms and counting 40 ms at 5,000 queues)."""
        text = body.decode("utf-8", "replace")
        samples = normalise.parse(text, endpoint)
        lacking = normalise.missing_families(text, endpoint, self.families)
        if listed is None:
            return samples, lacking, None
        keys = list(listed.queues)
        queues = normalise.queue_counts(samples, listed.queues.values(), lacking + self._unasked)
        return samples, lacking, Counted(listed, dict(zip(keys, queues)))

    def _plugin_samples(self, answers: dict, errors: list[FetchError]
                        ) -> tuple[dict, tuple[str, ...], Counted | None]:
        """The plugin's answers as read ({endpoint: samples}), the families /metrics/detailed left out, and the
        queues counted from it; what lacks families is added to `errors`."""
        samples, absent, counted = {}, (), None
        for endpoint in PLUGIN:
            if endpoint not in answers:
                continue
            read, lacking, queues = answers.pop(endpoint)
            if lacking:
                errors.append(FetchError(endpoint, "incomplete", f"the plugin's answer lacks {', '.join(lacking)} "
                                         "(an older RabbitMQ, or an answer cut short): what they give is not "
                                         "reported"))
            samples[endpoint] = read
            if endpoint == "metrics/detailed":
                absent, counted = lacking, queues
        return samples, absent, counted

    def _gather(self, futures: dict, deadline: float) -> tuple[dict, list[FetchError]]:
        done, pending = wait(futures, timeout=max(0.0, deadline - time.monotonic()))
        answers, errors = {}, []
        for future in done:
            error = future.exception()
            if error is None:
                answers[futures[future]] = future.result()
            else:
                errors.append(as_fetch_error(futures[future], error))
        errors += [FetchError(futures[f], "deadline", f"no complete answer within the {self.deadline:g}s poll "
                              "deadline") for f in pending]
        return answers, errors

    def _read_queue_list(self, deadline: float, reported: frozenset[tuple[str, str]] = frozenset()) -> QueueList:
        raw = self.management.fetch("queues", deadline, columns=QUEUE_COLUMNS, paginate=False, statistics=False)
        try:
            queues = [management_normalise.queue(q) for q in management_normalise.objects(raw, "queues")]
        except management_normalise.MalformedResponse as e:
            raise FetchError("queues", "malformed", str(e).split(": ", 1)[-1]) from None
        by_key = {(q.vhost, q.name): q for q in queues
                  if self.selection.vhost(q.vhost) and self.selection.queue(q.name)}
        return QueueList(by_key, time.monotonic(), frozenset(reported - by_key.keys()))

    def _management_base(self, answers: dict, errors: list[FetchError], detailed, metrics, taken_at: float,
                         deadline: float, counted: Counted | None
                         ) -> tuple[Snapshot, list[FetchError], Counted | None]:
        """The management API's statistics-free snapshot, with the queue list as last read (read again now
        if the plugin reports a queue it lacks); the plugin's own view where the API did not answer. Its queues
        are those `counted` (with their counts) when they were counted from the list it holds (then `counted`
        is returned, else None)."""
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
            base = normalise.plugin_only_base(detailed, metrics, taken_at, self.selection)
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
            return (replace(normalise.plugin_only_base(detailed, metrics, taken_at, self.selection), notes=()),
                    errors, None)
        identity = normalise.node_name(metrics)
        # A queue this node's plugin no longer reports was deleted since the list was read; queues of other
        # nodes are not in this node's plugin at all, and stay as listed.
        if counted is None or counted.listed is not listed:
            counted = None
        queues = tuple(q if counted is None else counted.queues[key] for key, q in sorted(listed.queues.items())
                       if key in reported or q.node != identity or detailed is None)
        return replace(base, queues=queues), errors, counted

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.management.close()
        if self.cli is not None:
            self.cli.close()
