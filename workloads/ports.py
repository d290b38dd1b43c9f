"""Free TCP ports on the loopback, for the private nodes and what runs beside them."""

from __future__ import annotations

import os
import random
import socket
import threading
from dataclasses import dataclass

# ACKSCOPE_PORT_RANGE=LO-HI: where free_port looks. Processes given disjoint ranges below the kernel's ephemeral
# ones (the suite's parallel workers) can never pick the same port, nor one a client's connection is using.
# Read at each call, not at import: whoever sets it (the suite's conftest) may have imported this module first.
_lock = threading.Lock()
_next: list[int] = []


class NoFreePort(RuntimeError):
    """Every port of ACKSCOPE_PORT_RANGE is taken."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now: the kernel's choice, or the next free one of
    ACKSCOPE_PORT_RANGE, never the same twice from one process while the range lasts."""
    span = os.environ.get("ACKSCOPE_PORT_RANGE")
    if not span:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]
    lo, hi = (int(end) for end in span.split("-"))
    with _lock:
        # A random start: a worker's child process then starts elsewhere in the range than its parent.
        if not _next or not lo <= _next[0] < hi:
            _next[:] = [random.randrange(lo, hi)]
        for _ in range(hi - lo):
            port = _next[0]
            _next[0] = lo if port + 1 >= hi else port + 1
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
    raise NoFreePort(f"no free port left in ACKSCOPE_PORT_RANGE={span}")


@dataclass(frozen=True)
class Ports:
    """A node's listeners."""

    amqp: int
    dist: int
    management: int
    prometheus: int
    stream: int  # the stream protocol's, where the node enables rabbitmq_stream
    mqtt: int  # where it enables rabbitmq_mqtt
    stomp: int  # where it enables rabbitmq_stomp

    @classmethod
    def free(cls) -> Ports:
        return cls(*(free_port() for _ in range(7)))
