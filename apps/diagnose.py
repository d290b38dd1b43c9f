"""`ackscope diagnose`: a one-shot report, worst first, with exit codes as on-call checks expect (the
Nagios convention): 0 nothing at warning or above, 1 a warning, 2 a critical, 3 the broker unreachable or
the login refused. Where a rule needs a rate, the broker is sampled twice, --window apart.

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
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from ackscope.core import config
from ackscope.core.config import ConfigError
from ackscope.core.durations import parse_duration
from ackscope.diagnosis.holding import Holding
from ackscope.diagnosis.rules import Context, diagnose
from ackscope.diagnosis.waiting import Waiting
from ackscope.model.findings import Diagnosis, Finding
from ackscope.model.snapshot import CHANNELS, CONNECTIONS, QUEUE_COUNTS, Snapshot
from ackscope.model.source import Source, SourceFailed
from ackscope.probes import config as probe_config
from ackscope.probes.service import Probes
from ackscope.sources import Selection, make_source

from . import exporter as exporter_app

OK, WARNING, CRITICAL, UNREACHABLE = 0, 1, 2, 3
_CONNECTION_OPTIONS = ("management_url", "username", "source", "prometheus_url", "cli", "timeout", "ca_file",
                       "insecure_skip_verify", "include_vhosts", "exclude_vhosts", "include_queues", "exclude_queues")
OPTIONS = tuple(o for o in exporter_app.OPTIONS if o.key in _CONNECTION_OPTIONS)
COLOURS = {"critical": "bold red", "warning": "yellow", "info": "dim"}
# How the report's first line names each source a read can come from (auto chooses the last for a large broker).
SOURCES = {"management": "management API", "prometheus": "Prometheus plugin, management statistics off",
           "management+prometheus": "Prometheus plugin for the queues, management API for the rest: a large broker"}


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
                        "and how long the probes run when --amqp-url is given [5s]")
    config.add_arguments(parser, OPTIONS)
    probe_config.add_arguments(parser.add_argument_group("probes (run during the window when an AMQP URL is set)"))


@dataclass(frozen=True)
class Connected:
    """What a one-shot command reads the broker with: its source, and its configuration file."""

    source: Source
    document: Mapping[str, Any]  # the TOML document (--config), for the command's own tables
    path: str | None


def connect(args: argparse.Namespace, environ: Mapping[str, str], upgrade_facts: bool = False) -> Connected:
    """The source a one-shot command reads, from its options, environment and --config's [exporter] table;
    with `upgrade_facts`, its snapshots carry the policies and deprecated features in use."""
    path = args.config or environ.get("ACKSCOPE_CONFIG")
    document = config.load_toml(path)
    # The exporter's table also holds its listener and web settings: a one-shot takes what reaches the broker.
    section = {k: v for k, v in config.table(document, "exporter", path).items()
               if k in _CONNECTION_OPTIONS or k in ("password", "password_file")}
    v = config.resolve(OPTIONS, args, environ, section, ("password",), where=path or "config")
    return Connected(_source(v, upgrade_facts), document, path)


def _source(v: Mapping[str, Any], upgrade_facts: bool = False) -> Source:
    """The source for resolved connection settings `v`."""
    password = exporter_app.password_for(v["username"], v["password"], v["management_url"])
    selection = Selection(v["include_vhosts"], v["exclude_vhosts"], v["include_queues"], v["exclude_queues"])
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
    if args.brokers:
        return _run_many(args, environ, window)
    connected = connect(args, environ)
    source, document, path = connected.source, connected.document, connected.path
    thresholds = exporter_app.load_thresholds(document, path)
    probe_cfg = probe_config.load(args, environ, document, path)
    probes = Probes(probe_cfg) if probe_cfg is not None else None
    try:
        judged = _judge(source, window, thresholds, probes)
    except SourceFailed as e:
        print(f"ackscope diagnose: cannot read {source.base_url}: {e}", file=sys.stderr)
        return UNREACHABLE
    if args.format == "json":
        print(json.dumps(judged.to_json(), indent=2))
    else:
        print_report(judged.verdict, judged.headline())
    return exit_code(list(judged.verdict.findings))


@dataclass(frozen=True)
class Judged:
    """One broker read twice and judged."""

    source: Source
    verdict: Diagnosis
    snapshot: Snapshot

    def headline(self) -> str:
        return _headline(self.snapshot, f"{self.source.base_url} ({SOURCES[self.source.name]})")

    def to_json(self) -> dict:
        return {"findings": [f.to_json() for f in self.verdict.findings],
                "not_evaluated": [n.to_json() for n in self.verdict.not_evaluated],
                "broker": {**_broker(self.snapshot), "source": self.source.name}}


def _judge(source: Source, window: float, thresholds, probes: Probes | None = None) -> Judged:
    """Read `source` twice, `window` apart (the probes running meanwhile), and judge; SourceFailed when a read
    fails. The source is closed after."""
    try:
        if probes is not None:
            probes.start()
        first = source.read()
        time.sleep(window)  # the window itself: rates are counts over it
        second = source.read()
        stats = probes.stats().targets if probes is not None else ()
    finally:
        if probes is not None:
            probes.stop()
        source.close()
    holding, waiting = Holding(), Waiting()
    holding.update(first)
    waiting.update(first)
    return Judged(source, diagnose(Context(second, first, stats, thresholds, held=holding.update(second),
                                           oldest=waiting.update(second))), second)


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


def print_report(verdict: Diagnosis, headline: str, nothing: str = "no findings") -> None:
    """The headline, then worst first, one block per finding: severity, rule, vhost and culprit on its first line
    (never wrapped, so it can be grepped), then the evidence, why it matters, and what to do. Then the rules that
    could not run, one line each."""
    from rich.console import Console
    from rich.markup import escape

    console = Console(highlight=False, soft_wrap=True)
    console.print(f"[bold]{escape(headline)}[/bold]")
    findings = verdict.findings
    counts = {sev: sum(1 for f in findings if f.severity == sev) for sev in ("critical", "warning", "info")}
    console.print(", ".join(f"[{COLOURS[k]}]{n} {k}[/]" for k, n in counts.items() if n) if findings
                  else f"[green]{escape(nothing)}[/green]")
    for f in findings:
        evidence = ", ".join(f"{k}={v}" for k, v in f.evidence.items() if v is not None)
        console.print(f"\n[{COLOURS[f.severity]}]{f.severity.upper():<8}[/] [bold]{f.rule}[/bold]  "
                      f"vhost={escape(f.vhost or '-')}  {escape(f.culprit)}")
        console.print(f"  evidence  {escape(evidence)}")
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
