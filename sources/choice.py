"""Which source to read (`--source auto|management|prometheus`): with `auto`, the management API while its
statistics are on, and the Prometheus plugin when the broker says they are off (`disable_stats` in
/api/overview, or a 400 "Stats in management UI are disabled" later, after a restart with other settings).
On a large broker whose statistics are on, `auto` reads the queues' counts from the plugin and the rest from
the management API: the API's queue listing costs the broker more than the naive fetch it was built to beat
(docs/benchmarks.md). The broker's size is read again at every poll (/api/overview's object_totals)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from ackscope.core.secret import Secret
from ackscope.model.snapshot import Snapshot
from ackscope.model.source import FetchError, Source, SourceFailed

from .cli import CliEnricher
from .management import normalise as management_normalise
from .management_source import ManagementSource
from .management import upgrade
from .node_settings import reader as node_settings
from .plugin_source import PrometheusPluginSource
from .refresh import Refreshed
from .selection import Selection

log = logging.getLogger("ackscope.sources")

KINDS = ("auto", "management", "prometheus")
# From this many queues `auto` reads their counts from the Prometheus plugin; back below 80 % of it (so a broker
# at the line does not switch at every poll). Measured: at 2,000 queues the API's listing costs the broker
# about 0.3 s a poll and the plugin's 0.04 s (docs/benchmarks.md).
LARGE_BROKER_QUEUES = 2_000


def make_source(kind: str, management_url: str, prometheus_urls: Sequence[str] | None, username: str,
                password: Secret, *,
                timeout: float, deadline: float, verify: bool | str, selection: Selection,
                cli: list[str] | None = None, announce: bool = True, upgrade_facts: bool = False) -> Source:
    """ValueError when a URL is not an http(s) URL without credentials. `prometheus_urls`: each node's plugin
    (default: where the broker's listeners say). `cli` (a rabbitmqctl command line) reads the node's settings
    and enriches the Prometheus-plugin source; `announce` logs auto's choice (a one-shot report names it itself);
    `upgrade_facts`: the policies and deprecated features in use, which an upgrade's prediction reads."""
    source = _source(kind, management_url, prometheus_urls, username, password, timeout=timeout, deadline=deadline,
                     verify=verify, selection=selection, cli=cli, announce=announce)
    facts: list[tuple[Refreshed, Callable[[Snapshot, Any], Snapshot]]] = []
    if cli:
        facts.append((node_settings(cli), lambda s, settings: replace(s, settings=settings)))
    if upgrade_facts:
        facts.append((upgrade.reader(management_url, username, password, timeout=timeout, verify=verify),
                      lambda s, read: read.onto(s)))
    return WithFacts(source, facts) if facts else source


def _source(kind: str, management_url: str, prometheus_urls: Sequence[str] | None, username: str, password: Secret,
            *, timeout: float, deadline: float, verify: bool | str, selection: Selection, cli: list[str] | None,
            announce: bool) -> Source:
    common = dict(timeout=timeout, deadline=deadline, verify=verify, selection=selection)
    management = ManagementSource(management_url, username, password, prometheus_urls=prometheus_urls or (),
                                  **common) if kind in ("auto", "management") else None
    plugin = PrometheusPluginSource(management_url, prometheus_urls, username, password,
                                    cli=CliEnricher(cli, timeout=timeout) if cli else None,
                                    **common) if kind in ("auto", "prometheus") else None
    if management is None:
        return plugin
    if plugin is None:
        return management
    large = PrometheusPluginSource(management_url, prometheus_urls, username, password, channels_listed=True,
                                   **common)
    return AutoSource(management, plugin, large, announce)


class WithFacts:
    """A source whose snapshots carry what is read beside its polls (refresh.py), as last read: each with the
    function that puts it onto a snapshot."""

    def __init__(self, source: Source, facts: list[tuple[Refreshed, Callable[[Snapshot, Any], Snapshot]]]):
        self.source, self.facts = source, facts
        self._answers = False  # the last read of the source succeeded

    @property
    def name(self) -> str:
        return self.source.name

    @property
    def base_url(self) -> str:
        return self.source.base_url

    @property
    def deadline(self) -> float:
        return self.source.deadline

    def read(self) -> Snapshot:
        deadline = time.monotonic() + self.source.deadline
        if self._answers:  # a broker that refuses the login or does not answer is not asked more than the poll
            for refreshed, _ in self.facts:
                refreshed.latest()  # a read due starts beside the source's
        try:
            snapshot = self.source.read()
        except SourceFailed:
            self._answers = False
            raise
        self._answers = True
        for refreshed, onto in self.facts:
            value = refreshed.latest(first_by=deadline)
            if value is not None:
                snapshot = onto(snapshot, value)
        return snapshot

    def close(self) -> None:
        for refreshed, _ in self.facts:
            refreshed.close()
        self.source.close()


def _statistics_off(failure: SourceFailed) -> bool:
    return any(e.status == 400 and "disabled" in str(e) for e in failure.errors)


class AutoSource:
    def __init__(self, management: ManagementSource, plugin: PrometheusPluginSource,
                 large: PrometheusPluginSource, announce: bool = True):
        """`large`: the plugin for the queues, the management API for the rest (channels_listed)."""
        self.management, self.plugin, self.large = management, plugin, large
        self.announce = announce
        self.chosen: Source | None = None
        self.deadline = management.deadline
        self._no_plugin = False  # the plugin did not answer: a large broker is read from the management API

    @property
    def name(self) -> str:
        return self.chosen.name if self.chosen is not None else "auto"

    @property
    def base_url(self) -> str:
        return (self.chosen or self.management).base_url

    def read(self) -> Snapshot:
        if self.chosen is None:
            self._choose()
        try:
            snapshot = self.chosen.read()
        except SourceFailed as failure:
            if self.chosen is not self.plugin and _statistics_off(failure):
                self._use(self.plugin, "the management API now says its statistics are disabled")
                return self.chosen.read()
            if self.chosen is self.large and _plugin_absent(failure):
                self._no_plugin = True
                self._use(self.management, f"{self.large.base_url} does not answer: the queues come from the "
                          "management API's listing, which costs a large broker more")
                return self.chosen.read()
            raise
        if self.chosen is self.large and any(u.endpoint in ("channels", "consumers") and "disabled" in u.message
                                             for u in snapshot.unread):
            self._use(self.plugin, "the management API now says its statistics are disabled")
        else:
            self._resize(snapshot.overview.queue_total)
        return snapshot

    def _resize(self, queues: int | None) -> None:
        """Between the management API and the large-broker reading as the broker grows or shrinks (at the
        first read, before either is chosen, only to the large-broker reading)."""
        if queues is None:
            return
        if self.chosen in (None, self.management) and queues >= LARGE_BROKER_QUEUES and not self._no_plugin:
            if self.plugin.answers():
                self._use(self.large, f"{queues} queues: their counts from the Prometheus plugin, the rest from "
                          "the management API")
            else:
                self._no_plugin = True
                log.info("the broker has %d queues, whose counts its Prometheus plugin (%s) would give at a "
                         "fraction of the management API's cost; it does not answer", queues,
                         self.plugin.base_url)
        elif self.chosen is self.large and queues < 0.8 * LARGE_BROKER_QUEUES:
            self._use(self.management, f"{queues} queues, its statistics are on")

    def _choose(self) -> None:
        try:
            overview = self.management.client.fetch("overview", time.monotonic() + self.deadline)
        except FetchError as e:
            if e.reason in ("connection", "not_found") and self.plugin.answers():
                self._use(self.plugin, f"no management API answers at {self.management.base_url}")
                return
            raise SourceFailed([e]) from None
        if isinstance(overview, dict) and overview.get("disable_stats") is True:
            self._use(self.plugin, "management statistics are disabled on the broker")
            return
        self._resize(management_normalise.object_totals(overview).get("queues"))
        if self.chosen is None:
            self._use(self.management, "its statistics are on")

    def _use(self, source: Source, why: str) -> None:
        if source is self.chosen:
            return
        self.chosen = source
        what = ("the Prometheus plugin and the management API" if source is self.large else
                "the Prometheus plugin" if source is self.plugin else "the management API")
        log.log(logging.INFO if self.announce else logging.DEBUG, "source: %s at %s (%s)", what, source.base_url, why)

    def close(self) -> None:
        self.management.close()
        self.plugin.close()
        self.large.close()


def _plugin_absent(failure: SourceFailed) -> bool:
    return any(e.endpoint.startswith("metrics") and e.reason in ("connection", "not_found") for e in failure.errors)
