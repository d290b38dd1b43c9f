"""Running the probes in a test and reading what they say."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

from helpers import Samples, parse, value, wait_for

from ackscope.core.amqp import Endpoint
from ackscope.core.secret import Secret
from ackscope.exporter.exposition import probe_metrics
from ackscope.probes.config import ProbeConfig
from ackscope.probes.runner import ProbeSettings
from ackscope.probes.service import Probes
from ackscope.probes.targets import Target
from ackscope.workloads.private_broker import LocalBroker

# Quick targets for tests: fast steady rate, a burst every 2 s, short deadlines.
QUICK = dict(rate=20.0, burst_size=100, burst_interval=2.0)


def quick(name: str, queue_type: str = "classic", persistent: bool = True, **overrides) -> Target:
    return Target(name, queue_type, persistent, **{**QUICK, **overrides}).validate()


def probe_config(broker: LocalBroker | None, vhost: str, targets: tuple[Target, ...], *,
                 data_dir: str | None = None, loss_deadline: float = 15.0, confirm_timeout: float = 5.0,
                 url: str | None = None, urls: tuple[str, ...] = ()) -> ProbeConfig:
    """Probes on `broker`'s vhost, or on `url`, or on each of `urls` in turn (a cluster's nodes)."""
    urls = urls or (url or broker.amqp_url(vhost),)
    return ProbeConfig(entries=tuple(Endpoint(Secret(u), "amqp://" + u.split("@")[-1]) for u in urls), targets=targets,
                       settings=ProbeSettings(confirm_timeout=confirm_timeout, loss_deadline=loss_deadline),
                       data_dir=data_dir)


@contextmanager
def running_probes(cfg: ProbeConfig) -> Iterator[Probes]:
    probes = Probes(cfg)
    probes.start()
    try:
        yield probes
    finally:
        probes.stop()


def probe_samples(probes: Probes) -> Samples:
    """The probes' series as /metrics renders them."""
    return parse(probe_metrics(probes.stats()).decode())


def connection_failures(probes: Probes, role: str) -> float:
    return value(probe_samples(probes), "ackscope_probe_connection_failures_total", role=role) or 0.0


def settled_since(probes: Probes, since_monotonic: float) -> bool:
    """True once no message confirmed before `since_monotonic` (time.monotonic()) still awaits delivery in any
    target: each was delivered, or its loss deadline passed and it counts as lost."""
    age_limit = time.monotonic() - since_monotonic
    return all(v < age_limit for _, v in probe_samples(probes).get("ackscope_probe_oldest_awaiting_seconds", []))


def probe_value(probes: Probes, name: str, target: str) -> float:
    v = value(probe_samples(probes), name, target=target)
    return 0.0 if v is None else v


def wait_probe(probes: Probes, name: str, target: str, at_least: float, timeout: float = 30.0) -> float:
    """Wait until the probe sample `name` of `target` reaches `at_least`; return it."""
    return wait_for(lambda: (v := probe_value(probes, name, target)) >= at_least and v, timeout,
                    lambda: f"{name}{{target={target}}} >= {at_least} (now {probe_value(probes, name, target)})")


@contextmanager
def captured_log(name: str = "ackscope") -> Iterator[list[str]]:
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())

    handler, logger = Keep(), logging.getLogger(name)
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        yield lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
