"""Fixtures: a real RabbitMQ node of the suite's own, a vhost per test, exporters against it, Spark, and the
tools (promtool, Prometheus, chromium). Each test is marked by the services its fixtures start, so that
`pytest -m unit` runs every service-free test: the fast loop."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pika
import pytest
from helpers import connect, only_vhost, own_vhost, private_broker, prometheus_scraping, require_binary

from ackscope.apps.exporter import Exporter, ExporterConfig
from ackscope.core.http_server import WebSecurity
from ackscope.core.secret import Secret
from ackscope.diagnosis.thresholds import Thresholds
from ackscope.exporter.cardinality import Limits
from ackscope.probes.config import ProbeConfig
from ackscope.sources import Selection
from ackscope.workloads.private_broker import ADMIN_PASSWORD, ADMIN_USER, LocalBroker
from ackscope.workloads.rabbitmq_release import Release
from ackscope_testkit.cluster import LocalCluster

# Every JVM the suite's Spark starts (the session's, each `ackscope pipeline` process, a standalone cluster's
# executors) takes its settings from tests/spark-conf: JVM options for short runs on a shared CPU.
os.environ.setdefault("SPARK_CONF_DIR", os.path.join(os.path.dirname(__file__), "spark-conf"))


@pytest.fixture(scope="session")
def broker() -> Iterator[LocalBroker]:
    with private_broker("ackscope-test") as node:
        yield node


@pytest.fixture(scope="session")
def statsoff_broker() -> Iterator[LocalBroker]:
    """A node configured as the official container image runs it: management statistics off."""
    with private_broker("ackscope-statsoff", statistics=False) as node:
        yield node


@pytest.fixture(scope="session")
def spare_broker() -> Iterator[LocalBroker]:
    """A node of its own that tests may stop, start or put in alarm without disturbing the others: an alarm on the
    session's broker is a critical finding for every test reading it meanwhile."""
    with private_broker("ackscope-spare") as node:
        yield node


@pytest.fixture(scope="session")
def plugin_only_broker() -> Iterator[LocalBroker]:
    """A node with the Prometheus plugin and no management plugin at all: only port 15692 answers HTTP."""
    with private_broker("ackscope-pluginonly", plugins=("rabbitmq_prometheus",)) as node:
        yield node


@contextmanager
def running_cluster(nodes: LocalCluster) -> Iterator[LocalCluster]:
    """`nodes` started and joined; stopped and their files removed afterwards, whatever happened."""
    try:
        nodes.start()
        yield nodes
    finally:
        nodes.stop()
        nodes.remove()


@pytest.fixture(scope="session")
def cluster() -> Iterator[LocalCluster]:
    """Three private nodes joined into one cluster (about 150 MiB each), started once for the session."""
    with running_cluster(LocalCluster(3, name="ackscope-cluster")) as nodes:
        yield nodes


@pytest.fixture
def ram_node_cluster() -> Iterator[LocalCluster]:
    """Two nodes, the second a ram node (a 3.x node type 4.3 removed), of their own: ram nodes are rare."""
    with running_cluster(LocalCluster(2, name="ackscope-ramnode", ram=1)) as nodes:
        yield nodes


@pytest.fixture
def cluster_whole(cluster: LocalCluster) -> Iterator[LocalCluster]:
    """The session's cluster, every node started again after the test if it left one killed."""
    yield cluster
    cluster.restart_dead()


@pytest.fixture
def partition_pair() -> Iterator[LocalCluster]:
    """Two nodes of their own that count a silent peer down after 10 s (net_ticktime): for a partition, which
    leaves them to be restarted, so not the session's cluster."""
    with running_cluster(LocalCluster(2, name="ackscope-partition", net_ticktime=10)) as pair:
        yield pair


@pytest.fixture(scope="module")
def newest_cluster() -> Iterator[LocalCluster]:
    """Three nodes of the newest RabbitMQ 4.x of the release matrix (Debian unstable's, in its root)."""
    with running_cluster(LocalCluster(3, name="ackscope-cluster4", release=Release.in_root("sid"))) as nodes:
        yield nodes


@pytest.fixture
def newest_partition_pair() -> Iterator[LocalCluster]:
    """Two nodes of the newest RabbitMQ 4.x that count a silent peer down after 10 s (net_ticktime)."""
    with running_cluster(LocalCluster(2, name="ackscope-partition4", net_ticktime=10,
                                      release=Release.in_root("sid"))) as pair:
        yield pair


@pytest.fixture(scope="session")
def statsoff_cluster() -> Iterator[LocalCluster]:
    """Three nodes joined into one cluster, management statistics off (the container image's default)."""
    with running_cluster(LocalCluster(3, name="ackscope-statsoff-cluster", statistics=False)) as nodes:
        yield nodes


@pytest.fixture(scope="module")
def newest_statsoff_cluster() -> Iterator[LocalCluster]:
    """Three nodes of the newest RabbitMQ 4.x, management statistics off."""
    with running_cluster(LocalCluster(3, name="ackscope-statsoff4", statistics=False,
                                      release=Release.in_root("sid"))) as nodes:
        yield nodes


