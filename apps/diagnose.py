"""`ackscope diagnose`: a one-shot report, worst first, with exit codes as on-call checks expect (the
Nagios convention): 0 nothing at warning or above, 1 a warning, 2 a critical, 3 the broker unreachable or
the login refused. Where a rule needs a rate, the broker is sampled twice, --window apart, and read a few times in
between for what only consecutive polls show (channels closing on a connection that stays open).

On call it runs after the incident: what has ended by then is in no sample. With --broker-log, the node's log of
the last --since joins the report (channels and connections the broker closed, consumers it timed out), each
finding with when it was logged. With --exporter-url, a running exporter's findings over its whole window are
reported instead of samples of diagnose's own.

With --brokers FILE, several brokers at once (each its [brokers.NAME] table: its URL, user, password file and
other connection settings), read side by side: a line per broker worst first, then each broker's report. One
that cannot be read is said so and hides none of the others; the exit code is the worst broker's, a critical
before an unreadable broker before a warning.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields, replace
from datetime import UTC, datetime
from typing import Any

from ackscope.core import config
from ackscope.core.config import ConfigError
from ackscope.core.durations import describe, parse_duration
from ackscope.core.evidence import rows as evidence_rows
from ackscope.dashboard.source import ExporterSource, Live
from ackscope.diagnosis.channel_turnover import ChannelTurnover
from ackscope.diagnosis.departures import Departures
from ackscope.diagnosis.holding import Holding
from ackscope.diagnosis.rules import Context, diagnose
from ackscope.diagnosis.thresholds import Thresholds
from ackscope.diagnosis.waiting import Waiting
from ackscope.model.events import (BROKER_LOG, CHANNEL_ERROR, CONNECTION_ERROR, CONNECTION_OPENED, CONSUMER_TIMEOUT,
                                   BrokerEvent, Breaks, cause)
from ackscope.model.findings import SEVERITIES, Diagnosis, Finding, NotEvaluated
from ackscope.model.probes import TargetStats
from ackscope.model.snapshot import CHANNELS, CONNECTIONS, QUEUE_COUNTS, STATISTICS_INTERVAL, Snapshot, carried
from ackscope.model.source import Source, SourceFailed
from ackscope.probes import config as probe_config
from ackscope.probes.service import Probes
from ackscope.sources import BreakLedger, BrokerLogWatch, Selection, make_source
from ackscope.sources.break_ledger import NAMING_SECONDS

from . import exporter as exporter_app

OK, WARNING, CRITICAL, UNREACHABLE = 0, 1, 2, 3
_CONNECTION_OPTIONS = ("management_url", "username", "source", "prometheus_url", "cli", "timeout", "ca_file",
                       "insecure_skip_verify", "include_vhosts", "exclude_vhosts", "include_queues", "exclude_queues")
OPTIONS = tuple(o for o in exporter_app.OPTIONS if o.key in _CONNECTION_OPTIONS)
COLOURS = {"critical": "bold red", "warning": "yellow", "info": "dim"}
# How the report's first line names each source a read can come from (auto chooses the last for a large broker).
SOURCES = {"management": "management API", "prometheus": "Prometheus plugin, management statistics off",
           "management+prometheus": "Prometheus plugin for the queues, management API for the rest: a large broker"}


MAX_SINCE = 366 * 86400.0  # --since at most: a log older than a year is no incident's
# How far back --broker-log is read when --since does not say: an incident paged for is minutes old when diagnose runs.
DEFAULT_SINCE = "15m"
# Reads between the window's two samples, at most, a second apart at least: a client whose channels live for a second
# or two is seen closing them only by reads that close together (the management plugin lists a channel from its next
# 5 s collection until it closes: measured on 3.10.8, one of 2 s in about a fifth of reads).
SAMPLES_BETWEEN = 19


def window_seconds(text: str) -> float:
    """A duration (500ms, 5s, 1m, a plain number of seconds) of at most an hour."""
    value = parse_duration(text)
    if value > 3600:
        raise ValueError(f"must be at most 1h, not {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="TOML file: [exporter] for the connection, [probe], "
                        "[diagnosis] thresholds [env ACKSCOPE_CONFIG]")
    parser.add_argument("--format", choices=("text", "json"), default="text", help="[text]")
    parser.add_argument("--brokers", metavar="FILE", help="TOML file of several brokers, a [brokers.NAME] table "
                        "each (management_url, username, password_file, and any other connection setting): "
                        "reported together, exit code the worst broker's")
    parser.add_argument("--window", default="5s", help="time between the two samples rates are computed from, "
                        "and how long the probes run when --amqp-url is given; a consumer that acks nothing across "
                        "it (5s at least) is said stalled for at least that long; the broker is read up to "
                        f"{SAMPLES_BETWEEN} times more within it, a second apart at least [5s]")
    parser.add_argument("--broker-log", metavar="FILE", help="the broker node's log file: what it logged in the "
                        "last --since (channels and connections the broker closed, consumers it timed out) is "
                        "judged too, each finding with when it was logged")
    parser.add_argument("--since", metavar="DURATION", help="with --broker-log: how far back the log is read, the "
                        f"window its events are judged over (30s, 15m, 2h) [{DEFAULT_SINCE}]")
    parser.add_argument("--exporter-url", metavar="URL", help="a running ackscope exporter: report its findings "
                        "over its whole window instead of sampling the broker (its web user and password from "
                        "ACKSCOPE_WEB_USERNAME and ACKSCOPE_WEB_PASSWORD or ACKSCOPE_WEB_PASSWORD_FILE)")
    config.add_arguments(parser, OPTIONS)
    probe_config.add_arguments(parser.add_argument_group("probes (run during the window when an AMQP URL is set)"))


@dataclass(frozen=True)
class Connected:
    """What a one-shot command reads the broker with: its source, and its configuration file."""

    source: Source
    document: Mapping[str, Any]  # the TOML document (--config), for the command's own tables
    path: str | None
    selection: Selection = Selection()  # the vhosts and queues watched: the log's events of others are not judged


def connect(args: argparse.Namespace, environ: Mapping[str, str], upgrade_facts: bool = False) -> Connected:
    """The source a one-shot command reads, from its options, environment and --config's [exporter] table;
    with `upgrade_facts`, its snapshots carry the policies and deprecated features in use."""
    path = args.config or environ.get("ACKSCOPE_CONFIG")
    document = config.load_toml(path)
    # The exporter's table also holds its listener and web settings: a one-shot takes what reaches the broker.
    section = {k: v for k, v in config.table(document, "exporter", path).items()
               if k in _CONNECTION_OPTIONS or k in ("password", "password_file")}
    v = config.resolve(OPTIONS, args, environ, section, ("password",), where=path or "config")
    return Connected(_source(v, upgrade_facts), document, path, _selection(v))


def _selection(v: Mapping[str, Any]) -> Selection:
    return Selection(v["include_vhosts"], v["exclude_vhosts"], v["include_queues"], v["exclude_queues"])


def _source(v: Mapping[str, Any], upgrade_facts: bool = False) -> Source:
    """The source for resolved connection settings `v`."""
    password = exporter_app.password_for(v["username"], v["password"], v["management_url"])
    selection = _selection(v)
    verify = False if v["insecure_skip_verify"] else (v["ca_file"] or True)
    try:
        return make_source(v["source"], v["management_url"], v["prometheus_url"], v["username"], password,
                           timeout=v["timeout"], deadline=v["timeout"] * 3, selection=selection, verify=verify,
                           cli=v["cli"], announce=False,  # the report's header names the source: no log line
                           upgrade_facts=upgrade_facts)
    except ValueError as e:
        raise ConfigError(f"--management-url or --prometheus-url: {e}") from None


def brokers(path: str) -> dict[str, Source]:
    """Each broker of a --brokers file by its name, in the file's order. Only its own table configures it: no
    option or environment variable meant for one broker reaches the others, its password included."""
    tables = config.table(config.load_toml(path), "brokers", path)
    if not tables:
        raise ConfigError(f"{path}: no [brokers.NAME] table")
    sources: dict[str, Source] = {}
    for name, table in tables.items():
        where = f"{path}: brokers.{name}"
        if not isinstance(table, dict) or not table.get("management_url"):
            raise ConfigError(f"{where}: a table with management_url")
        v = config.resolve(OPTIONS, argparse.Namespace(), {}, table, ("password",), where=where)
        if v["password"] is None and v["username"] != "guest":
            raise ConfigError(f"{where}: no password_file for user {v['username']!r}")
        try:
            sources[name] = _source(v)
        except ConfigError as e:
            raise ConfigError(f"{where}: {e}") from None
    return sources


def run(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    try:
        window = window_seconds(args.window)
    except ValueError as e:
        raise ConfigError(f"--window: {e}") from None
    since = _since(args)
    if args.exporter_url:
        return _run_from_exporter(args, environ)
    if args.brokers:
        return _run_many(args, environ, window)
    connected = connect(args, environ)
    source, document, path = connected.source, connected.document, connected.path
    thresholds = exporter_app.load_thresholds(document, path)
    probe_cfg = probe_config.load(args, environ, document, path)
    probes = Probes(probe_cfg) if probe_cfg is not None else None
    log = LogWindow(args.broker_log, since, connected.selection.vhost) if since is not None else None
    try:
        judged = _judge(source, window, thresholds, probes, log)
    except SourceFailed as e:
        print(f"ackscope diagnose: cannot read {source.base_url}: {e}", file=sys.stderr)
        return UNREACHABLE
    if args.format == "json":
        print(json.dumps(judged.to_json(), indent=2))
    else:
        print_report(judged.verdict, judged.headline(), notes=judged.notes())
    return exit_code(list(judged.verdict.findings))


def _since(args: argparse.Namespace) -> float | None:
    """--since in seconds where --broker-log is given, else None; the options that do not go together refused."""
    if args.exporter_url and (args.broker_log or args.brokers):
        raise ConfigError("--exporter-url: the exporter's findings are reported as it judged them, over its own "
                          "window; give the exporter its --broker-log, and diagnose other brokers apart")
    if args.since is not None and not args.broker_log:
        raise ConfigError("--since: how far back --broker-log is read, and no --broker-log is given")
    if not args.broker_log:
        return None
    if args.brokers:
        raise ConfigError("--broker-log: the log of one node; diagnose its broker alone (--management-url)")
    if args.broker_log == "-":
        raise ConfigError("--broker-log: diagnose reads a file once, from its start; save the stream to a file")
    try:
        since = parse_duration(args.since or DEFAULT_SINCE)
    except ValueError as e:
        raise ConfigError(f"--since: {e}") from None
    if not 1 <= since <= MAX_SINCE:
        raise ConfigError(f"--since: from a second to {describe(MAX_SINCE)}, not {args.since}")
    return since


class LogWindow:
    """--broker-log read once from its start, as the exporter reads it (its ledger: each event attributed to the
    client a sample saw on its connection), and kept for the last `since` seconds. A file that cannot be read is
    one line of the report, and the rules that need it are said not evaluated: nothing else is lost."""

    def __init__(self, path: str, since: float, vhosts: Callable[[str], bool] = lambda vhost: True):
        self.path, self.since = path, since
        self.problem: str | None = None
        self.breaks: Breaks | None = None
        self._ledger: BreakLedger | None = None
        try:
            with open(path, "rb"):  # said now, in diagnose's words: the follower would look for it again and again
                pass
        except OSError as e:
            self.problem = f"the broker log {path} cannot be read: {e.strerror}"
            return
        # NAMING_SECONDS longer: see read().
        self._ledger = BreakLedger(since + NAMING_SECONDS, BrokerLogWatch(path, from_start=True), vhosts)

    def read(self, snapshot: Snapshot | None, last: bool = False) -> None:
        """What the log holds so far, `snapshot` naming the connections it lists. The last read keeps the
        window's events (self.breaks) and closes the file."""
        if self._ledger is None:
            return
        now = time.time()
        self._ledger.update(snapshot, now)
        if not last:
            return
        # The ledger holds an event of a connection nobody named yet for NAMING_SECONDS, for a later poll that may
        # name it. A one-shot has no later poll: a read that much later lets them go, and trims to the last `since`
        # seconds before now (the ledger's window is that much longer).
        breaks = self._ledger.update(None, now + NAMING_SECONDS)
        self._ledger.close()
        self._ledger = None
        if breaks.problems:
            self.problem = "; ".join(breaks.problems)
            return
        self.breaks = replace(breaks, at=now)

    def note(self) -> str:
        """One line for the report: what was read, or why nothing was."""
        if self.breaks is None:
            return f"broker log: {self.problem or 'not read'}: the rules that need it are not evaluated"
        b = self.breaks
        said = (f"broker log {self.path}: the last {describe(self.since)} (since {_clock(b.at - self.since)}), "
                f"{len(b.events)} event{'s' * (len(b.events) != 1)} of {b.lines:,} lines read")
        if b.unknown_lines:
            said += f"; {b.unknown_lines:,} line{'s' * (b.unknown_lines != 1)} in neither of RabbitMQ's log formats " \
                    "passed over"
        return said

    def to_json(self) -> dict:
        b = self.breaks
        return {"path": self.path, "since_seconds": self.since, "problem": self.problem,
                **({"from": b.at - self.since, "to": b.at, "events": len(b.events), "lines": b.lines,
                    "unknown_lines": b.unknown_lines} if b is not None else {})}


