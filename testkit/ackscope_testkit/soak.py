"""The soak: `ackscope exporter` with its probes and a data dir, as an operator runs it (its own process), over a
private node running failure scenarios and a healthy client, while faults come one after another: the broker
killed with kill -9, restarted gracefully, a memory alarm, a disk alarm, the management API hanging, then
answering HTML, then truncated JSON (a proxy in front of it), packet loss on the exporter's path to the broker
(the exporter runs on a test host in a network namespace, lossy_link.py), and latency on that path (a
relay that holds what passes, latency_relay.py).

Sampled every second from outside, as Prometheus and an operator see it: /metrics (how long it takes,
ackscope_up, the probes' counters and confirm latency), /api/findings, the exporter's RSS and open files, and its
log. Per fault: when ackscope_up went to 0 and came back after the broker answered again, the log lines it cost,
the findings that fired and whether they cleared by the next fault, and the probes' confirm timeouts,
republishes, duplicates and losses across it.

Run by bench/soak.py (30 minutes) and, for 5 minutes, by the suite (tests/test_soak.py).
"""

from __future__ import annotations

import itertools
import logging
import os
import secrets
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import requests
from prometheus_client.parser import text_string_to_metric_families

from ackscope.core.processes import stop_process
from ackscope.core.quantile import sample_quantile
from ackscope.core.secret import Secret
from ackscope.workloads.ports import free_port
from ackscope.workloads.private_broker import LocalBroker
from ackscope.workloads.scenarios import BY_NAME, Running

from .fault_proxy import FaultProxy
from .latency_relay import LatencyRelay
from .lossy_link import LossyLink

log = logging.getLogger("ackscope.soak")

SCENARIOS = ("prefetch-saturated", "requeue-loop", "publisher-without-confirms", "unroutable-dropped", "healthy")
PROBE_COUNTERS = ("confirm_timeouts", "republished", "duplicates", "lost")


@dataclass
class Sample:
    at: float  # seconds since the soak started
    up: float | None  # ackscope_up, None when the scrape failed
    scrape_ms: float | None
    rss_mib: float
    fds: int
    probes: dict[str, float]  # PROBE_COUNTERS summed over the targets
    confirm: tuple[float, float]  # the probes' confirm latency histogram: (sum of seconds, count), all targets
    findings: frozenset[str]  # the rules with a finding now


@dataclass
class Fault:
    name: str
    started: float
    cleared: float | None = None  # the broker answers again, or the fault was lifted
    down_at: float | None = None  # ackscope_up first seen 0
    up_at: float | None = None  # ackscope_up 1 again, after `cleared`
    log_lines: list[str] = field(default_factory=list)
    findings: set[str] = field(default_factory=set)  # the rules that fired during the fault's window
    findings_left: set[str] = field(default_factory=set)  # of those, the ones still firing at the window's end
    probes: dict[str, float] = field(default_factory=dict)  # counter increases across the fault
    confirm_ms: float | None = None  # the probes' mean confirm latency while the fault was on
    packets_dropped: int | None = None  # what the lossy link dropped (the network fault only)

    @property
    def recovery_s(self) -> float | None:
        """From the broker answering again (the fault lifted) to ackscope_up 1."""
        if self.cleared is None or self.up_at is None:
            return None
        return max(0.0, self.up_at - self.cleared)