@pytest.fixture
def vhost(broker: LocalBroker) -> Iterator[str]:
    """A fresh vhost per test, so tests never see each other's queues, channels or connections."""
    with own_vhost(broker, "t") as name:
        yield name


def exporter_config(management_url: str, *, username: str = ADMIN_USER, password: str = ADMIN_PASSWORD,
                    interval: float = 0.5, timeout: float = 2.0, deadline: float | None = None,
                    selection: Selection = Selection(), limits: Limits = Limits(),
                    web: WebSecurity = WebSecurity(), verify: bool | str = True,
                    probes: ProbeConfig | None = None, thresholds: Thresholds = Thresholds(),
                    data_dir: str | None = None, source: str = "auto",
                    prometheus_url: str | tuple[str, ...] | None = None, cli: list[str] | None = None,
                    broker_log: str | None = None, event_exchange: bool = False,
                    trace_deadline: float = 60.0, traces_dir: str | None = None) -> ExporterConfig:
    """The exporter's configuration for a test; `prometheus_url` one URL, or a node's each."""
    return ExporterConfig(management_url=management_url, username=username, password=Secret(password),
                          listen=("127.0.0.1", 0), interval=interval, timeout=timeout,
                          deadline=deadline or max(interval, timeout), verify=verify, selection=selection,
                          limits=limits, web=web, probes=probes, thresholds=thresholds, data_dir=data_dir,
                          source=source, cli=cli, broker_log=broker_log, event_exchange=event_exchange,
                          trace_deadline=trace_deadline, traces_dir=traces_dir,
                          prometheus_url=(prometheus_url,) if isinstance(prometheus_url, str) else prometheus_url)


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
    return start_exporter(broker.management_url, selection=only_vhost(vhost))


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


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory):
    """A standalone Spark cluster from the project's PySpark: a master and two workers of one core and 1 GiB,
    started once for the session (the tests that end a worker start it again)."""
    from ackscope_testkit.spark_cluster import StandaloneCluster
    require_binary("java", "openjdk-17-jre-headless")
    with StandaloneCluster(tmp_path_factory.mktemp("spark-cluster"), workers=2) as cluster:
        yield cluster


# -- tools, as fixtures so that the tests needing them are marked ---------------------------------------------
@pytest.fixture(scope="session")
def promtool() -> str:
    return require_binary("promtool", "prometheus")


@pytest.fixture(scope="session")
def prometheus():
    """prometheus(target, workdir, interval="1s", rules=None): a real Prometheus scraping `target`."""
    require_binary("prometheus", "prometheus")
    return prometheus_scraping


@pytest.fixture(scope="session")
def chromium() -> str:
    return require_binary("chromium", "chromium")


@pytest.fixture(scope="session")
def java() -> str:
    """Spark's runtime, for tests that run `ackscope pipeline` in a process of its own."""
    return require_binary("java", "openjdk-17-jre-headless")


@pytest.fixture(scope="session")
def ackscope_image() -> str:
    """ackscope's image, built once per session by scripts/container-image.sh (its Debian base is kept)."""
    from container_helpers import build
    return build()


@pytest.fixture(scope="session")
def rabbitmq_image() -> str:
    """RabbitMQ 4.0 as an image: the release matrix's Debian 13 root, imported."""
    from container_helpers import build
    return build("--rabbitmq")


@pytest.fixture(scope="session")
def rabbitmq_server() -> str:
    """Debian's rabbitmq-server, for tests whose command starts its own node (the demo)."""
    return require_binary("/usr/lib/rabbitmq/bin/rabbitmq-server", "rabbitmq-server")


# -- tiers ----------------------------------------------------------------------------------------------
SERVICE_OF_FIXTURE = {
    "broker": "broker", "spare_broker": "broker", "large_broker": "broker",
    "rabbitmq_server": "broker", "cluster": "broker", "statsoff_cluster": "broker",
    "cluster_whole": "broker", "partition_pair": "broker", "ram_node_cluster": "broker", "newest_cluster": "broker",
    "newest_partition_pair": "broker", "newest_statsoff_cluster": "broker", "split_cluster": "broker",
    "statsoff_broker": "broker", "plugin_only_broker": "broker", "logging_broker": "broker",
    "release": "broker", "release_broker": "broker", "pair": "broker", "release_statsoff": "broker", "release_plugin_only": "broker",
    "spark": "spark", "java": "spark", "spark_cluster": "spark",
    "chromium": "browser",
    "ackscope_image": "container", "rabbitmq_image": "container",
    "promtool": "prometheus", "prometheus": "prometheus",
}