@dataclass(frozen=True)
class Judged:
    """One broker read twice and judged."""

    source: Source
    verdict: Diagnosis
    snapshot: Snapshot
    log: LogWindow | None = None

    def headline(self) -> str:
        return _headline(self.snapshot, f"{self.source.base_url} ({SOURCES[self.source.name]})")

    def notes(self) -> tuple[str, ...]:
        return (self.log.note(),) if self.log is not None else ()

    def to_json(self) -> dict:
        return {"findings": [f.to_json() for f in self.verdict.findings],
                "not_evaluated": [n.to_json() for n in self.verdict.not_evaluated],
                "broker": {**_broker(self.snapshot), "source": self.source.name},
                **({"broker_log": self.log.to_json()} if self.log is not None else {})}


def _judge(source: Source, window: float, thresholds: Thresholds, probes: Probes | None = None,
           log: LogWindow | None = None) -> Judged:
    """Read `source` at the window's start and end, `window` apart (the probes running meanwhile, and the log read),
    and judge; SourceFailed when either of those reads fails. In between, it is read up to SAMPLES_BETWEEN times more
    for what only consecutive polls show (channels that close on a connection that stays, a consumer that acks
    nothing): one such read that fails is left out. The source is closed after."""
    between: list[Snapshot] = []
    try:
        if probes is not None:
            probes.start()
        first = source.read()
        began = time.monotonic()
        if log is not None:
            log.read(first)  # most of the log, while the window runs
        step = max(1.0, window / (SAMPLES_BETWEEN + 1))
        last = first  # the newest sample read: a channel listed without its connection keeps its client from it
        while time.monotonic() - began + 2 * step <= window:
            time.sleep(max(0.0, step * (len(between) + 1) - (time.monotonic() - began)))
            try:
                between.append(carried(source.read(), last))
                last = between[-1]
            except SourceFailed:
                continue  # the samples at the window's ends are what rates need; this one only adds detail
        time.sleep(max(0.0, window - (time.monotonic() - began)))  # the window itself: rates are counts over it
        second = carried(source.read(), last)
        stats = probes.stats().targets if probes is not None else ()
    finally:
        if probes is not None:
            probes.stop()
        source.close()
    if log is not None:
        log.read(second, last=True)
    breaks = log.breaks if log is not None else None
    return Judged(source, judge_samples(first, second, thresholds, stats, breaks, log.since if log else None,
                                        between), second, log)


