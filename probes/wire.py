"""When the probes' frames meet the socket: the clock their latencies run on.

pika buffers every frame it is given and writes it on a later turn of its I/O loop, and it reads a socket
before it dispatches what it read. A timer started at basic_publish and stopped in the ack callback measures
the probe's own queueing besides the broker (issue 14 measured +0.5 ms in steady traffic, +30 ms in
bursts). So the probes' connections count the bytes they hand their transport, watch their socket hand
bytes to the kernel and take them from it, and a frame's time is when the socket moved its last byte.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

import pika


class WireClock:
    """Byte offsets of one connection and when they met its socket. Pure: the socket side calls `sent` and
    `read` with the time; the protocol side calls `emitted` and `when_sent`."""

    def __init__(self) -> None:
        self._emitted = 0  # bytes handed to the transport, in order
        self._sent = 0  # of those, bytes the kernel took
        self._waiting: deque[tuple[int, Callable[[int], None]]] = deque()  # (end offset, callback), ascending
        self.read_ns = 0  # when the latest read returned: frames dispatched now arrived then

    def emitted(self, n: int) -> None:
        self._emitted += n

    def when_sent(self, callback: Callable[[int], None]) -> None:
        """Call `callback(ns)` once every byte emitted so far has been handed to the kernel."""
        self._waiting.append((self._emitted, callback))

    def sent(self, n: int, at_ns: int) -> None:
        self._sent += n
        while self._waiting and self._waiting[0][0] <= self._sent:
            self._waiting.popleft()[1](at_ns)

    def read(self, at_ns: int) -> None:
        self.read_ns = at_ns


class _TimedSocket:
    """The transport's socket, seen through: every send and recv tells the clock. Everything else is the
    socket's own."""

    def __init__(self, sock, clock: WireClock):
        self._sock, self._clock = sock, clock

    def send(self, data) -> int:
        at = time.monotonic_ns()  # handed to the kernel now; on loopback the frame is on the wire within the call
        n = self._sock.send(data)
        self._clock.sent(n, at)
        return n

    def recv(self, size: int) -> bytes:
        data = self._sock.recv(size)
        self._clock.read(time.monotonic_ns())  # before pika parses a byte of it
        return data

    def __getattr__(self, name: str):
        return getattr(self._sock, name)


class TimedConnection(pika.SelectConnection):
    """A SelectConnection whose `wire` says when its frames left and when what it dispatches arrived.

    It reaches into pika in two places that pika 1.3 keeps stable: the transport's socket (`_sock`) and
    the connection's single exit for marshaled frames (`_adapter_emit_data`). The probe's capture test
    (tests/test_probe_wire.py) fails if either moves.
    """

    def __init__(self, *args, **kwargs):
        self.wire = WireClock()
        super().__init__(*args, **kwargs)

    def _adapter_emit_data(self, data: bytes) -> None:
        self.wire.emitted(len(data))
        super()._adapter_emit_data(data)

    def _proto_connection_made(self, transport) -> None:
        transport._sock = _TimedSocket(transport._sock, self.wire)
        super()._proto_connection_made(transport)
