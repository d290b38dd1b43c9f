"""A test host in a network namespace of our own, joined to this machine by a veth pair, whose link to chosen
ports can be made to lose packets (the soak's network fault).

Only what this creates is touched: the namespace, the pair and their two addresses, all removed by close().
The loss is nftables' `numgen random` in the namespace, on the given ports only, both ways: this kernel has no
netem (CONFIG_NET_SCH_NETEM is not set), and dropping is what a lossy path does; the latency a user feels
follows from it, as TCP retransmits (after a few milliseconds for a tail-loss probe, 200 ms or more after a
timeout). Each rule counts what it drops, so a run can show the loss was real (dropped()).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

TABLE = "ackscope_loss"


class LossyLinkError(RuntimeError):
    pass


class LossyLink:
    def __init__(self) -> None:
        missing = [tool for tool in ("ip", "nft") if shutil.which(tool) is None]
        if missing or os.geteuid() != 0:
            raise LossyLinkError("a lossy link needs root and " + " and ".join(("ip", "nft")) +
                                 (f" (missing: {', '.join(missing)})" if missing else " (not root)"))
        pid = os.getpid()
        self.namespace = f"ackscope-{pid}"
        self._host_if, self._inner_if = f"acks{pid}h", f"acks{pid}n"
        net = f"10.{200 + pid % 50}.{pid // 50 % 250}"
        self.host_address, self.inner_address = f"{net}.1", f"{net}.2"
        self._made: list[list[str]] = []
        try:
            self._ip("netns", "add", self.namespace)
            self._made.append(["ip", "netns", "del", self.namespace])
            self._ip("link", "add", self._host_if, "type", "veth", "peer", "name", self._inner_if)
            self._made.append(["ip", "link", "del", self._host_if])
            self._ip("link", "set", self._inner_if, "netns", self.namespace)
            self._ip("addr", "add", f"{self.host_address}/30", "dev", self._host_if)
            self._ip("link", "set", self._host_if, "up")
            self._inside("ip", "addr", "add", f"{self.inner_address}/30", "dev", self._inner_if)
            self._inside("ip", "link", "set", self._inner_if, "up")
            self._inside("ip", "link", "set", "lo", "up")
        except LossyLinkError:
            self.close()
            raise

    def command(self, argv: list[str]) -> list[str]:
        """argv, run inside the namespace (ip netns exec replaces itself with it: the pid is the program's)."""
        return ["ip", "netns", "exec", self.namespace, *argv]

    def lose(self, percent: int, ports: tuple[int, ...]) -> None:
        """Drop `percent` % of the packets from and to `ports` on the host's side, until clear()."""
        if not 0 < percent <= 100:
            raise ValueError(f"percent must be in 1..100, not {percent}")
        ports_set = ", ".join(str(p) for p in ports)
        rules = (f"table inet {TABLE} {{\n"
                 f"  chain inbound {{ type filter hook input priority 0; policy accept;\n"
                 f"    tcp sport {{ {ports_set} }} numgen random mod 100 < {percent} counter drop\n  }}\n"
                 f"  chain outbound {{ type filter hook output priority 0; policy accept;\n"
                 f"    tcp dport {{ {ports_set} }} numgen random mod 100 < {percent} counter drop\n  }}\n}}\n")
        self.clear()
        self._run(self.command(["nft", "-f", "-"]), stdin=rules)

    def dropped(self) -> int:
        """The packets the loss has dropped, both ways, since lose() (0 when there is none)."""
        if TABLE not in self._run(self.command(["nft", "list", "tables"])):
            return 0
        listed = self._run(self.command(["nft", "list", "table", "inet", TABLE]))
        return sum(int(n) for n in re.findall(r"counter packets (\d+)", listed))

    def clear(self) -> None:
        listed = self._run(self.command(["nft", "list", "tables"]))
        if TABLE in listed:
            self._run(self.command(["nft", "delete", "table", "inet", TABLE]))

    def close(self) -> None:
        for argv in reversed(self._made):
            subprocess.run(argv, capture_output=True, check=False)
        self._made.clear()

    def _ip(self, *args: str) -> None:
        self._run(["ip", *args])

    def _inside(self, *args: str) -> None:
        self._run(self.command(list(args)))

    @staticmethod
    def _run(argv: list[str], stdin: str | None = None) -> str:
        done = subprocess.run(argv, input=stdin, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise LossyLinkError(f"{' '.join(argv[:6])}: {done.stderr.strip() or done.returncode}")
        return done.stdout