def judge_samples(first: Snapshot, second: Snapshot, thresholds: Thresholds, probes: tuple[TargetStats, ...] = (),
                  breaks: Breaks | None = None, since: float | None = None,
                  between: Sequence[Snapshot] = ()) -> Diagnosis:
    """The verdict on two samples of the broker (and the samples `between` them, oldest first, for what only
    consecutive polls show) and, where the log was read, its events of the last `since` seconds, each such finding
    with when it was logged.

    A consumer that settled nothing across the samples has held its deliveries that long at least, and diagnose
    cannot know how much longer: it is judged stalled for at least that long (consumer-stalled), never a consumer
    working at its prefetch (prefetch-saturated), which is what the exporter says of it once it has watched it for
    stalled_consumer_seconds. Samples closer than STATISTICS_INTERVAL apart tell no stall."""
    apart = max(second.taken_at - first.taken_at, STATISTICS_INTERVAL)
    sampled = replace(thresholds, stalled_consumer_seconds=min(thresholds.stalled_consumer_seconds, apart))
    if since is not None:
        sampled = replace(sampled, window_seconds=since)
    holding, waiting, turnover = Holding(), Waiting(), ChannelTurnover(sampled.window_seconds)
    # What went between the first sample and the second is judged, whatever --since says of the log's events.
    departures = Departures(max(sampled.window_seconds, second.taken_at - first.taken_at))
    for memory in (holding, waiting, turnover):
        for sample in (first, *between):
            memory.update(sample)
    for sample in (first, *between):
        departures.update(sample, first)
    verdict = diagnose(Context(second, first, probes, sampled, breaks=breaks, held=holding.update(second),
                               oldest=waiting.update(second), turnover=turnover.update(second),
                               departed=departures.update(second, first)))
    verdict = replace(verdict, findings=tuple(_briefly(f, thresholds.stalled_consumer_seconds)
                                              for f in verdict.findings))
    if breaks is not None:
        verdict = replace(verdict, findings=tuple(_when_logged(f, breaks) for f in verdict.findings))
    return verdict