# -- parallel workers ------------------------------------------------------------------------------------
# scripts/test.sh runs the suite on pytest-xdist workers (--dist loadgroup --no-loadscope-reorder), then the tests
# marked `alone` on none. A test goes to any free worker, unless it belongs to a group, which one worker runs
# whole and in order: the things that must not overlap with one another (clusters starve each other's net ticks;
# podman builds share a store; the Spark cluster's workers are fixed ports of their own; Spark's lanes), or the
# tests of a module that share what it starts once (a module-scoped fixture), split by release where the module
# runs the matrix.
EXCLUSIVE_GROUP_OF_FIXTURE = {
    "cluster": "clusters", "cluster_whole": "clusters", "statsoff_cluster": "clusters",
    "partition_pair": "clusters", "newest_cluster": "clusters", "newest_partition_pair": "clusters",
    "newest_statsoff_cluster": "clusters", "split_cluster": "clusters",
    "ackscope_image": "containers", "rabbitmq_image": "containers",
    "spark_cluster": "spark-cluster",
}
# A local Spark is a JVM of 1 GiB that keeps both cores busy while it works: one on every worker starved the rest
# (a Spark test took 5 minutes instead of 2, and clusters beside them missed their net ticks). Spark's tests run in
# two lanes, about even in time; a module not named here goes to the second.
# A test named here goes to its lane whatever its module's: in CI, issue 43's incremental tests alone took lane 1 to
# 13.2 minutes, lane 2 to 5.7 (the killed runs are JVMs of their own).
SPARK_LANES = {"tests/test_pipeline_incremental.py": "spark lane 1", "tests/test_pipeline_live.py": "spark lane 2",
               "tests/test_pipeline_command.py": "spark lane 2", "tests/test_pipeline_transforms.py": "spark lane 2",
               "tests/test_pipeline_cluster.py": "spark lane 2",
               "tests/test_pipeline_incremental.py::test_a_run_killed_mid_way_neither_loses_nor_double_counts":
                   "spark lane 2"}
# What takes longest goes first, so that no long group starts last and alone: the exclusive groups, then what
# runs Spark, then the release matrix's groups, then the rest, each in the order collected.
# Each worker picks ports in a range of its own, below the kernel's ephemeral ones (32768 and up): two
# workers never pick one port, and no client's connection holds one (workloads/ports.py).
PORTS_PER_WORKER = 1500
if (_worker := os.environ.get("PYTEST_XDIST_WORKER", "")).startswith("gw"):
    _first = 20000 + PORTS_PER_WORKER * int(_worker[2:])
    os.environ["ACKSCOPE_PORT_RANGE"] = f"{_first}-{_first + PORTS_PER_WORKER}"


def _group(item) -> str | None:
    fixtures = getattr(item, "fixturenames", ())
    exclusive = sorted({EXCLUSIVE_GROUP_OF_FIXTURE[f] for f in fixtures if f in EXCLUSIVE_GROUP_OF_FIXTURE})
    if exclusive:
        return exclusive[0]
    module, test = item.nodeid.split("::")[0], item.nodeid.split("[")[0]
    if module in SPARK_LANES or "spark" in fixtures:
        return SPARK_LANES.get(test) or SPARK_LANES.get(module, "spark lane 2")
    params = getattr(getattr(item, "callspec", None), "params", {})
    definitions = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    shared = "release" in params or any(defs[-1].scope == "module" for defs in definitions.values())
    if not shared:
        return None
    # No "]" in a group's name: xdist takes a test id whose "@" comes before its last "]" for one without a group.
    return f"{module} on {params['release']}" if "release" in params else module


def _weight(item, group: str | None) -> int:
    """0 first: an exclusive group; then Spark and the release matrix; then the rest."""
    if group in EXCLUSIVE_GROUP_OF_FIXTURE.values():
        return 0
    params = getattr(getattr(item, "callspec", None), "params", {})
    spark = any(SERVICE_OF_FIXTURE.get(f) == "spark" for f in getattr(item, "fixturenames", ()))
    return 1 if spark or "release" in params else 2


@pytest.hookimpl(tryfirst=True)  # before xdist's, which reads the groups into the test ids
def pytest_collection_modifyitems(items):
    groups = {}
    for item in items:
        services = {SERVICE_OF_FIXTURE[f] for f in getattr(item, "fixturenames", ()) if f in SERVICE_OF_FIXTURE}
        # A thorough test is a tier of its own: service-free, but too slow for the loop run after every edit.
        for service in sorted(services) or ([] if item.get_closest_marker("thorough") else ["unit"]):
            item.add_marker(service)
        groups[item] = _group(item)
        if groups[item] is not None:
            item.add_marker(pytest.mark.xdist_group(groups[item]))
    # A group's weight is its heaviest test's; the sort is stable, so a group's tests keep their order.
    weight_of_group: dict[str, int] = {}
    for item, group in groups.items():
        if group is not None:
            weight_of_group[group] = min(weight_of_group.get(group, 2), _weight(item, group))
    items.sort(key=lambda item: weight_of_group.get(groups[item], _weight(item, groups[item])))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """A test marked unit that starts a node fails, naming the fixture it should ask for instead: in its fixtures'
    setup too (a module-scoped fixture is set up before any function-scoped one could refuse it)."""
    if item.get_closest_marker("unit") is None:
        yield
        return

    def refuse(*_args, **_kwargs):
        pytest.fail("a service-free (unit) test started a RabbitMQ node: ask for the broker fixture, or name its "
                    "fixture in SERVICE_OF_FIXTURE")
    start, LocalBroker.start = LocalBroker.start, refuse
    try:
        yield
    finally:
        LocalBroker.start = start