class Soak:
    def __init__(self, minutes: float, interval: float = 3.0, fault_every: float = 120.0, hold: float = 20.0,
                 workdir: Path | None = None, loss_percent: int = 20, latency_ms: int = 50,
                 calm: float | None = None):
        """`calm`: the seconds before the first fault, the baseline faults are compared with (`fault_every` by
        default). `loss_percent`: the packets lost both ways on the exporter's path to the broker in the packet-loss
        fault (0: no test host, the exporter on this host, no packet-loss fault). `latency_ms`: the delay added
        each way on that path in the latency fault (0: no latency fault)."""
        self.minutes, self.interval, self.fault_every, self.hold = minutes, interval, fault_every, hold
        self.calm = fault_every if calm is None else calm
        self.loss_percent, self.latency_ms = loss_percent, latency_ms
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="ackscope-soak-"))
        self.samples: list[Sample] = []
        self.faults: list[Fault] = []
        self.log_lines: list[tuple[float, str]] = []
        self._t0 = time.monotonic()
        self._stop = threading.Event()

    def now(self) -> float:
        return time.monotonic() - self._t0

    # -- the run -----------------------------------------------------------------------------------------------
    def run(self) -> Soak:
        link = LossyLink() if self.loss_percent else None
        # The exporter's host: a test host whose link to the broker can lose packets, or this one.
        broker_side, exporter_side = (link.host_address, link.inner_address) if link else ("127.0.0.1",) * 2
        broker = LocalBroker(name="ackscope-soak")
        broker.start()
        # The users README.md's production setup makes: a monitoring-tagged user for the API, and a probe user
        # whose permissions match only the probes' resources (the guest user could not log in from a test host).
        monitor, probe, password = "ackscope-monitor", "ackscope-probe", secrets.token_urlsafe(16)
        for user, tags in ((monitor, "monitoring"), (probe, "")):
            broker.api("PUT", f"/users/{user}", json={"password": password, "tags": tags})
        only_probes = r"^ackscope\.probe\."
        broker.api("PUT", f"/permissions/%2F/{probe}", json={"configure": only_probes, "write": only_probes,
                                                             "read": only_probes})
        # Both of the exporter's paths to the broker pass through this host's side of the link: the management
        # API through the fault proxy, AMQP through the latency relay.
        proxy = FaultProxy(broker.management_url, host=broker_side)
        relay = LatencyRelay(("127.0.0.1", broker.ports.amqp), host=broker_side)
        port = free_port()
        self.url = f"http://{exporter_side}:{port}"
        env = dict(os.environ, ACKSCOPE_PASSWORD=password, ACKSCOPE_AMQP_PASSWORD=password)
        argv = [sys.executable, "-m", "ackscope", "exporter", "--management-url", proxy.url, "--username",
                monitor, "--amqp-url", f"amqp://{probe}@{broker_side}:{relay.port}/%2F",
                "--listen", f"{exporter_side}:{port}", "--interval", str(self.interval),
                "--data-dir", str(self.workdir / "data")]
        exporter = subprocess.Popen(link.command(argv) if link else argv, env=env, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, text=True)
        threading.Thread(target=self._read_log, args=(exporter,), daemon=True).start()
        scenarios = Running([BY_NAME[n] for n in SCENARIOS], Secret(broker.amqp_url())).start()
        self._t0 = time.monotonic()
        sampler = threading.Thread(target=self._sample, args=(psutil.Process(exporter.pid),), daemon=True)
        sampler.start()
        faults = itertools.cycle(self._faults(broker, proxy, relay, link))
        try:
            end = self.minutes * 60
            next_fault = min(self.calm, end)
            while self.now() < end:
                time.sleep(max(0.0, min(next_fault, end) - self.now()))
                if self.now() >= end:
                    break
                name, apply = next(faults)
                fault = Fault(name, self.now())
                self.faults.append(fault)
                log.info("soak %.0f s: %s", fault.started, name)
                restarted = apply(fault)
                fault.cleared = self.now()
                if restarted:  # the scenarios' connections died with the broker: run them again
                    scenarios.stop()
                    scenarios = Running([BY_NAME[n] for n in SCENARIOS], Secret(broker.amqp_url())).start()
                next_fault = fault.started + self.fault_every
        finally:
            self._stop.set()
            sampler.join(timeout=5)
            scenarios.stop()
            stop_process(exporter, timeout=30)
            proxy.close()
            relay.close()
            broker.stop()
            broker.remove()
            if link:
                link.close()
        self._attribute()
        return self

    def _faults(self, broker: LocalBroker, proxy: FaultProxy, relay: LatencyRelay,
                link: LossyLink | None) -> list[tuple[str, Callable[[Fault], bool]]]:
        """(name, apply): apply(fault) does the fault and lifts it, returning whether the broker restarted."""
        def kill9(_: Fault) -> bool:
            broker.kill()
            broker.start()
            return True

        def restart(_: Fault) -> bool:
            broker.restart()
            return True

        def alarm(ctl: tuple[str, str], clear: tuple[str, str]) -> Callable[[Fault], bool]:
            def apply(_: Fault) -> bool:
                broker.ctl(*ctl)
                time.sleep(self.hold)
                broker.ctl(*clear)
                return False
            return apply

        def api(_: Fault) -> bool:
            for fault, seconds in (("hang", self.hold), ("html", self.hold / 2), ("truncated", self.hold / 2)):
                proxy.faults["*"] = fault
                time.sleep(seconds)
            proxy.faults.clear()
            return False

        def loss(fault: Fault) -> bool:
            assert link is not None
            link.lose(self.loss_percent, (relay.port, proxy.port))
            time.sleep(self.hold)
            fault.packets_dropped = link.dropped()
            link.clear()
            return False

        def latency(_: Fault) -> bool:
            # Each way on AMQP; on HTTP, a request's round trip held before it is passed on.
            relay.delay = self.latency_ms / 1000
            proxy.faults["*"] = f"slow:{2 * relay.delay}"
            time.sleep(self.hold)
            proxy.faults.clear()
            relay.delay = 0.0
            return False

        lossy = [(f"network: {self.loss_percent} % packet loss", loss)] if link else []
        slow = [(f"network: {self.latency_ms} ms latency each way", latency)] if self.latency_ms else []
        return [("broker kill -9 and restart", kill9),
                ("memory alarm", alarm(("set_vm_memory_high_watermark", "0.0000001"),
                                       ("set_vm_memory_high_watermark", "0.4"))),
                ("management API: hang, HTML, truncated JSON", api),
                *lossy,
                ("broker graceful restart", restart),
                *slow,
                ("disk alarm", alarm(("set_disk_free_limit", "100000GB"), ("set_disk_free_limit", "50MB")))]

    # -- watching ----------------------------------------------------------------------------------------------
    def _read_log(self, exporter: subprocess.Popen) -> None:
        assert exporter.stderr is not None
        for line in exporter.stderr:
            self.log_lines.append((self.now(), line.rstrip("\n")))

    def _sample(self, process: psutil.Process) -> None:
        while not self._stop.wait(max(0.0, 1.0 - (self.now() % 1.0))):
            up = scrape_ms = None
            probes: dict[str, float] = {}
            confirm = [0.0, 0.0]
            findings: frozenset[str] = frozenset()
            try:
                started = time.monotonic()
                text = requests.get(self.url + "/metrics", timeout=5).text
                scrape_ms = (time.monotonic() - started) * 1000
                for family in text_string_to_metric_families(text):
                    for s in family.samples:
                        if s.name == "ackscope_up":
                            up = s.value
                        elif s.name.startswith("ackscope_probe_") and s.name.endswith("_total"):
                            key = s.name.removeprefix("ackscope_probe_").removesuffix("_total")
                            if key in PROBE_COUNTERS:
                                probes[key] = probes.get(key, 0.0) + s.value
                        elif s.name == "ackscope_probe_confirm_latency_seconds_sum":
                            confirm[0] += s.value
                        elif s.name == "ackscope_probe_confirm_latency_seconds_count":
                            confirm[1] += s.value
                findings = frozenset(f["rule"] for f in
                                     requests.get(self.url + "/api/findings", timeout=5).json()["findings"])
            except (requests.RequestException, ValueError, KeyError):
                pass
            try:
                memory, fds = process.memory_info().rss / 2**20, process.num_fds()
            except psutil.Error:
                return
            self.samples.append(Sample(self.now(), up, scrape_ms, memory, fds, probes, (confirm[0], confirm[1]),
                                       findings))

    def _attribute(self) -> None:
        """Each fault's window (from its start to the next fault's) read from the samples and the log."""
        for fault, following in zip(self.faults, [*self.faults[1:], None]):
            until = following.started if following else float("inf")
            window = [s for s in self.samples if fault.started <= s.at < until]
            fault.down_at = next((s.at for s in window if s.up == 0), None)
            after = fault.cleared if fault.cleared is not None else fault.started
            fault.up_at = next((s.at for s in window if s.at >= after and s.up == 1), None)
            before = next((s for s in reversed(self.samples) if s.at < fault.started and s.probes), None)
            for s in window:  # what the fault raised: not what the scenarios keep raising anyway
                fault.findings |= s.findings - (before.findings if before else frozenset())
            read = next((s for s in reversed(window) if s.up is not None), None)
            fault.findings_left = fault.findings & read.findings if read else set(fault.findings)
            last = next((s for s in reversed(window) if s.probes), None)
            if before and last:
                fault.probes = {k: last.probes.get(k, 0.0) - before.probes.get(k, 0.0) for k in PROBE_COUNTERS}
                # While the fault was on, not across its whole window: the calm after it would dilute the figure.
                lifted = next((s for s in window if s.at >= after and s.confirm[1] > 0), last)
                fault.confirm_ms = mean_ms(before.confirm, lifted.confirm)
            fault.log_lines = [line for at, line in self.log_lines if fault.started <= at < until]

    # -- figures -----------------------------------------------------------------------------------------------
    def scrape_p99_ms(self) -> float | None:
        return sample_quantile([s.scrape_ms for s in self.samples if s.scrape_ms is not None], 0.99)

    def growth(self, after_s: float = 300.0) -> tuple[float, float, int, int]:
        """(RSS MiB at `after_s`, RSS MiB at the end, fds at `after_s`, fds at the end)."""
        settled = [s for s in self.samples if s.at >= min(after_s, self.samples[-1].at)]
        return settled[0].rss_mib, self.samples[-1].rss_mib, settled[0].fds, self.samples[-1].fds

    def baseline_confirm_ms(self) -> float | None:
        """The probes' mean confirm latency before the first fault: what a fault's is compared with."""
        first = self.faults[0].started if self.faults else float("inf")
        calm = [s for s in self.samples if s.at < first and s.confirm[1] > 0]
        return mean_ms(calm[0].confirm, calm[-1].confirm) if len(calm) > 1 else None

    def lost(self) -> float:
        return max((s.probes.get("lost", 0.0) for s in self.samples), default=0.0)

    def rows(self) -> Iterator[dict]:
        for f in self.faults:
            yield {"fault": f.name, "at_s": round(f.started), "down_after_s": None if f.down_at is None else
                   round(f.down_at - f.started, 1), "recovered_s": None if f.recovery_s is None else
                   round(f.recovery_s, 1), "log_lines": len(f.log_lines),
                   "confirm_ms": None if f.confirm_ms is None else round(f.confirm_ms, 1),
                   "packets_dropped": f.packets_dropped, "findings": ", ".join(sorted(f.findings)),
                   "not_cleared": ", ".join(sorted(f.findings_left)),
                   **{k: int(v) for k, v in f.probes.items()}}


def mean_ms(before: tuple[float, float], after: tuple[float, float]) -> float | None:
    """The mean of a histogram's observations between two readings of its (sum, count), in milliseconds; None
    when none was observed (or the counters restarted)."""
    count = after[1] - before[1]
    return (after[0] - before[0]) / count * 1000 if count > 0 else None