def _briefly(f: Finding, stalled_seconds: float) -> Finding:
    """A stall seen only across diagnose's samples, shorter than the exporter's stalled_consumer_seconds, at info: a
    consumer on one long job acks nothing for as long, and is slow, not stalled. Not where it has held for half the
    timeout the broker says is in force: at risk of it, as the exporter says."""
    held = f.evidence.get("held_for_at_least_seconds") if f.rule == "consumer-stalled" else None
    timeout, source = f.evidence.get("timeout_ms"), str(f.evidence.get("timeout_source", ""))
    if held is None or held >= stalled_seconds or timeout and not source.startswith("inferred") \
            and held * 2000 >= timeout:
        return f
    return replace(f, severity="info", evidence={
        **f.evidence, "seen": f"no ack across diagnose's samples {held} s apart: a consumer on one long job looks the "
                              f"same; the exporter judges a stall after {stalled_seconds:g} s"})


# The events each rule of the log groups into one finding; a rule not listed here: any event of its client.
_LOGGED = {"consumer-timed-out": (CONSUMER_TIMEOUT,), "closed-on-error": (CHANNEL_ERROR, CONNECTION_ERROR),
           "connection-churn": (CONNECTION_OPENED,)}


def _when_logged(f: Finding, breaks: Breaks) -> Finding:
    """A finding of the log's events with when they were logged: `since` the first, and the span in its evidence.
    The events are those of its client (its connection name, or the connection or the peer and user its object
    names) of the kinds its rule judges, and of the reason it names."""
    if BROKER_LOG not in str(f.evidence.get("source", "")):
        return f
    kinds = _LOGGED.get(f.rule)
    reason = f.evidence.get("reason") if f.rule == "closed-on-error" else None
    times = [e.at for e in breaks.events if (e.vhost or "") == f.vhost and (kinds is None or e.kind in kinds)
             and (reason is None or cause(e) == reason) and _names(f, e)]
    if not times:
        return f
    first, last = min(times), max(times)
    logged = (f"at {_clock(last)}" if first == last else f"from {_clock(first)} to {_clock(last)}") + \
        f", the last {describe(breaks.at - last)} before this report"
    return replace(f, since=first, evidence={**f.evidence, "logged": logged})


