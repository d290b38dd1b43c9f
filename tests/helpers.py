"""What tests share: reading /metrics, waiting for broker state, clients that create it."""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pika
import pytest
import requests
from client_processes import Clients
from prometheus_client.parser import text_string_to_metric_families

from ackscope.apps.exporter import OPTIONS, Exporter
from ackscope.core.processes import stop_process
from ackscope.sources import Selection
from ackscope.workloads.ports import free_port
from ackscope.workloads.private_broker import ADMIN_PASSWORD, ADMIN_USER, LocalBroker
from ackscope.workloads.rabbitmq_release import Release

# -- reading what the exporter says --------------------------------------------------------------------
Samples = dict[str, list[tuple[dict[str, str], float]]]


def scrape(exporter: Exporter, **kwargs) -> Samples:
    """Every sample of /metrics, by sample name (counters with their _total)."""
    text = requests.get(exporter.url + "/metrics", timeout=5, **kwargs).text
    return parse(text)


def parse(text: str) -> Samples:
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples.setdefault(s.name, []).append((s.labels, s.value))
    return samples


def value(samples: Samples, name: str, **labels: str) -> float | None:
    """The one sample of `name` whose labels include `labels`; None if there is none."""
    found = [v for lbls, v in samples.get(name, []) if all(lbls.get(k) == want for k, want in labels.items())]
    assert len(found) <= 1, f"{name}{labels} matches {len(found)} series"
    return found[0] if found else None


def poll_until(condition: Callable[[], object], timeout: float) -> object:
    """Poll `condition` until it returns something truthy and return that, or None after `timeout` seconds: for a
    condition the broker may or may not reach, where the test then does something else."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result or time.monotonic() > deadline:
            return result or None
        time.sleep(0.2)


def wait_for(condition: Callable[[], object], timeout: float = 20.0,
             what: str | Callable[[], str] = "condition") -> object:
    """Poll `condition` until it returns something truthy and return that; fail after `timeout` seconds,
    saying `what` (a callable is asked only then, so it can report the last state seen)."""
    result = poll_until(condition, timeout)
    if result is None:
        pytest.fail(f"timed out after {timeout}s waiting for {what() if callable(what) else what}")
    return result


def wait_for_sample(exporter: Exporter, name: str, expected: Callable[[float], bool] | float, timeout: float = 20.0,
                    **labels: str) -> Samples:
    """Scrape until the sample exists and satisfies `expected`; return the whole scrape."""
    check = expected if callable(expected) else (lambda v: v == expected)
    last: dict = {}

    def ready():
        samples = scrape(exporter)
        last["value"] = v = value(samples, name, **labels)
        return samples if v is not None and check(v) else None

    return wait_for(ready, timeout, lambda: f"{name}{labels} (last seen: {last.get('value')!r})")


# How long a test waits for an exporter's document: most run in the test's own process, whose threads (the poller,
# probes, clients) share its GIL, and under the parallel phase's load one answer took more than 5 s in CI.
DOCUMENT_TIMEOUT = 15.0


def findings_document(exporter: Exporter | str) -> dict:
    """/api/findings of an exporter (or its URL): the latest poll's findings, and the rules not evaluated."""
    url = exporter if isinstance(exporter, str) else exporter.url
    return requests.get(url + "/api/findings", timeout=DOCUMENT_TIMEOUT).json()


def findings(exporter: Exporter | str) -> list[dict]:
    """The findings of the latest poll of an exporter (or its URL)."""
    return findings_document(exporter)["findings"]


def finding_on(exporter: Exporter | str, rule: str, obj: str) -> dict | None:
    """The latest poll's finding of `rule` on `obj`, if there is one."""
    return next((f for f in findings(exporter) if f["rule"] == rule and f["object"] == obj), None)


def only_vhost(name: str) -> Selection:
    """An exporter's selection of this one vhost: a test watches its own."""
    return Selection(include_vhosts=re.compile(re.escape(name)))


def polls_seen(exporter_url: str, count: int, timeout: float = 30.0) -> list[dict]:
    """/api/findings of `count` successive polls of the exporter (one document per poll), waiting for them."""
    seen: dict[float, dict] = {}

    def enough():
        doc = requests.get(exporter_url + "/api/findings", timeout=DOCUMENT_TIMEOUT).json()
        if doc["taken_at"] is not None:
            seen.setdefault(doc["taken_at"], doc)
        return len(seen) >= count

    wait_for(enough, timeout, lambda: f"{count} polls of {exporter_url} (seen {len(seen)})")
    return [seen[t] for t in sorted(seen)]


