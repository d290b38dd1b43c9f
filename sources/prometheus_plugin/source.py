"""The Prometheus plugin as a source, for brokers whose management statistics are off (the official
container image's default): the management API for what it still lists (overview, nodes, vhosts, queues with
their type and durability, connections), the plugin's per-object families for every count and counter."""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor, wait

from ackscope.core.secret import Secret
from ackscope.model.snapshot import Snapshot
from ackscope.model.source import FetchError, SourceFailed

from ..cli import CliEnricher
from ..http import HttpReader
from ..management import normalise as management_normalise
from ..management.client import ManagementClient
from ..selection import Selection
from . import normalise

log = logging.getLogger("ackscope.sources")

LISTS = ("nodes", "vhosts", "connections", "queues")  # what the management API lists without statistics


class PrometheusPluginSource:
    name = "prometheus"

    def __init__(self, management_url: str, prometheus_url: str, username: str, password: Secret, *,
                 timeout: float = 5.0, deadline: float = 10.0, verify: bool | str = True,
                 selection: Selection = Selection(), cli: CliEnricher | None = None):
        """ValueError when a URL is not an http(s) URL without credentials. `cli` enriches each poll."""
        self.management = ManagementClient(management_url, username, password, timeout=timeout, verify=verify)
        self.plugin = HttpReader(prometheus_url, username, password, timeout=timeout, verify=verify,
                                 what="Prometheus plugin")
        self.base_url = self.plugin.base_url
        self.deadline = deadline
        self.selection = selection
        self._pool = ThreadPoolExecutor(max_workers=len(LISTS) + 3, thread_name_prefix="ackscope-fetch")
        self._alone = False  # the last read found no management API, only the plugin
        self.cli = cli

    def read(self) -> Snapshot:
        taken_at, deadline = time.time(), time.monotonic() + self.deadline
        detailed_params = [("family", f) for f in normalise.FAMILIES]
        jobs = {"overview": lambda: self.management.fetch("overview", deadline),
                **{name: (lambda name=name: self.management.fetch(name, deadline)) for name in LISTS},
                "metrics/detailed": lambda: self.plugin.get("metrics/detailed", "/metrics/detailed",
                                                            detailed_params, deadline, "text/plain"),
                "metrics": lambda: self.plugin.get("metrics", "/metrics", {}, deadline, "text/plain")}
        futures = {self._pool.submit(job): name for name, job in jobs.items()}
        enrichment = self._pool.submit(self.cli.read, deadline) if self.cli is not None else None
        done, pending = wait(futures, timeout=max(0.0, deadline - time.monotonic()))
        answers, errors = {}, []
        for future in done:
            error = future.exception()
            if error is None:
                answers[futures[future]] = future.result()
            else:
                errors.append(error if isinstance(error, FetchError) else
                              FetchError(futures[future], "internal", f"{type(error).__name__}: {error}"))
        errors += [FetchError(futures[f], "deadline", f"no complete answer within the {self.deadline:g}s poll "
                              "deadline") for f in pending]
        management = {"overview", *LISTS}
        # A broker without the management plugin (only port 15692) is read from the plugin alone.
        alone = len([e for e in errors if e.endpoint in management and e.reason in ("connection", "not_found")]) \
            == len(management)
        if alone != self._alone:
            if alone:
                log.info("no management API answers at %s: reading the Prometheus plugin alone (queues without "
                         "type or durability, no connections)", self.management.base_url)
            self._alone = alone
        if alone:
            errors = [e for e in errors if e.endpoint not in management]
        if errors:
            raise SourceFailed(errors)
        try:
            detailed = normalise.parse(answers.pop("metrics/detailed").decode("utf-8", "replace"),
                                       "metrics/detailed")
            metrics = normalise.parse(answers.pop("metrics").decode("utf-8", "replace"), "metrics")
        except FetchError as e:
            raise SourceFailed([e]) from None
        if alone:
            base = normalise.plugin_only_base(detailed, metrics, taken_at, self.selection)
        else:
            try:
                base = management_normalise.snapshot({**answers, "channels": [], "consumers": []}, taken_at,
                                                     self.selection)
            except management_normalise.MalformedResponse as e:
                raise SourceFailed([FetchError(e.endpoint, "malformed", str(e).split(": ", 1)[-1])]) from None
        snapshot = normalise.snapshot(base, detailed, metrics, self.selection)
        # The CLI's own read is bounded by the same deadline, and gives None rather than failing the poll.
        extra = enrichment.result() if enrichment is not None else None
        return normalise.enrich(snapshot, extra) if extra is not None else snapshot

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.management.close()
        if self.cli is not None:
            self.cli.close()
