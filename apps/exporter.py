"""`ackscope exporter`: its options, and the service it assembles: a source, the poller, the diagnosis, the
probes (with an AMQP URL), the snapshot history (with a data dir) and the HTTP server."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import shlex
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit

from ackscope.core import config, native_memory
from ackscope.core.config import ConfigError, Option, choice
from ackscope.core.http_server import Source, WebSecurity, loop_healthy, make_server, serve_in_background
from ackscope.core.processes import wait_for_signal
from ackscope.core.secret import Secret
from ackscope.diagnosis.channel_turnover import ChannelTurnover
from ackscope.diagnosis.confirm_waits import ConfirmWaits
from ackscope.diagnosis.departures import Departures
from ackscope.diagnosis.holding import Holding
from ackscope.diagnosis.onset import Onset
from ackscope.diagnosis.queues import PERSISTENT_COUNT_LAG
from ackscope.diagnosis.rules import Context, diagnose
from ackscope.diagnosis.thresholds import Thresholds
from ackscope.diagnosis.traces import placed
from ackscope.diagnosis.upgrade import outlooks
from ackscope.diagnosis.waiting import Waiting
from ackscope.diagnosis.window import Recent
from ackscope.exporter.cardinality import Limits
from ackscope.exporter.exposition import compressed, probe_metrics
from ackscope.exporter.history import SnapshotHistory
from ackscope.exporter.poller import Poller
from ackscope.model.confirm_bench import ConfirmBench
from ackscope.model.events import Breaks
from ackscope.model.findings import Diagnosis
from ackscope.model.probes import ProbeStats
from ackscope.model.snapshot import Snapshot
from ackscope.model.traces import TraceWindow
from ackscope.probes import config as probe_config
from ackscope.probes.config import ProbeConfig
from ackscope.probes.service import Probes
from ackscope.sources import KINDS, BreakLedger, BrokerLogWatch, EventExchangeWatch, Selection, make_source

from . import bench
from .exporter_traces import TraceEndpoint, TraceSettings

log = logging.getLogger("ackscope.exporter")

DEFAULT_PORT = 9577
# A poll may take this many intervals before it counts as failed: slow is late (ackscope_snapshot_age_seconds),
# not down (ackscope_up).
DEADLINE_INTERVALS = 3
OPTIONS = (
    Option("management_url", "http://localhost:15672", str, "RabbitMQ management API base URL"),
    Option("username", "guest", str, "management API user (the 'monitoring' tag is enough)"),
    Option("source", "auto", choice("source", KINDS), "where counts come from: auto (the management API, or the "
           "Prometheus plugin when the broker's management statistics are off), management, or prometheus"),
    Option("prometheus_url", None, config.http_urls("ACKSCOPE_USERNAME and ACKSCOPE_PASSWORD"),
           "the broker's Prometheus plugin, for --source auto|prometheus; in a cluster one URL per node, "
           "comma-separated (default: where the broker's listeners say; else the management host, port 15692)"),
    Option("cli", None, shlex.split, "the broker's CLI, e.g. 'rabbitmqctl -n rabbit@host' (beside the node, with "
           "its Erlang cookie): the node's consumer_timeout; with the Prometheus plugin, channels and connections "
           "enriched"),
    Option("listen", f"0.0.0.0:{DEFAULT_PORT}", config.host_port, "HOST:PORT for /metrics, /api/snapshot, /healthz, "
           "and /v1/traces (OTLP)"),
    Option("interval", 10.0, config.positive_float, "seconds between polls"),
    Option("timeout", 5.0, config.positive_float, "seconds one HTTP request to the broker may take"),
    Option("deadline", None, config.positive_float, "seconds a whole poll may take before it counts as failed "
           "(default: 3 times the interval: a slow poll is late, not down)"),
    Option("ca_file", None, config.existing_file, "CA bundle to verify the management API's TLS certificate"),
    Option("insecure_skip_verify", False, config.boolean, "do not verify the management API's TLS certificate",
           switch=True),
    Option("include_vhosts", None, config.regex, "only vhosts whose whole name matches this regex"),
    Option("exclude_vhosts", None, config.regex, "skip vhosts whose whole name matches this regex"),
    Option("include_queues", None, config.regex, "only queues (and their consumers) matching this regex"),
    Option("exclude_queues", None, config.regex, "skip queues (and their consumers) matching this regex"),
    Option("max_queues", 20_000, config.positive_int, "queues with series of their own; the rest fold into "
           "per-vhost totals"),
    Option("max_channels", 10_000, config.positive_int, "channels (with their consumers) with series of their "
           "own; the rest fold into per-vhost totals"),
    Option("web_username", None, str, "require basic auth with this user on /metrics and /api "
           "(password from ACKSCOPE_WEB_PASSWORD or ACKSCOPE_WEB_PASSWORD_FILE)"),
    Option("web_tls_cert", None, config.existing_file, "serve HTTPS with this certificate (PEM)"),
    Option("web_tls_key", None, config.existing_file, "private key of --web-tls-cert (PEM)"),
    Option("broker_log", None, str, "the broker node's log file, followed across rotation ('-': standard input, e.g. "
           "kubectl logs -f): why channels and connections were closed, consumers timed out, connections churned"),
    Option("event_exchange", False, config.boolean, "read the broker's event exchange (the rabbitmq_event_exchange "
           "plugin) through the probes' user (--amqp-url; it needs read permission on amq.rabbitmq.event): "
           "connections and channels opened and closed, by client", switch=True),
    Option("confirm_bench", None, config.existing_file, "what 'ackscope bench confirms --save FILE' measured on this "
           "broker: publisher-waits-each-confirm quotes its figures"),
    Option("traces_dir", None, str, "the OpenTelemetry Collector's file exporter's folder (OTLP/JSON lines), read "
           "at each poll: the applications' spans where the Collector cannot reach /v1/traces"),
    Option("trace_deadline", 60.0, config.positive_float, "seconds after a traced publish arrived with no delivery "
           "before the message counts as unprocessed"),
    Option("max_destinations", 50, config.positive_int, "trace destinations with series of their own; the rest "
           "count as (other)"),
    Option("max_services", 50, config.positive_int, "traced services (service.name) with series of their own; the "
           "rest count as (other)"),
    Option("max_trace_messages", 1_000_000, config.positive_int, "traced messages held at once; spans beyond are "
           "dropped and counted (ackscope_trace_spans_dropped_total)"),
    probe_config.DATA_DIR,
    Option("snapshot_every", 1, config.positive_int, "with --data-dir, record every Nth poll's snapshot"),
)
SECRETS = ("password", "web_password")


@dataclass(frozen=True)
class ExporterConfig:
    management_url: str
    username: str
    password: Secret
    listen: tuple[str, int]
    interval: float
    timeout: float
    deadline: float
    verify: bool | str
    selection: Selection
    limits: Limits
    web: WebSecurity
    probes: ProbeConfig | None = None  # run the synthetic probes in-process when an AMQP URL is set
    source: str = "auto"  # auto | management | prometheus
    prometheus_url: tuple[str, ...] | None = None  # each node's plugin; default: where the listeners say
    cli: list[str] | None = None  # rabbitmqctl command line: the node's settings, the Prometheus plugin's enrichment
    thresholds: Thresholds = Thresholds()
    data_dir: str | None = None  # probe events and snapshot history as Parquet
    snapshot_every: int = 1
    broker_log: str | None = None  # the node's log file, or "-" for standard input
    event_exchange: bool = False  # read amq.rabbitmq.event through the probes' user
    confirm_bench: ConfirmBench | None = None  # what `ackscope bench confirms` measured on this broker
    traces_dir: str | None = None  # the Collector's file exporter's folder
    trace_deadline: float = 60.0
    max_destinations: int = 50
    max_services: int = 50
    max_trace_messages: int = 1_000_000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="TOML file; its [exporter] table holds these options "
                        "[env ACKSCOPE_CONFIG]")
    config.add_arguments(parser, OPTIONS)
    probe_config.add_arguments(parser.add_argument_group("probes (run in-process when an AMQP URL is set)"))


def load(args: argparse.Namespace, environ: Mapping[str, str]) -> ExporterConfig:
    path = getattr(args, "config", None) or environ.get("ACKSCOPE_CONFIG")
    document = config.load_toml(path)
    section = config.table(document, "exporter", path)
    v: dict[str, Any] = config.resolve(OPTIONS, args, environ, section, SECRETS, where=path or "config")
    password = password_for(v["username"], v["password"], v["management_url"])
    if v["web_username"] and v["web_password"] is None:
        raise ConfigError("--web-username needs ACKSCOPE_WEB_PASSWORD or ACKSCOPE_WEB_PASSWORD_FILE")
    if bool(v["web_tls_cert"]) != bool(v["web_tls_key"]):
        raise ConfigError("--web-tls-cert and --web-tls-key go together")
    if v["ca_file"] and v["insecure_skip_verify"]:
        raise ConfigError("--ca-file and --insecure-skip-verify contradict each other")
    probes = probe_config.load(args, environ, document, path, v["data_dir"])
    if v["event_exchange"] and probes is None:
        raise ConfigError("--event-exchange reads the event exchange through the probes' user: set --amqp-url "
                          "(or ACKSCOPE_AMQP_URL) too")
    return ExporterConfig(
        management_url=v["management_url"], username=v["username"], password=password, listen=v["listen"],
        interval=v["interval"], timeout=v["timeout"], deadline=v["deadline"] or DEADLINE_INTERVALS * v["interval"],
        verify=False if v["insecure_skip_verify"] else (v["ca_file"] or True),
        selection=Selection(v["include_vhosts"], v["exclude_vhosts"], v["include_queues"], v["exclude_queues"]),
        limits=Limits(max_queues=v["max_queues"], max_channels=v["max_channels"]),
        web=WebSecurity(v["web_username"], v["web_password"], v["web_tls_cert"], v["web_tls_key"]),
        probes=probes, thresholds=load_thresholds(document, path),
        data_dir=v["data_dir"], snapshot_every=v["snapshot_every"], broker_log=v["broker_log"],
        event_exchange=v["event_exchange"],
        confirm_bench=bench.saved(v["confirm_bench"]) if v["confirm_bench"] else None,
        source=v["source"], prometheus_url=v["prometheus_url"], cli=v["cli"],
        traces_dir=v["traces_dir"], trace_deadline=v["trace_deadline"], max_destinations=v["max_destinations"],
        max_services=v["max_services"], max_trace_messages=v["max_trace_messages"],
    )


def password_for(username: str, password: Secret | None, management_url: str) -> Secret:
    """The password given, or guest's own for user guest on a loopback URL: the broker's default account
    answers only there, so anywhere else (a container reaching its broker by name) no credentials is an error
    at the start, not a login refused at every poll."""
    if password is None:
        if username != "guest":
            raise ConfigError(f"no password for user {username!r}: set ACKSCOPE_PASSWORD or ACKSCOPE_PASSWORD_FILE")
        if not _loopback(urlsplit(management_url).hostname or ""):
            raise ConfigError(f"no credentials for {management_url}: RabbitMQ's guest account answers on "
                              "loopback only; set ACKSCOPE_USERNAME and ACKSCOPE_PASSWORD or ACKSCOPE_PASSWORD_FILE")
        password = Secret("guest")
    return password


def _loopback(host: str) -> bool:
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def load_thresholds(document: Mapping[str, Any], path: str | None) -> Thresholds:
    try:
        return Thresholds.from_table(dict(config.table(document, "diagnosis", path)), f"{path}: [diagnosis]")
    except ValueError as e:
        raise ConfigError(str(e)) from None


class Exporter:
    """The poller, the probes (when configured) and the HTTP server; `start()` returns once all run."""

    def __init__(self, cfg: ExporterConfig):
        try:
            source = make_source(cfg.source, cfg.management_url, cfg.prometheus_url, cfg.username, cfg.password,
                                 timeout=cfg.timeout, deadline=cfg.deadline, verify=cfg.verify,
                                 selection=cfg.selection, cli=cfg.cli, upgrade_facts=True)
        except ValueError as e:
            raise ConfigError(f"--management-url or --prometheus-url: {e}") from None
        self.cfg = cfg
        self.onset = Onset()  # since when each finding holds: "since when" is the on-call's third question
        self.recent = Recent(cfg.thresholds.window_seconds)  # the window the rate-like rules judge
        self.recent_traces: Recent[TraceWindow] = Recent(cfg.thresholds.window_seconds)  # ... and the trace rules
        self.lagging = Recent(PERSISTENT_COUNT_LAG)  # a poll a few seconds back, for counts that lag
        self.holding = Holding()  # since when each channel has held deliveries without settling any
        self.waiting = Waiting()  # how long each queue's oldest message has waited, at least
        self.confirm_waits = ConfirmWaits(cfg.thresholds.window_seconds)  # how many each publisher leaves in flight
        self.turnover = ChannelTurnover(cfg.thresholds.window_seconds)  # channels closing on connections that stay
        self.departures = Departures(cfg.thresholds.window_seconds)  # channels and queues gone, judged for the window
        self.probes = Probes(cfg.probes) if cfg.probes is not None else None
        self.history = SnapshotHistory(cfg.data_dir, cfg.snapshot_every) if cfg.data_dir else None
        self.ledger = BreakLedger(cfg.thresholds.window_seconds,
                                  BrokerLogWatch(cfg.broker_log) if cfg.broker_log else None, cfg.selection.vhost,
                                  EventExchangeWatch(cfg.probes.entries) if cfg.event_exchange and cfg.probes else None)
        # The applications' spans (/v1/traces, --traces-dir): paired as they come in a worker process, placed by
        # each poll's snapshot.
        self.traces = TraceEndpoint(TraceSettings(deadline_s=cfg.trace_deadline, max_messages=cfg.max_trace_messages,
                                                  max_destinations=cfg.max_destinations,
                                                  max_services=cfg.max_services, data_dir=cfg.data_dir,
                                                  traces_dir=cfg.traces_dir))
        self.poller = Poller(source, interval=cfg.interval, limits=cfg.limits, diagnose=self._diagnose,
                             record=self.history.record if self.history is not None else None,
                             breaks=lambda snapshot: self.ledger.update(snapshot, time.time()),
                             traces=self._traces)
        healthy = loop_healthy(lambda: self.poller.status.last_attempt_at, time.time(), cfg.interval, cfg.deadline)
        source = Source(self._metrics_body, healthy, {"/api/snapshot": lambda: self.poller.exposition.snapshot.gz(),
                                                      "/api/findings": lambda: self.poller.exposition.findings.gz(),
                                                      "/api/breaks": lambda: self.poller.exposition.breaks.gz(),
                                                      "/api/overview": lambda: self.poller.exposition.overview.gz(),
                                                      "/api/traces": lambda: self.poller.exposition.traces.gz(),
                                                      "/api/probes": self._probes_json},
                        receivers={"/v1/traces": self.traces})
        try:
            self.server = make_server(*cfg.listen, source, cfg.web)
        except OSError as e:
            raise ConfigError(f"--listen {cfg.listen[0]}:{cfg.listen[1]}: {e.strerror}") from None

    def _probe_stats(self) -> ProbeStats:
        return self.probes.stats() if self.probes is not None else ProbeStats(time.time())

    def _diagnose(self, snapshot: Snapshot, previous: Snapshot | None, breaks: Breaks | None) -> Diagnosis:
        oldest, window = self.waiting.update(snapshot), self.recent.start(snapshot)
        verdict = diagnose(Context(snapshot, previous, self._probe_stats().targets, self.cfg.thresholds,
                                   earlier=self.lagging.start(snapshot), window=window, breaks=breaks,
                                   held=self.holding.update(snapshot), oldest=oldest,
                                   in_flight=self.confirm_waits.update(snapshot), confirm_bench=self.cfg.confirm_bench,
                                   turnover=self.turnover.update(snapshot),
                                   departed=self.departures.update(snapshot, window or previous),
                                   traces=self.poller.traces,
                                   traces_start=self.recent_traces.start(self.poller.traces)
                                   if self.poller.traces is not None else None))
        return replace(verdict, findings=tuple(self.onset.stamp(list(verdict.findings), snapshot.taken_at)),
                       upgrades=outlooks(snapshot, breaks), oldest=tuple(oldest.values()))

    def _traces(self, snapshot: Snapshot | None) -> TraceWindow:
        return placed(self.traces.window(time.time()), snapshot)

    def _probes_json(self) -> bytes:
        return compressed([self._probe_stats().json()])

    def _metrics_body(self, gzipped: bool) -> bytes:
        body = self.poller.exposition.metrics_body(gzipped)
        # A gzip stream may hold several members: the probes' part is one more.
        return body if self.probes is None else body + probe_metrics(self.probes.stats(), gzipped)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        scheme = "https" if self.cfg.web.tls_cert else "http"
        return f"{scheme}://{'127.0.0.1' if host in ('0.0.0.0', '') else host}:{port}"

    def start(self) -> None:
        # Rendering a large exposition holds the GIL for most of a second; a shorter switch interval lets
        # scrape threads in within about a millisecond instead of waiting 5 ms at each of their steps.
        sys.setswitchinterval(0.001)
        # Before any thread starts: the fetch threads' decoding then shares one arena, handed back after each
        # poll, instead of each keeping its own high-water mark (core/native_memory.py).
        native_memory.one_arena()
        if self.history is not None:
            self.history.start()
        self.poller.start()
        if self.probes is not None:
            self.probes.start()
        serve_in_background(self.server)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.poller.stop()
        self.ledger.close()
        if self.probes is not None:
            self.probes.stop()
        if self.history is not None:
            self.history.stop()
        self.traces.stop()


def run(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    exporter = Exporter(load(args, environ))
    exporter.start()
    log.info("exporter polling %s every %gs; serving %s/metrics", exporter.cfg.management_url,
             exporter.cfg.interval, exporter.url)
    wait_for_signal()
    exporter.stop()
    return 0
