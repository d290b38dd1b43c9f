"""Which source to read (`--source auto|management|prometheus`): with `auto`, the management API while its
statistics are on, and the Prometheus plugin when the broker says they are off (`disable_stats` in
/api/overview, or a 400 "Stats in management UI are disabled" later, after a restart with other settings)."""

from __future__ import annotations

import logging
import time
from urllib.parse import urlsplit, urlunsplit

from ackscope.core.secret import Secret
from ackscope.model.snapshot import Snapshot
from ackscope.model.source import FetchError, Source, SourceFailed

from .cli import CliEnricher
from .management import ManagementSource
from .prometheus_plugin import PrometheusPluginSource
from .selection import Selection

log = logging.getLogger("ackscope.sources")

KINDS = ("auto", "management", "prometheus")
PLUGIN_PORT = 15692


def default_prometheus_url(management_url: str) -> str:
    """The plugin's default place: the management host, port 15692, the same scheme."""
    parts = urlsplit(management_url)
    host = parts.hostname or "localhost"
    return urlunsplit((parts.scheme or "http", f"[{host}]:{PLUGIN_PORT}" if ":" in host else f"{host}:{PLUGIN_PORT}",
                       "", "", ""))


def make_source(kind: str, management_url: str, prometheus_url: str | None, username: str, password: Secret, *,
                timeout: float, deadline: float, verify: bool | str, selection: Selection,
                cli: list[str] | None = None, announce: bool = True) -> Source:
    """ValueError when a URL is not an http(s) URL without credentials. `cli` (a rabbitmqctl command line)
    enriches the Prometheus-plugin source; `announce` logs auto's choice (a one-shot report names it itself)."""
    common = dict(timeout=timeout, deadline=deadline, verify=verify, selection=selection)
    management = ManagementSource(management_url, username, password, **common) \
        if kind in ("auto", "management") else None
    plugin = PrometheusPluginSource(management_url, prometheus_url or default_prometheus_url(management_url),
                                    username, password, cli=CliEnricher(cli, timeout=timeout) if cli else None,
                                    **common) if kind in ("auto", "prometheus") else None
    if management is None:
        return plugin
    if plugin is None:
        return management
    return AutoSource(management, plugin, announce)


def _statistics_off(failure: SourceFailed) -> bool:
    return any(e.status == 400 and "disabled" in str(e) for e in failure.errors)


class AutoSource:
    def __init__(self, management: ManagementSource, plugin: PrometheusPluginSource, announce: bool = True):
        self.management, self.plugin = management, plugin
        self.announce = announce
        self.chosen: Source | None = None
        self.deadline = management.deadline

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
            return self.chosen.read()
        except SourceFailed as failure:
            if self.chosen is self.management and _statistics_off(failure):
                self._use(self.plugin, "the management API now says its statistics are disabled")
                return self.chosen.read()
            raise

    def _choose(self) -> None:
        try:
            overview = self.management.client.fetch("overview", time.monotonic() + self.deadline)
        except FetchError as e:
            if e.reason in ("connection", "not_found") and self._plugin_answers():
                self._use(self.plugin, f"no management API answers at {self.management.base_url}")
                return
            raise SourceFailed([e]) from None
        if isinstance(overview, dict) and overview.get("disable_stats") is True:
            self._use(self.plugin, "management statistics are disabled on the broker")
        else:
            self._use(self.management, "its statistics are on")

    def _plugin_answers(self) -> bool:
        try:
            self.plugin.plugin.get("metrics", "/metrics", {}, time.monotonic() + self.deadline, "text/plain")
            return True
        except FetchError:
            return False

    def _use(self, source: Source, why: str) -> None:
        self.chosen = source
        what = "the Prometheus plugin" if source is self.plugin else "the management API"
        log.log(logging.INFO if self.announce else logging.DEBUG, "source: %s at %s (%s)", what, source.base_url, why)

    def close(self) -> None:
        self.management.close()
        self.plugin.close()
