"""`ackscope probe`: the synthetic probes alone, with their own /metrics."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Mapping

from ackscope.core import config
from ackscope.core.config import ConfigError
from ackscope.core.http_server import Source, make_server, serve_in_background
from ackscope.core.processes import wait_for_signal
from ackscope.exporter.exposition import probe_metrics
from ackscope.probes import config as probe_config
from ackscope.probes.service import Probes

log = logging.getLogger("ackscope.probes")

DEFAULT_PORT = 9578


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="TOML file; its [probe] table holds these options "
                        "[env ACKSCOPE_CONFIG]")
    parser.add_argument("--listen", metavar="HOST:PORT", help=f"address of /metrics [env ACKSCOPE_LISTEN; default "
                        f"0.0.0.0:{DEFAULT_PORT}]")
    probe_config.add_arguments(parser)
    config.add_arguments(parser, (probe_config.DATA_DIR,))


def run(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    path = args.config or environ.get("ACKSCOPE_CONFIG")
    document = config.load_toml(path)
    data_dir = config.resolve((probe_config.DATA_DIR,), args, environ, {})["data_dir"]
    cfg = probe_config.load(args, environ, document, path, data_dir)
    if cfg is None:
        raise ConfigError("no AMQP URL: set --amqp-url or ACKSCOPE_AMQP_URL")
    try:
        listen = config.host_port(args.listen or environ.get("ACKSCOPE_LISTEN") or f"0.0.0.0:{DEFAULT_PORT}")
    except ValueError as e:
        raise ConfigError(f"--listen: {e}") from None
    probes = Probes(cfg)
    try:
        server = make_server(*listen, Source(lambda gzipped: probe_metrics(probes.stats(), gzipped), lambda: True))
    except OSError as e:
        raise ConfigError(f"--listen {listen[0]}:{listen[1]}: {e.strerror}") from None
    probes.start()
    serve_in_background(server)
    host, port = server.server_address[:2]
    log.info("probing %s with %d target(s); serving http://%s:%d/metrics", cfg.display_url, len(cfg.targets),
             "127.0.0.1" if host in ("0.0.0.0", "") else host, port)
    wait_for_signal()
    server.shutdown()
    probes.stop()
    return 0
