"""`ackscope demo`: a private local broker, and the exporter with its probes against it, until Ctrl-C."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Mapping

from ackscope.exporter.command import Exporter, ExporterConfig, wait_for_signal
from ackscope.exporter.cardinality import Limits
from ackscope.exporter.normalise import Selection
from ackscope.exporter.server import WebSecurity
from ackscope.probes.command import ProbeConfig
from ackscope.probes.runner import ProbeSettings
from ackscope.probes.targets import targets_from_config

from .config import ConfigError, host_port
from .local_broker import ADMIN_PASSWORD, ADMIN_USER, LocalBroker, LocalBrokerError
from .secret import Secret

log = logging.getLogger("ackscope.demo")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--listen", default="127.0.0.1:9577", help="HOST:PORT for the exporter [127.0.0.1:9577]")
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between polls [5]")


def run(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    try:
        listen = host_port(args.listen)
    except ValueError as e:
        raise ConfigError(f"--listen: {e}") from None
    broker = LocalBroker(name="ackscope-demo")
    log.info("starting a private RabbitMQ node in %s ...", broker.base_dir)
    try:
        broker.start()
    except LocalBrokerError as e:
        broker.remove()
        raise ConfigError(str(e)) from None
    exporter = None
    try:
        exporter = Exporter(ExporterConfig(
            management_url=broker.management_url, username=ADMIN_USER, password=Secret(ADMIN_PASSWORD),
            listen=listen, interval=args.interval, timeout=5.0, deadline=args.interval, verify=True,
            selection=Selection(), limits=Limits(), web=WebSecurity(),
            # The demo shows every path the probes measure, the nack path included.
            probes=ProbeConfig(amqp_url=Secret(broker.amqp_url()), display_url=f"127.0.0.1:{broker.ports.amqp}",
                               ssl_options=None, targets=targets_from_config(None, {}, reject_publish=True),
                               settings=ProbeSettings(), data_dir=None)))
        exporter.start()
        print(f"broker     amqp://127.0.0.1:{broker.ports.amqp}  management {broker.management_url} "
              f"({ADMIN_USER}/{ADMIN_PASSWORD}, loopback only)")
        print(f"metrics    {exporter.url}/metrics")
        print(f"snapshot   {exporter.url}/api/snapshot")
        print("Ctrl-C stops everything.", flush=True)
        wait_for_signal()
    finally:
        if exporter is not None:
            exporter.stop()
        broker.stop()
        broker.remove()
    return 0
