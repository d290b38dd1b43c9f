"""A network that stops carrying anything between nodes on this host: nftables drops every packet to or from
their Erlang distribution ports on the loopback, in a table of its own, deleted afterwards. Both sides keep
running and each counts the other down after net_ticktime: a partition as a broken network makes it. (Pausing
one node instead leaves only the paused one's peer counting it down, and Mnesia then records a partition at some
reunions only.)"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager


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
