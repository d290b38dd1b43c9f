"""The probes' options, shared by `ackscope probe`, `ackscope exporter --amqp-url` and `ackscope diagnose
--amqp-url`: from the command line, the environment and the TOML table [probe] (targets as
[[probe.targets]])."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ackscope.core import amqp, config
from ackscope.core.config import ConfigError, Option

from .runner import ProbeSettings
from .targets import Target, targets_from_config

OPTIONS = (
    Option("amqp_url", None, str, "AMQP URL the probes connect to, e.g. amqp://ackscope-probe@host:5672/%%2F "
           "(password from ACKSCOPE_AMQP_PASSWORD[_FILE]); in a cluster, one per node, comma-separated: the "
           "probes use the first that answers and move to the next when theirs is lost"),
    Option("amqp_username", None, str, "the probes' AMQP user, instead of the URL's (a Secret's username, so that "
           "changing the Secret changes both)"),
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
DATA_DIR = Option("data_dir", None, config.writable_dir, "write Parquet under DIR: probe events in DIR/events/ (and, for the "
                  "exporter, snapshot history in DIR/snapshots/)")
SECRETS = ("amqp_password",)
SHARED = ("rate", "burst_size", "burst_interval", "prefetch", "requeue_share")


@dataclass(frozen=True)
class ProbeConfig:
    entries: tuple[amqp.Endpoint, ...]  # the nodes the probes may connect to, in the order they try them
    targets: tuple[Target, ...]
    settings: ProbeSettings
    data_dir: str | None

    @property
    def display_url(self) -> str:
        return ", ".join(e.display for e in self.entries)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    config.add_arguments(parser, OPTIONS)


def load(args: argparse.Namespace, environ: Mapping[str, str], document: Mapping[str, Any],
         path: str | None, data_dir: str | None = None) -> ProbeConfig | None:
    """The probe configuration, or None when no AMQP URL is set anywhere. `data_dir` is the caller's
    --data-dir; without one, [probe] data_dir in the TOML file."""
    section = dict(config.table(document, "probe", path))
    rows = section.pop("targets", None)
    in_file = section.pop("data_dir", None)
    if data_dir is None and in_file is not None:
        try:
            data_dir = config.writable_dir(in_file)
        except ValueError as e:
            raise ConfigError(f"{path or 'config'}: [probe] data_dir: {e}") from None
    v = config.resolve(OPTIONS, args, environ, section, SECRETS, where=path or "config")
    if v["amqp_url"] is None:
        return None
    for flag in (getattr(args, "amqp_url", None) or "").split(","):
        amqp.refuse_password_on_command_line(flag.strip())
    if v["amqp_ca_file"] and v["amqp_insecure_skip_verify"]:
        raise ConfigError("--amqp-ca-file and --amqp-insecure-skip-verify contradict each other")
    urls = [amqp.with_password(u.strip(), v["amqp_password"], v["amqp_username"])
            for u in v["amqp_url"].split(",") if u.strip()]
    if not urls:
        raise ConfigError(f"amqp_url: no URL in {v['amqp_url']!r}")
    try:
        targets = targets_from_config(rows, {k: v[k] for k in SHARED}, v["reject_publish"])
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{path or 'config'}: {e}") from None
    return ProbeConfig(
        entries=tuple(amqp.Endpoint(u.url, u.display, amqp.ssl_options(u.url.reveal(), v["amqp_ca_file"],
                                                               v["amqp_insecure_skip_verify"])) for u in urls),
        targets=targets,
        settings=ProbeSettings(confirm_timeout=v["confirm_timeout"], loss_deadline=v["loss_deadline"]),
        data_dir=data_dir)
