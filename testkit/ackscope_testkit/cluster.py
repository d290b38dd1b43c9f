"""Private nodes joined into one cluster, for the suite's cluster tests and bench/cluster_confirms.py."""

from __future__ import annotations

import secrets
import time

import requests

from ackscope.workloads.private_broker import LocalBroker
from ackscope.workloads.rabbitmq_release import LocalBrokerError, Release


class LocalCluster:
    """Private nodes joined into one cluster (`rabbitmqctl join_cluster`): the first is where the others join,
    each with its own ports and data directory, all with one Erlang cookie."""

    def __init__(self, size: int = 3, name: str = "ackscope-cluster", stats_interval_ms: int = 500,
                 statistics: bool = True, net_ticktime: int | None = None, release: Release | None = None,
                 ram: int = 0):
        """`ram`: the last this many nodes join as ram nodes (a 3.x node type, which 4.3 removed)."""
        self.ram = ram
        cookie = secrets.token_hex(16).upper()
        self.nodes = [LocalBroker(name=f"{name}{i + 1}", stats_interval_ms=stats_interval_ms,
                                  statistics=statistics, cookie=cookie, net_ticktime=net_ticktime, release=release)
                      for i in range(size)]

    def start(self, timeout: float = 180.0) -> None:
        """Start every node; the second and later join the first, as disc nodes but the last `ram`."""
        first, *rest = self.nodes
        first.start(timeout)
        for i, node in enumerate(rest):
            node.start(timeout)
            node.ctl("stop_app")
            node.ctl("join_cluster", *(("--ram",) if i >= len(rest) - self.ram else ()), first.nodename)
            node.ctl("start_app")
        self.wait_running(len(self.nodes), timeout)

    def wait_running(self, count: int, timeout: float = 120.0) -> None:
        """Until a running node's management API lists `count` running members."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for node in self.nodes:
                try:
                    listed = node.api("GET", "/nodes", params={"columns": "name,running"}).json()
                except requests.RequestException:
                    continue
                if sum(1 for n in listed if n.get("running")) == count:
                    return
            time.sleep(0.5)
        raise LocalBrokerError(f"the cluster did not list {count} running nodes within {timeout:.0f}s")

    def restart_dead(self) -> None:
        """Start again every node whose VM is gone (killed by a test that then failed), and wait for all."""
        dead = [n for n in self.nodes if not n.alive()]
        for node in dead:
            node.start()
        if dead:
            self.wait_running(len(self.nodes))

    def stop(self) -> None:
        for node in reversed(self.nodes):
            node.stop()

    def remove(self) -> None:
        for node in self.nodes:
            node.remove()
