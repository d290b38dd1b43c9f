"""Fixtures: a real RabbitMQ node of the suite's own, a vhost per test, and exporters against it."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator

import pika
import pytest

from ackscope.diagnosis.thresholds import Thresholds
from ackscope.exporter.command import Exporter, ExporterConfig
from ackscope.exporter.cardinality import Limits
from ackscope.exporter.normalise import Selection
from ackscope.exporter.server import WebSecurity
from ackscope.local_broker import ADMIN_PASSWORD, ADMIN_USER, LocalBroker
from ackscope.probes.command import ProbeConfig
from ackscope.secret import Secret
from helpers import connect, private_broker


@pytest.fixture(scope="session")
def broker() -> Iterator[LocalBroker]:
    with private_broker("ackscope-test") as node:
        yield node


@pytest.fixture
def vhost(broker: LocalBroker) -> Iterator[str]:
    """A fresh vhost per test, so tests never see each other's queues, channels or connections."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    broker.api("PUT", f"/vhosts/{name}")
    broker.api("PUT", f"/permissions/{name}/{ADMIN_USER}", json={"configure": ".*", "write": ".*", "read": ".*"})
    yield name
    broker.api("DELETE", f"/vhosts/{name}")


def exporter_config(management_url: str, *, username: str = ADMIN_USER, password: str = ADMIN_PASSWORD,
                    interval: float = 0.5, timeout: float = 2.0, deadline: float | None = None,
                    selection: Selection = Selection(), limits: Limits = Limits(),
                    web: WebSecurity = WebSecurity(), verify: bool | str = True,
                    probes: ProbeConfig | None = None, thresholds: Thresholds = Thresholds(),
                    data_dir: str | None = None) -> ExporterConfig:
    return ExporterConfig(management_url=management_url, username=username, password=Secret(password),
                          listen=("127.0.0.1", 0), interval=interval, timeout=timeout,
                          deadline=deadline or max(interval, timeout), verify=verify, selection=selection,
                          limits=limits, web=web, probes=probes, thresholds=thresholds, data_dir=data_dir)


@pytest.fixture
def start_exporter() -> Iterator[Callable[..., Exporter]]:
    """Start exporters (stopped after the test): start_exporter(management_url, **exporter_config kwargs)."""
    started: list[Exporter] = []

    def start(management_url: str, **kwargs) -> Exporter:
        exporter = Exporter(exporter_config(management_url, **kwargs))
        exporter.start()
        started.append(exporter)
        return exporter

    yield start
    for exporter in started:
        exporter.stop()


@pytest.fixture
def exporter(broker: LocalBroker, vhost: str, start_exporter) -> Exporter:
    """An exporter watching only this test's vhost."""
    return start_exporter(broker.management_url, selection=Selection(include_vhosts=_exact(vhost)))


def _exact(name: str) -> re.Pattern:
    return re.compile(re.escape(name))


@pytest.fixture
def clients() -> Iterator[Callable[..., pika.BlockingConnection]]:
    """connect(...) whose connections are closed after the test."""
    opened: list[pika.BlockingConnection] = []

    def open_(*args, **kwargs) -> pika.BlockingConnection:
        conn = connect(*args, **kwargs)
        opened.append(conn)
        return conn

    yield open_
    for conn in opened:
        if conn.is_open:
            try:
                conn.close()
            except Exception:  # the broker may have closed it already (that is what some tests do)
                pass


@pytest.fixture(scope="session")
def spark():
    """One local Spark for the suite (the pipeline command joins it when run in-process)."""
    from ackscope.pipeline.session import start
    session = start("local[2]")
    yield session
    session.stop()
