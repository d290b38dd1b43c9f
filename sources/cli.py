"""Enrichment from the broker's CLI (`--cli rabbitmqctl …`), where the exporter runs beside the node with
its Erlang cookie (a sidecar, the same host): with management statistics off, `rabbitmqctl list_channels`
and `list_connections` still know each channel's connection, user and transactional flag, and each
connection's client name, heartbeat and state. Run once per poll, bounded by the poll's deadline; when the
CLI hangs or is refused, the poll goes on without it and the trouble is said once."""

from __future__ import annotations

import json
import logging
import re
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from . import client_properties

log = logging.getLogger("ackscope.sources")

_PID = re.compile(r"[.<](\d+)\.(\d+)>$")
CHANNEL_ITEMS = ("pid", "name", "connection", "user", "transactional", "confirm")
CONNECTION_ITEMS = ("pid", "name", "user", "client_properties", "timeout", "state")


def pid_key(pid: str) -> str | None:
    """A process id as the plugin ('<0.797.0>') and the CLI ('#PID<10986.797.0>') both write it, less the
    node part they write differently: '797.0'."""
    m = _PID.search(str(pid))
    return f"{m.group(1)}.{m.group(2)}" if m else None


@dataclass(frozen=True)
class ConnectionInfo:
    name: str
    user: str
    connection_name: str  # the name the broker took (client_properties.given_name), or ""
    client: str | None  # product and version
    heartbeat_seconds: int | None
    state: str | None


@dataclass(frozen=True)
class ChannelInfo:
    name: str
    user: str
    connection: ConnectionInfo | None
    transactional: bool | None
    confirm: bool | None


@dataclass(frozen=True)
class Enrichment:
    channels: dict[str, ChannelInfo]  # by pid_key
    connections: dict[str, ConnectionInfo]  # by the connection's name


def _typed(raw) -> list:
    """client_properties as the CLI's JSON writes them: [[key, type, value], ...] (3.10 and 4.3 alike)."""
    return [p for p in raw if isinstance(p, list) and len(p) == 3] if isinstance(raw, list) else []


def parse(channels_json: str, connections_json: str) -> Enrichment:
    """Pure: the two listings, joined (ValueError when they are not the CLI's JSON)."""
    conns, by_pid = {}, {}
    for c in json.loads(connections_json or "[]"):
        typed = _typed(c.get("client_properties"))
        props = {p[0]: p[2] for p in typed}
        info = ConnectionInfo(str(c.get("name", "")), str(c.get("user", "")),
                              client_properties.given_name(typed), client_properties.client(props),
                              c.get("timeout") if isinstance(c.get("timeout"), int) else None,
                              c.get("state") if isinstance(c.get("state"), str) else None)
        conns[info.name] = info
        by_pid[pid_key(c.get("pid", ""))] = info
    chans = {}
    for ch in json.loads(channels_json or "[]"):
        key = pid_key(ch.get("pid", ""))
        if key is None:
            continue
        flag = lambda v: v if isinstance(v, bool) else None  # noqa: E731
        chans[key] = ChannelInfo(str(ch.get("name", "")), str(ch.get("user", "")),
                                 by_pid.get(pid_key(ch.get("connection", ""))), flag(ch.get("transactional")),
                                 flag(ch.get("confirm")))
    return Enrichment(chans, conns)


def run(command: list[str], args: tuple[str, ...], timeout: float) -> str:
    """The CLI's quiet output for `args`; RuntimeError (one line: the CLI's own message) when it fails or hangs."""
    try:
        done = subprocess.run([*command, "-q", *args], capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"no answer within {timeout:.1f}s") from None
    if done.returncode != 0:
        raise RuntimeError((done.stderr or done.stdout).strip() or f"exit status {done.returncode}")
    return done.stdout


class CliEnricher:
    def __init__(self, command: list[str], timeout: float = 10.0):
        self.command = command
        self.timeout = timeout
        self._failing: str | None = None
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="ackscope-cli")

    def read(self, deadline: float) -> Enrichment | None:
        """Both listings, or None (said once while it lasts) when the CLI fails or outlasts the deadline."""
        wait = max(0.0, min(self.timeout, deadline - time.monotonic()))
        runs = [self._pool.submit(run, self.command, ("list_channels", *CHANNEL_ITEMS, "--formatter", "json"), wait),
                self._pool.submit(run, self.command, ("list_connections", *CONNECTION_ITEMS, "--formatter", "json"),
                                  wait)]
        try:
            channels, connections = (r.result() for r in runs)
            enrichment = parse(channels, connections)
        except (OSError, subprocess.SubprocessError, ValueError, RuntimeError) as e:
            message = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
            if message != self._failing:
                log.warning("CLI enrichment (%s) dropped: %s", self.command[0], message)
                self._failing = message
            return None
        if self._failing is not None:
            log.info("CLI enrichment (%s) works again", self.command[0])
            self._failing = None
        return enrichment

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