def window_filled(exporter: Exporter, window: float) -> None:
    """Wait until the exporter has watched for a whole `window` (its rules' window_seconds), so that rates are
    over the window."""
    first = polls_seen(exporter.url, 1)[0]["taken_at"]
    wait_for(lambda: polls_seen(exporter.url, 1)[0]["taken_at"] - first >= window, timeout=window + 30,
             what="the window to fill")


# -- findings on real clients, which name no connection ---------------------------------------------------
CHANNEL = re.compile(r"channel 127\.0\.0\.1:\d+ -> 127\.0\.0\.1:\d+ \(\d+\)")


def identity(product: str) -> re.Pattern:
    """How an unnamed client of `product` is named: library and version, from where, as whom."""
    return re.compile(rf"{re.escape(product)} \S+ from 127\.0\.0\.1:\d+ as {ADMIN_USER}")


def fires(exporter: Exporter, processes: Clients, rule: str, obj: str | re.Pattern, product: str,
          timeout: float = 60.0) -> dict:
    """Wait for `rule` on `obj` (a string, or a pattern for a channel whose address is not known ahead),
    naming a client of `product`; return the finding."""
    def found():
        processes.check()
        return next((f for f in findings(exporter) if f["rule"] == rule and identity(product).search(f["identity"])
                     and (re.fullmatch(obj, f["object"]) if isinstance(obj, re.Pattern) else f["object"] == obj)),
                    None)

    f = wait_for(found, timeout, lambda: f"{rule} on {obj} naming {product} (findings: "
                 f"{sorted({(g['rule'], g['object'], g['client']) for g in findings(exporter)})})")
    # The labels keep their word: no name the client did not give, and the library in `client`.
    assert f["connection_name"] == "" and f["client"].startswith(product) and f["evidence"] and f["remedy"]
    return f


def quiet(exporter: Exporter, processes: Clients, polls: int = 8) -> list[dict]:
    """Every finding of `polls` successive polls once the window has filled; none may be a warning."""
    seen = polls_seen(exporter.url, polls, timeout=60)
    processes.check()
    loud = [(f["rule"], f["severity"], f["object"], f["client"]) for doc in seen for f in doc["findings"]
            if f["severity"] != "info"]
    assert not loud, loud
    return [f for doc in seen for f in doc["findings"]]


# -- clients that create broker state ------------------------------------------------------------------
def connect(broker: LocalBroker, vhost: str, name: str, heartbeat: int | None = None) -> pika.BlockingConnection:
    """A pika connection that tells the broker its connection_name, as well-behaved clients do."""
    params = pika.URLParameters(broker.amqp_url(vhost))
    params.client_properties = {"connection_name": name}
    if heartbeat is not None:
        params.heartbeat = heartbeat
    return pika.BlockingConnection(params)



def cli_args(**kwargs) -> argparse.Namespace:
    """An argparse namespace as `ackscope exporter` would build it, with only the given options set."""
    values = {o.key: None for o in OPTIONS}
    values.update(config=None)
    values.update(kwargs)
    return argparse.Namespace(**values)


@contextmanager
def own_vhost(node: LocalBroker, prefix: str = "v") -> Iterator[str]:
    """A fresh vhost on `node`, the admin allowed everything in it, deleted afterwards: tests never see each
    other's queues, channels or connections."""
    name = f"{prefix}-{uuid.uuid4().hex[:10]}"
    node.api("PUT", f"/vhosts/{name}")
    node.api("PUT", f"/permissions/{name}/{ADMIN_USER}", json={"configure": ".*", "write": ".*", "read": ".*"})
    try:
        yield name
    finally:
        node.api("DELETE", f"/vhosts/{name}")


# The release matrix: a release by the Debian that packages it (None: this machine's own package).
MATRIX = {"3.10": None, "4.0": "trixie", "newest": "sid"}


def matrix_release(slot: str) -> Release:
    """The release of one slot of the matrix; a root that was not built fails the tests, naming how to build it."""
    suite = MATRIX[slot]
    found = Release.host() if suite is None else Release.in_root(suite)
    if slot != "newest":
        assert found.name == slot, f"the {slot} slot of the matrix holds RabbitMQ {found.version}"
    return found


@contextmanager
def private_broker(name: str, **settings) -> Iterator[LocalBroker]:
    """A started node of the suite's own, stopped and removed afterwards."""
    node = LocalBroker(name=name, **settings)
    node.start()
    try:
        yield node
    finally:
        node.stop()
        node.remove()


