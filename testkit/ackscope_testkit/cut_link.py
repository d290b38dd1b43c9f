"""A network that stops carrying anything between nodes on this host: nftables drops every packet to or from
their Erlang distribution ports on the loopback, in a table of its own, deleted afterwards. Both sides keep
running and each counts the other down after net_ticktime: a partition as a broken network makes it. (Pausing
one node instead leaves only the paused one's peer counting it down, and Mnesia then records a partition at some
reunions only.)"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def cut(*ports: int) -> Iterator[None]:
    """No packet to or from `ports` (TCP, this host's loopback included) while the block runs."""
    if shutil.which("nft") is None:
        raise RuntimeError("cutting a link needs nft: apt-get install nftables (scripts/setup.sh --test does)")
    table = f"ackscope_cut_{os.getpid()}"
    listed = ", ".join(str(p) for p in ports)
    rules = (f"table inet {table} {{\n chain out {{\n  type filter hook output priority 0; policy accept;\n"
             f"  tcp dport {{ {listed} }} drop\n  tcp sport {{ {listed} }} drop\n }}\n}}\n")
    subprocess.run(["nft", "-f", "-"], input=rules, text=True, check=True, capture_output=True)
    try:
        yield
    finally:
        subprocess.run(["nft", "delete", "table", "inet", table], capture_output=True)


# -- a partition between sides of a cluster ------------------------------------------------------------------------
# Every node listens on 127.0.0.1, so an address cannot tell one side from the other; the process can. Each node's VM
# is moved into a cgroup (v2) of its own, and nftables drops what a node sends to the distribution port of a node on
# another side. The connection either side opened then carries nothing one way: both count the other down after
# net_ticktime, and neither can connect again, while every other port (AMQP, HTTP, the plugins) still answers.
_PREFIX = "ackscope-split-"


def cgroup2() -> tuple[Path, str]:
    """The cgroup v2 hierarchy's directory, and its path as nftables names it (relative to /sys/fs/cgroup)."""
    for path, name in ((Path("/sys/fs/cgroup/unified"), "unified"), (Path("/sys/fs/cgroup"), "")):
        if (path / "cgroup.procs").exists():
            return path, name
    raise RuntimeError("splitting a cluster needs the cgroup v2 hierarchy (/sys/fs/cgroup or /sys/fs/cgroup/unified)")


def _release(group: Path, root: Path) -> None:
    """Move every process of `group` back to the root cgroup and remove it."""
    for pid in (group / "cgroup.procs").read_text().split():
        try:
            (root / "cgroup.procs").write_text(pid)
        except OSError:
            pass  # it has exited meanwhile
    group.rmdir()


def _owner_alive(pid: str) -> bool:
    return pid.isdigit() and Path(f"/proc/{pid}").exists()


def clean_leftovers() -> None:
    """Remove what a killed test left: its tables and cgroups, named after its process, which no longer runs."""
    listed = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True).stdout.split()
    for table in listed:
        for prefix in ("ackscope_cut_", "ackscope_split_"):
            if table.startswith(prefix) and not _owner_alive(table[len(prefix):]):
                subprocess.run(["nft", "delete", "table", "inet", table], capture_output=True)
    root, _ = cgroup2()
    for group in root.glob(_PREFIX + "*"):
        if not _owner_alive(group.name[len(_PREFIX):].split("-")[0]):
            _release(group, root)


def _established_between(sides: Sequence[Sequence[tuple[int, int]]]) -> list[str]:
    """Rules silencing the connections already open between nodes of different sides: a socket keeps the cgroup
    of the process that opened it, so moving a VM does not move the connections it has (each by its two ports)."""
    side_of = {pid: i for i, side in enumerate(sides) for pid, _ in side}
    listed = subprocess.run(["ss", "-tnpH", "state", "established"], capture_output=True, text=True).stdout
    owner: dict[int, int] = {}  # local port: its VM's pid
    for line in listed.splitlines():
        found = re.search(r"127\.0\.0\.1:(\d+)\s+127\.0\.0\.1:(\d+).*pid=(\d+)", line)
        if found and int(found[3]) in side_of:
            owner[int(found[1])] = int(found[3])
    rules = []
    for line in listed.splitlines():
        found = re.search(r"127\.0\.0\.1:(\d+)\s+127\.0\.0\.1:(\d+).*pid=(\d+)", line)
        if not found:
            continue
        local, peer, pid = int(found[1]), int(found[2]), int(found[3])
        if pid in side_of and owner.get(peer) in side_of and side_of[owner[peer]] != side_of[pid]:
            rules.append(f"  tcp sport {local} tcp dport {peer} drop")
    return rules


@contextmanager
def split(*sides: Sequence[tuple[int, int]]) -> Iterator[None]:
    """While the block runs, no node of one side reaches a node of another. Each side: its nodes' (VM pid,
    distribution port)."""
    if shutil.which("nft") is None:
        raise RuntimeError("splitting a cluster needs nft: apt-get install nftables (scripts/setup.sh --test does)")
    clean_leftovers()
    root, name = cgroup2()
    table, groups, rules = f"ackscope_split_{os.getpid()}", [], []
    try:
        for i, side in enumerate(sides):
            for pid, _ in side:
                group = root / f"{_PREFIX}{os.getpid()}-{pid}"
                group.mkdir()
                groups.append(group)
                (group / "cgroup.procs").write_text(str(pid))
                others = ", ".join(str(port) for j, other in enumerate(sides) if j != i for _, port in other)
                # Level 1: a child of the hierarchy's root; the path only finds it, relative to /sys/fs/cgroup.
                rules.append(f'  socket cgroupv2 level 1 "{Path(name) / group.name if name else group.name}" '
                             f'tcp dport {{ {others} }} drop')
        rules += _established_between(sides)
        ruleset = (f"table inet {table} {{\n chain out {{\n  type filter hook output priority 0; policy accept;\n"
                   + "\n".join(rules) + "\n }\n}\n")
        subprocess.run(["nft", "-f", "-"], input=ruleset, text=True, check=True, capture_output=True)
        yield
    finally:
        subprocess.run(["nft", "delete", "table", "inet", table], capture_output=True)
        for group in groups:
            _release(group, root)
