"""Probe options (shared by `ackscope probe` and `ackscope exporter --amqp-url`) and `ackscope probe`.

The AMQP password never travels on the command line, where `ps` shows it: it comes from
ACKSCOPE_AMQP_PASSWORD or ACKSCOPE_AMQP_PASSWORD_FILE, or inside ACKSCOPE_AMQP_URL (the environment).
"""

from __future__ import annotations

import argparse
import gzip
import logging
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote, urlsplit, urlunsplit

import pika
from prometheus_client import generate_latest

from ackscope import config
from ackscope.config import ConfigError, Option
from ackscope.secret import Secret

from .events import EventLog
from .metrics import ProbeMetrics
from .runner import ProbeRunner, ProbeSettings
from .targets import Target, targets_from_config

log = logging.getLogger("ackscope.probes")

DEFAULT_PORT = 9578
OPTIONS = (
    Option("amqp_url", None, str, "AMQP URL the probes connect to, e.g. amqp://ackscope-probe@host:5672/%%2F "
           "(password from ACKSCOPE_AMQP_PASSWORD[_FILE])"),
    Option("amqp_ca_file", None, config.existing_file, "CA bundle to verify the broker's AMQPS certificate"),
    Option("amqp_insecure_skip_verify", False, config.boolean, "do not verify the broker's AMQPS certificate",
           switch=True),
    Option("confirm_timeout", 30.0, config.positive_float, "seconds a publish may wait for its confirm before "
           "it counts as a confirm timeout"),
    Option("loss_deadline", 120.0, config.positive_float, "seconds a confirmed message may take to be "
           "delivered before it counts as lost"),
    Option("rate", None, config.positive_float, "steady messages per second per target [5]"),
    Option("burst_size", None, config.non_negative_int, "messages per burst per target [200]"),
    Option("burst_interval", None, config.positive_float, "seconds between bursts [60]"),
    Option("prefetch", None, config.positive_int, "the probe consumers' prefetch [20]"),
    Option("requeue_share", None, float, "share of deliveries nacked with requeue=true, once each [0.02]"),
    Option("reject_publish", False, config.boolean, "add a tiny reject-publish queue that proves nacks are "
           "seen", switch=True),
)
# Shared with the exporter, which also records its snapshot history there.
DATA_DIR = Option("data_dir", None, str, "write Parquet under DIR: probe events in DIR/events/ (and, for the "
                  "exporter, snapshot history in DIR/snapshots/)")
SECRETS = ("amqp_password",)
SHARED = ("rate", "burst_size", "burst_interval", "prefetch", "requeue_share")


@dataclass(frozen=True)
class ProbeConfig:
    amqp_url: Secret  # it may carry the password
    display_url: str  # the same without it, for logs
    ssl_options: pika.SSLOptions | None
    targets: tuple[Target, ...]
    settings: ProbeSettings
    data_dir: str | None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    config.add_arguments(parser, OPTIONS)


def load(args: argparse.Namespace, environ: Mapping[str, str], document: Mapping[str, Any],
         path: str | None, data_dir: str | None = None) -> ProbeConfig | None:
    """The probe configuration, or None when no AMQP URL is set anywhere. `data_dir` is the caller's
    --data-dir; without one, [probe] data_dir in the TOML file."""
    section = dict(config.table(document, "probe", path))
    rows = section.pop("targets", None)
    data_dir = data_dir or section.pop("data_dir", None)
    v = config.resolve(OPTIONS, args, environ, section, SECRETS, where=path or "config")
    if v["amqp_url"] is None:
        return None
    if getattr(args, "amqp_url", None) and urlsplit(args.amqp_url).password:
        raise ConfigError("--amqp-url must not carry a password (ps shows the command line): use "
                          "ACKSCOPE_AMQP_PASSWORD or ACKSCOPE_AMQP_PASSWORD_FILE")
    if v["amqp_ca_file"] and v["amqp_insecure_skip_verify"]:
        raise ConfigError("--amqp-ca-file and --amqp-insecure-skip-verify contradict each other")
    url, display = with_password(v["amqp_url"], v["amqp_password"])
    try:
        targets = targets_from_config(rows, {k: v[k] for k in SHARED}, v["reject_publish"])
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{path or 'config'}: {e}") from None
    return ProbeConfig(
        amqp_url=Secret(url), display_url=display,
        ssl_options=_ssl_options(url, v["amqp_ca_file"], v["amqp_insecure_skip_verify"]),
        targets=targets,
        settings=ProbeSettings(confirm_timeout=v["confirm_timeout"], loss_deadline=v["loss_deadline"]),
        data_dir=data_dir)