@contextmanager
def memory_alarm(node: LocalBroker) -> Iterator[None]:
    """A memory alarm on `node` for the block's length. The node may be shared: it is left as found, down to its
    API, which reports the alarm gone only at its next statistics emission (until then, a test reading /api/nodes
    on this node would still see it)."""
    node.ctl("set_vm_memory_high_watermark", "0.0000001")
    try:
        yield
    finally:
        node.ctl("set_vm_memory_high_watermark", "0.4")
        wait_for(lambda: not any(n.get("mem_alarm") for n in node.api("GET", "/nodes").json()
                                 if n["name"] == node.nodename), 60, "the node's API to report its alarm cleared")


def require_binary(name: str, package: str) -> str:
    """The path of a tool the suite needs; fail (never skip) saying what to install."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: run 'apt-get install {package}' (scripts/test.sh does it as root)")
    return path


@contextmanager
def prometheus_scraping(target: str, workdir: Path, interval: str = "1s", rules: Path | None = None) -> Iterator[str]:
    """A real Prometheus (Debian's package) scraping `target` (host:port) every `interval`, evaluating
    `rules` as often; yields its URL."""
    prometheus = require_binary("prometheus", "prometheus")
    port = free_port()
    rule_files = f"rule_files: ['{rules}']\n" if rules else ""
    (workdir / "prometheus.yml").write_text(
        f"global: {{scrape_interval: {interval}, evaluation_interval: {interval}}}\n{rule_files}"
        f"scrape_configs:\n- job_name: ackscope\n  static_configs:\n  - targets: ['{target}']\n")
    proc = subprocess.Popen([prometheus, f"--config.file={workdir}/prometheus.yml",
                             f"--storage.tsdb.path={workdir}/data", f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_process(proc, timeout=30)


def prometheus_query(url: str, q: str) -> list:
    """An instant query's result, or [] while Prometheus is not ready."""
    try:
        return requests.get(f"{url}/api/v1/query", params={"query": q}, timeout=5).json()["data"]["result"]
    except (requests.RequestException, ValueError, KeyError):
        return []


@contextmanager
def scenarios_running(broker: LocalBroker, vhost: str, *names: str) -> Iterator:
    """`ackscope scenario`'s failure modes on `vhost` while the block runs; none may have failed."""
    from ackscope.core.secret import Secret
    from ackscope.workloads.scenarios import BY_NAME, Running
    scenarios = Running([BY_NAME[n] for n in names], Secret(broker.amqp_url(vhost))).start()
    try:
        yield scenarios
    finally:
        scenarios.stop()
    assert not scenarios.errors, scenarios.errors


# The scenarios of failures reported from the field: each is proven alone (tests/test_diagnosis.py) and on real
# clients on every release (tests/test_field_cases.py). The tests that run every scenario at once leave them out:
# beside the others, a get storm's hundred round trips a second load a node that is judged on what the rest do.
FIELD_SCENARIOS = frozenset({"channel-per-job", "get-empty-storm", "temporary-queue-holding", "queue-deleted-holding",
                             "auto-ack-consumer-gone"})


def from_the_log(scenario) -> bool:
    """Whether what the scenario does is told only by the broker's log: its rule needs --broker-log, or names the
    client only from it (connection-churn: from polls alone, the broker's churn counters name none). An exporter
    judges it only while following the node's log."""
    from ackscope.diagnosis.rules import RULES
    from ackscope.model.events import EVENTS
    return scenario.rule == "connection-churn" or any(r.id == scenario.rule and EVENTS in r.needs for r in RULES)


@contextmanager
def suspended_queue(broker, vhost: str, queue: str):
    """Suspend a classic queue's process, so publishes into it wait for their confirms."""
    lookup = (f'{{ok, Q}} = rabbit_amqqueue:lookup(rabbit_misc:r(<<"{vhost}">>, queue, <<"{queue}">>)), '
              "P = amqqueue:get_pid(Q), ")
    wait_for(lambda: requests.get(f"{broker.management_url}/api/queues/{vhost}/{queue}",
                                  auth=(ADMIN_USER, ADMIN_PASSWORD), timeout=5).status_code == 200,
             what=f"queue {queue}")
    broker.ctl("eval", lookup + "sys:suspend(P).")
    try:
        yield
    finally:
        broker.ctl("eval", lookup + "sys:resume(P).")


def markdown_table(app, first_column: str) -> list[dict[str, str]]:
    """The rows of the Markdown table on a Streamlit AppTest page whose first column is `first_column`, unescaped."""
    for md in app.markdown:
        lines = md.value.splitlines()
        if lines and lines[0].startswith(f"| {first_column} |"):
            def cells(line: str) -> list[str]:
                return [re.sub(r"\\(.)", r"\1", c) for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            head = [c.strip() for c in cells(lines[0])]
            return [dict(zip(head, (c.strip() for c in cells(line)))) for line in lines[2:]]
    raise AssertionError(f"no Markdown table starting with {first_column!r}")
