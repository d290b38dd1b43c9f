"""`ackscope demo`: everything at once, until Ctrl-C. A private local broker (or yours, with
--management-url/--amqp-url), the exporter with its probes and a data dir, failure scenarios to look at,
the dashboard, and Prometheus with the alert rules when it is installed."""

from __future__ import annotations

import argparse
import logging
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping
from importlib import resources
from pathlib import Path

import requests

from ackscope.core import amqp
from ackscope.core.config import ConfigError, host_port, read_secret
from ackscope.core.http_server import WebSecurity
from ackscope.core.processes import stop_process, wait_for_signal
from ackscope.core.secret import Secret
from ackscope.dashboard.launch import environment, streamlit_command
from ackscope.dashboard.settings import named
from ackscope.exporter.cardinality import Limits
from ackscope.probes.config import ProbeConfig
from ackscope.probes.runner import ProbeSettings
from ackscope.probes.targets import targets_from_config
from ackscope.sources import Selection
from ackscope.workloads.ports import free_port
from ackscope.workloads.private_broker import ADMIN_PASSWORD, ADMIN_USER, LocalBroker
from ackscope.workloads.rabbitmq_release import LocalBrokerError
from ackscope.workloads.scenarios import BY_NAME, Running

from .exporter import Exporter, ExporterConfig

log = logging.getLogger("ackscope.demo")

# One of each kind of client mistake the dashboard and the alerts show, the failures reported from the field among
# them (a stalled consumer, a double ack, a connection per message, a channel per job, confirmed messages a length
# limit, a dead-letter cycle or a deleted queue drops, a temporary queue holding messages, an auto-ack consumer that
# leaves, a get storm, a publisher nacked by a full queue), and a healthy client beside them.
SCENARIOS = ("prefetch-saturated", "prefetch-unlimited", "auto-ack-consumer", "requeue-loop", "consumer-stalled",
             "double-ack", "connection-per-message", "channel-per-job", "overflow-dropped", "dead-letter-cycle",
             "queue-deleted-holding", "temporary-queue-holding", "auto-ack-consumer-gone", "get-empty-storm",
             "publisher-nacked", "publisher-without-confirms", "unroutable-dropped", "healthy")
# Its own node logs at info, where RabbitMQ logs each connection opened and closed: the exporter, which follows
# that log, names who churns connections as well as why the broker closed channels.
NODE_LOG = ("log.file.level = info",)
# Shipped as package data (ackscope.deploy), so an installed ackscope finds them as a source tree does.
ALERT_RULES = resources.files("ackscope.deploy") / "prometheus" / "ackscope-alerts.yml"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--listen", default="127.0.0.1:9577", help="HOST:PORT for the exporter [127.0.0.1:9577]")
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between polls [5]")
    parser.add_argument("--management-url", help="use this broker instead of a private one (user from "
                        "--username, password from ACKSCOPE_PASSWORD[_FILE])")
    parser.add_argument("--username", default="guest", help="management API user with --management-url [guest]")
    parser.add_argument("--amqp-url", help="the probes' broker with --management-url (password from "
                        "ACKSCOPE_AMQP_PASSWORD[_FILE]); without it, no probes")
    parser.add_argument("--scenarios", help="comma-separated failure scenarios to run (default: a set of eighteen on "
                        "the private broker, none on yours); 'none' for none")
    parser.add_argument("--data-dir", help="where the probes and the exporter write Parquet [a new temporary "
                        "directory, kept for `ackscope pipeline`]")
    parser.add_argument("--dashboard-port", type=int, default=8501, help="port of the dashboard [8501, or a free "
                        "one when taken]")
    parser.add_argument("--stats-off", action="store_true", help="start the private node with management "
                        "statistics off, as the official container image runs it (ackscope then reads the broker's "
                        "Prometheus plugin)")
    parser.add_argument("--prometheus-port", type=int, default=9090, help="port of Prometheus when installed "
                        "[9090, or a free one when taken]")