def with_password(url: str, password: Secret | None) -> tuple[str, str]:
    parts = urlsplit(url)
    if parts.scheme not in ("amqp", "amqps") or not parts.hostname:
        raise ConfigError(f"--amqp-url must look like amqp(s)://user@host:port/vhost, not {_display(parts)!r}")
    user = unquote(parts.username or "guest")
    secret = password.reveal() if password is not None else unquote(parts.password or "")
    if not secret:
        if user != "guest":
            raise ConfigError(f"no AMQP password for user {user!r}: set ACKSCOPE_AMQP_PASSWORD or "
                              "ACKSCOPE_AMQP_PASSWORD_FILE")
        secret = "guest"  # the broker's own default account, usable from loopback only
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    netloc = f"{quote(user, safe='')}:{quote(secret, safe='')}@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc)), _display(parts)


def _display(parts) -> str:
    host = parts.hostname or ""
    netloc = (f"{parts.username}@" if parts.username else "") + host + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def _ssl_options(url: str, ca_file: str | None, insecure: bool) -> pika.SSLOptions | None:
    if not url.startswith("amqps:"):
        return None
    context = ssl.create_default_context(cafile=ca_file)
    if insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        log.warning("TLS certificate verification of the AMQP broker is off (--amqp-insecure-skip-verify)")
    return pika.SSLOptions(context, urlsplit(url).hostname)


class Probes:
    """The probe runner, its metrics and its event log, as the exporter or `ackscope probe` run them."""

    def __init__(self, cfg: ProbeConfig):
        self.cfg = cfg
        self.metrics = ProbeMetrics()
        self.events = EventLog(cfg.data_dir) if cfg.data_dir else None
        try:
            self.runner = ProbeRunner(cfg.amqp_url.reveal(), cfg.targets, self.metrics, cfg.settings, self.events,
                                      cfg.ssl_options, cfg.display_url)
        except ValueError as e:  # pika's URL parser
            raise ConfigError(f"--amqp-url {cfg.display_url}: {e}") from None

    def start(self) -> None:
        self.runner.start()

    def stop(self) -> None:
        self.runner.stop()

    def metrics_text(self) -> bytes:
        return generate_latest(self.metrics.registry)

    def metrics_body(self, gzipped: bool) -> bytes:
        text = self.metrics_text()
        return gzip.compress(text, 5) if gzipped else text


def run(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """`ackscope probe`: the probes alone, with their own /metrics."""
    from ackscope.exporter.command import wait_for_signal
    from ackscope.exporter.server import Source, make_server, serve_in_background

    path = getattr(args, "config", None)
    document = config.load_toml(path)
    data_dir = config.resolve((DATA_DIR,), args, environ, {})["data_dir"]
    cfg = load(args, environ, document, path, data_dir)
    if cfg is None:
        raise ConfigError("no AMQP URL: set --amqp-url or ACKSCOPE_AMQP_URL")
    listen = config.host_port(args.listen or environ.get("ACKSCOPE_LISTEN") or f"0.0.0.0:{DEFAULT_PORT}")
    probes = Probes(cfg)
    try:
        server = make_server(*listen, Source(probes.metrics_body, lambda: True))
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