def _names(f: Finding, e: BrokerEvent) -> bool:
    """Whether the finding names the event's client."""
    if f.connection_name and e.connection_name == f.connection_name:
        return True
    if not e.connection:
        return False
    peer = e.connection.split(" -> ")[0]
    return e.connection in f.object or f"{peer.rsplit(':', 1)[0]} as {e.user}" in f.object


def _clock(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _run_from_exporter(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """A running exporter's findings over its whole window, with the broker as its last poll saw it: the broker is
    not sampled. Exit 3 where the exporter cannot be read or has no poll of the broker to show."""
    if probe_config.load(args, environ, {}, None) is not None:
        raise ConfigError("--exporter-url: the exporter's findings are reported as it judged them; the probes run "
                          "with diagnose's own samples (without --exporter-url)")
    try:
        url = config.http_url("ACKSCOPE_WEB_USERNAME and ACKSCOPE_WEB_PASSWORD or ACKSCOPE_WEB_PASSWORD_FILE")(
            args.exporter_url)
    except ValueError as e:
        raise ConfigError(f"--exporter-url: {e}") from None
    user = environ.get("ACKSCOPE_WEB_USERNAME")
    password = config.read_secret("web_password", environ, {}, "diagnose")
    timeout = config.resolve([o for o in OPTIONS if o.key == "timeout"], args, environ, {})["timeout"]
    # The dashboard's client of the exporter: the same documents, errors in the same words.
    exporter = ExporterSource(url, auth=(user, password.reveal() if password else "") if user else None,
                              timeout=timeout, reuse_seconds=0.0, documents=("snapshot", "findings"))
    try:
        read = _from_exporter(url, exporter.fetch())
    except (AttributeError, KeyError, TypeError, ValueError):  # JSON, but not the exporter's documents
        read = f"the exporter at {url} sent documents that are not an ackscope exporter's /api/snapshot and " \
               "/api/findings"
    if isinstance(read, str):
        print(f"ackscope diagnose: {read}", file=sys.stderr)
        return UNREACHABLE
    verdict, headline, notes, stale, broker = read
    if args.format == "json":
        print(json.dumps({"findings": [f.to_json() for f in verdict.findings],
                          "not_evaluated": [n.to_json() for n in verdict.not_evaluated], "broker": broker,
                          "exporter": {"url": url, "stale": stale is not None, "last_error": stale,
                                       "findings_are": "the exporter's, over its window"}}, indent=2))
    else:
        print_report(verdict, headline, notes=notes)
    code = exit_code(list(verdict.findings))
    return max(code, UNREACHABLE, key=_RANK.__getitem__) if stale is not None else code


_FINDING_FIELDS = {f.name for f in fields(Finding)}


def _from_exporter(url: str, live: Live) -> tuple[Diagnosis, str, tuple[str, ...], str | None, dict] | str:
    """The exporter's verdict, the report's headline and notes, why its last poll failed (None: it did not), and
    the broker as that poll saw it; or why it cannot be read, one line."""
    if live.error is not None:
        return live.error
    if live.snapshot is None:
        return f"the exporter at {url} has no poll of the broker yet: {live.exporter_error or 'it has just started'}"
    findings = []
    for doc in live.findings:
        f = Finding(**{k: v for k, v in doc.items() if k in _FINDING_FIELDS})
        if f.severity not in SEVERITIES or not isinstance(f.evidence, dict) or not _plausible(f.since, True):
            raise ValueError("not a finding")
        findings.append(f)
    skipped = tuple(NotEvaluated(str(n["rule"]), tuple(n.get("needs", ())), str(n.get("why", "")))
                    for n in live.not_evaluated)
    s = live.snapshot
    counts = {what: None if fact in s.get("unreported", ()) else len(s[what]) for what, fact in _COUNTED}
    taken_at, version = s["taken_at"], s["overview"].get("rabbitmq_version")
    if not _plausible(taken_at):
        raise ValueError("not a time")
    headline = f"{url}: RabbitMQ {version}, " + ", ".join(
        f"{what} not read" if counts[what] is None else f"{counts[what]} {what}"
        for what in ("queues", "channels", "connections"))
    notes = [f"the findings of the exporter at {url}, over its whole window, as of its poll at {_clock(taken_at)}: "
             "the broker was not sampled by diagnose"]
    if live.exporter_error:
        notes.append(f"stale: the exporter's last poll failed ({live.exporter_error}); these are its last good "
                     "poll's findings")
    broker = {"rabbitmq_version": version, "taken_at": taken_at, "source": live.source, **counts}
    return Diagnosis(tuple(findings), skipped), headline, tuple(notes), live.exporter_error, broker


def _plausible(at, none: bool = False) -> bool:
    """Whether an exporter's time is a number a clock can show (seconds since 1970, before 2200); None where
    `none`."""
    if at is None:
        return none
    return isinstance(at, int | float) and not isinstance(at, bool) and 0 <= at < 7.3e9


# The worst broker decides the exit code: a critical before a broker that cannot be read before a warning.
_RANK = {OK: 0, WARNING: 1, UNREACHABLE: 2, CRITICAL: 3}


def _run_many(args: argparse.Namespace, environ: Mapping[str, str], window: float) -> int:
    if probe_config.load(args, environ, {}, None) is not None:
        raise ConfigError("--brokers: the probes run against one broker; diagnose it alone with --amqp-url")
    path = args.config or environ.get("ACKSCOPE_CONFIG")
    thresholds = exporter_app.load_thresholds(config.load_toml(path), path)
    sources = brokers(args.brokers)

    def judged(source: Source) -> Judged | str:
        try:
            return _judge(source, window, thresholds)
        except SourceFailed as e:
            return f"cannot read {source.base_url}: {e}"
    with ThreadPoolExecutor(len(sources)) as pool:  # side by side: one window for all, one slow broker delays none
        results = dict(zip(sources, pool.map(judged, sources.values())))
    codes = {name: UNREACHABLE if isinstance(r, str) else exit_code(list(r.verdict.findings))
             for name, r in results.items()}
    order = sorted(results, key=lambda name: -_RANK[codes[name]])  # stable: the file's order among equals
    if args.format == "json":
        print(json.dumps({"exit_code": max(codes.values(), key=_RANK.__getitem__), "brokers": [
            {"name": name, "url": sources[name].base_url, "exit_code": codes[name],
             **({"error": r} if isinstance(r, str) else r.to_json())} for name, r in
            ((name, results[name]) for name in order)]}, indent=2))
    else:
        _print_many(order, results, codes)
    return max(codes.values(), key=_RANK.__getitem__)


_STATE = {OK: ("ok", "green"), WARNING: ("warning", "yellow"), CRITICAL: ("critical", "bold red"),
          UNREACHABLE: ("unreadable", "bold red")}


def _print_many(order: list[str], results: Mapping[str, Judged | str], codes: Mapping[str, int]) -> None:
    """A line per broker, worst first, then each broker's report under its name."""
    from rich.console import Console
    from rich.markup import escape

    console = Console(highlight=False, soft_wrap=True)
    console.print(f"[bold]{len(order)} brokers, worst first[/bold]")
    width = max(len(name) for name in order)
    for name in order:
        r, (state, colour) = results[name], _STATE[codes[name]]
        said = r if isinstance(r, str) else ", ".join(
            f"{n} {sev}" for sev in ("critical", "warning", "info")
            if (n := sum(1 for f in r.verdict.findings if f.severity == sev))) or "no findings"
        console.print(f"  [{colour}]{state.upper():<10}[/] {escape(name):<{width}}  "
                      f"{escape(said)}")
    for name in order:
        r = results[name]
        console.print()
        if isinstance(r, str):
            console.print(f"[bold]{escape(name)}[/bold]: [bold red]{escape(r)}[/bold red]")
        else:
            print_report(r.verdict, f"{name}: {r.headline()}")


def exit_code(findings: list[Finding]) -> int:
    severities = {f.severity for f in findings}
    return CRITICAL if "critical" in severities else WARNING if "warning" in severities else OK


# Each count and the fact without which it is no count (a list that was not read is not a list of none).
_COUNTED = (("queues", QUEUE_COUNTS), ("channels", CHANNELS), ("connections", CONNECTIONS),
            ("consumers", CHANNELS))


def _counts(s: Snapshot) -> dict[str, int | None]:
    """How many of each object the poll read; None for those it could not read."""
    return {what: None if fact in s.unreported else len(getattr(s, what)) for what, fact in _COUNTED}


def _broker(s: Snapshot) -> dict:
    ov = s.overview
    return {"rabbitmq_version": ov.rabbitmq_version, "erlang_version": ov.erlang_version,
            "cluster_name": ov.cluster_name, "taken_at": s.taken_at, "nodes": [n.name for n in s.nodes],
            "vhosts": list(s.vhosts), **_counts(s)}


def _headline(s: Snapshot, url: str) -> str:
    counts = _counts(s)
    return f"{url}: RabbitMQ {s.overview.rabbitmq_version}, " + ", ".join(
        f"{what} not read" if counts[what] is None else f"{counts[what]} {what}"
        for what in ("queues", "channels", "connections"))


LABEL_WIDTH = 28  # a longer label pushes only its own value along


def evidence_lines(evidence: dict) -> list[str]:
    """A finding's evidence under its first line: a row a line (core/evidence.py), the labels in a column, the
    first line headed "evidence"; nothing where there is none."""
    rows = evidence_rows(evidence)
    width = min(max((len(label) for label, _ in rows), default=0), LABEL_WIDTH)
    return [f"  {'evidence' if i == 0 else '':<8}  {label:<{width}}  {value}".rstrip() for i, (label, value) in
            enumerate(rows)]


def print_report(verdict: Diagnosis, headline: str, nothing: str = "no findings", notes: Sequence[str] = ()) -> None:
    """The headline and its notes (where the findings come from), then worst first, one block per finding:
    severity, rule, vhost and culprit on its first line (never wrapped, so it can be grepped), then since when
    where it is known, the evidence, why it matters, and what to do. Then the rules that could not run, one line
    each."""
    from rich.console import Console
    from rich.markup import escape

    console = Console(highlight=False, soft_wrap=True)
    console.print(f"[bold]{escape(headline)}[/bold]")
    for note in notes:
        console.print(escape(note))
    findings = verdict.findings
    counts = {sev: sum(1 for f in findings if f.severity == sev) for sev in ("critical", "warning", "info")}
    console.print(", ".join(f"[{COLOURS[k]}]{n} {k}[/]" for k, n in counts.items() if n) if findings
                  else f"[green]{escape(nothing)}[/green]")
    for f in findings:
        console.print(f"\n[{COLOURS[f.severity]}]{f.severity.upper():<8}[/] [bold]{f.rule}[/bold]  "
                      f"vhost={escape(f.vhost or '-')}  {escape(f.culprit)}")
        if f.since is not None:
            console.print(f"  since     {_clock(f.since)}")
        for line in evidence_lines(f.evidence):
            console.print(escape(line))
        console.print(f"  why       {escape(f.explanation)}")
        console.print(f"  do        {escape(f.remedy)}")
    if verdict.not_evaluated:
        console.print()
    for n in verdict.not_evaluated:
        if n.why:
            console.print(f"[dim]not evaluated[/dim] [bold]{n.rule}[/bold]: {escape(n.why)}")
            continue
        console.print(f"[dim]not evaluated[/dim] [bold]{n.rule}[/bold]: needs {escape(', '.join(n.needs))}, which "
                      "this read did not give")