def run(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    try:
        listen = host_port(args.listen)
    except ValueError as e:
        raise ConfigError(f"--listen: {e}") from None
    if args.amqp_url and not args.management_url:
        raise ConfigError("--amqp-url needs --management-url (without both, the demo starts its own broker)")
    if args.stats_off and args.management_url:
        raise ConfigError("--stats-off configures the demo's own broker: it does not go with --management-url")
    scenarios = _scenarios(args.scenarios, own_broker=not args.management_url)
    if scenarios and args.management_url and not args.amqp_url:
        raise ConfigError("--scenarios needs --amqp-url: they are AMQP clients")
    broker = None
    if not args.management_url:
        broker = LocalBroker(name="ackscope-demo", statistics=not args.stats_off, config=NODE_LOG)
        log.info("starting a private RabbitMQ node in %s ...", broker.base_dir)
        try:
            broker.start()
        except LocalBrokerError as e:  # its directory stays: the message points at the node's log there
            broker.stop()
            raise ConfigError(str(e)) from None
    management_url = args.management_url or broker.management_url
    username = args.username if args.management_url else ADMIN_USER
    password = (read_secret("password", environ, {}, "demo") or Secret("guest")) if args.management_url \
        else Secret(ADMIN_PASSWORD)
    amqp_url = _amqp(args, environ, broker)
    data_dir = args.data_dir or tempfile.mkdtemp(prefix="ackscope-demo-data-")
    exporter = running = None
    children: list[subprocess.Popen] = []
    prometheus_dir = None
    try:
        exporter = Exporter(ExporterConfig(
            management_url=management_url, username=username, password=password,
            prometheus_url=(broker.prometheus_url,) if broker is not None else None,
            # Beside its own node the demo reads what only the node tells: its log (why channels and connections
            # closed, who churns) and, through rabbitmqctl, its settings (the consumer timeout in force, read every
            # 5 minutes). Not with statistics off: there the CLI is run twice at every poll (its channel and
            # connection lists), an Erlang VM started each time, too much for a demo's machine.
            broker_log=str(broker.log_file) if broker is not None else None,
            cli=broker.cli_command() if broker is not None and not args.stats_off else None,
            listen=listen, interval=args.interval, timeout=5.0, deadline=args.interval, verify=True,
            selection=Selection(), limits=Limits(), web=WebSecurity(), data_dir=data_dir,
            # The demo shows every path the probes measure, the nack path included.
            probes=None if amqp_url is None else ProbeConfig(
                entries=(amqp.Endpoint(amqp_url.url, amqp_url.display),),
                targets=targets_from_config(None, {}, reject_publish=True), settings=ProbeSettings(),
                data_dir=data_dir)))
        exporter.start()
        if scenarios:
            running = Running([BY_NAME[n] for n in scenarios], amqp_url.url).start()
        prometheus_url = alerts_page = None
        if shutil.which("prometheus"):
            prometheus_dir = Path(tempfile.mkdtemp(prefix="ackscope-demo-prometheus-"))
            prometheus_url, proc = _prometheus(exporter.url, prometheus_dir, _port(args.prometheus_port),
                                               args.interval)
            children.append(proc)
            alerts_page = _alerts_page(prometheus_url, proc)
        dashboard_port = _port(args.dashboard_port)
        settings = {"exporters": (named(exporter.url),), "refresh": 5.0, "reports": f"{data_dir}/reports",
                    "prometheus_url": prometheus_url}
        children.append(subprocess.Popen(streamlit_command(dashboard_port, "127.0.0.1"),
                                         env=environment(settings, environ),
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        if broker is not None:
            print(f"broker     amqp://127.0.0.1:{broker.ports.amqp}  management {broker.management_url} "
                  f"({ADMIN_USER}/{ADMIN_PASSWORD}, loopback only)")
        else:
            print(f"broker     {management_url}" + (f"  probes on {amqp_url.display}" if amqp_url else "  (no probes)"))
        print(f"metrics    {exporter.url}/metrics")
        print(f"snapshot   {exporter.url}/api/snapshot")
        print(f"dashboard  http://127.0.0.1:{dashboard_port}/")
        print(f"prometheus {alerts_page}" if alerts_page else
              f"prometheus {prometheus_url} did not start: no alerts in this demo" if prometheus_url else
              "prometheus not installed (apt-get install prometheus): no alerts in this demo")
        print(f"scenarios  {', '.join(scenarios) if scenarios else 'none'}")
        print(f"data       {data_dir}  (then: ackscope pipeline --data-dir {data_dir} --out {data_dir}/reports)")
        print("Ctrl-C stops everything.", flush=True)
        wait_for_signal()
    finally:
        for proc in children:
            stop_process(proc)
        if running is not None:
            running.stop()
        if exporter is not None:
            exporter.stop()
        if prometheus_dir is not None:
            shutil.rmtree(prometheus_dir, ignore_errors=True)
        if broker is not None:
            broker.stop()
            broker.remove()
    return 0


def _scenarios(names: str | None, own_broker: bool) -> tuple[str, ...]:
    if names is None:
        return SCENARIOS if own_broker else ()  # never load someone's broker unasked
    chosen = tuple(n.strip() for n in names.split(",") if n.strip() and n.strip() != "none")
    unknown = [n for n in chosen if n not in BY_NAME]
    if unknown:
        raise ConfigError(f"--scenarios: unknown {', '.join(unknown)} (ackscope scenario --list says which exist)")
    return chosen


def _amqp(args: argparse.Namespace, environ: Mapping[str, str], broker: LocalBroker | None
          ) -> amqp.AmqpUrl | None:
    """The probes' (and scenarios') AMQP URL with its password, and how to show it."""
    if broker is not None:
        return amqp.AmqpUrl(Secret(broker.amqp_url()), f"127.0.0.1:{broker.ports.amqp}")
    return amqp.resolve(args.amqp_url, environ, {}, "demo") if args.amqp_url else None


def _port(preferred: int) -> int:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", preferred))
            return preferred
        except OSError:
            return free_port()


def _prometheus(exporter_url: str, workdir: Path, port: int, interval: float) -> tuple[str, subprocess.Popen]:
    (workdir / "ackscope-alerts.yml").write_text(ALERT_RULES.read_text())
    rules = f"rule_files: ['{workdir}/ackscope-alerts.yml']\n"
    every = f"{max(1, int(interval))}s"
    (workdir / "prometheus.yml").write_text(
        f"global: {{scrape_interval: {every}, evaluation_interval: {every}}}\n{rules}"
        f"scrape_configs:\n- job_name: ackscope\n  static_configs:\n"
        f"  - targets: ['{exporter_url.removeprefix('http://')}']\n")
    proc = subprocess.Popen(["prometheus", f"--config.file={workdir}/prometheus.yml",
                             f"--storage.tsdb.path={workdir}/data", f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return f"http://127.0.0.1:{port}", proc


def _alerts_page(url: str, proc: subprocess.Popen, timeout: float = 30.0) -> str | None:
    """Prometheus' alerts page as this build serves it: /alerts in its own UI, /classic/alerts in builds
    without the new UI's assets (Debian's package); None when Prometheus did not come up."""
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        for page in ("/alerts", "/classic/alerts"):
            try:
                if requests.get(url + page, timeout=2).status_code == 200:
                    return url + page
            except requests.RequestException:
                break  # not listening yet
        time.sleep(0.2)
    return None
