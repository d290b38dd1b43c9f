"""When the probes' frames meet the socket: the clock their latencies run on.

pika buffers every frame it is given and writes it on a later turn of its I/O loop, and it reads a socket
before it dispatches what it read. A timer started at basic_publish and stopped in the ack callback measures
the probe's own queueing besides the broker (issue 14 measured +0.5 ms in steady traffic, +30 ms in
bursts). So the probes' connections count the bytes they hand their transport, watch their socket hand
bytes to the kernel and take them from it, and a frame's time is when the socket moved its last byte.
"""

from __future__ import annotations

import socket
import ssl
import struct
import time
from collections import deque
from collections.abc import Callable

import pika

SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux; Python names it from 3.12 on (35 before)
_TIMESPEC = struct.Struct("@qq")  # struct timespec: seconds, nanoseconds (realtime clock)
_STAMP_SPACE = socket.CMSG_SPACE(_TIMESPEC.size)


class WireClock:
    """Byte offsets of one connection and when they met its socket. Pure: the socket side calls `sent` and
    `read` with the time; the protocol side calls `emitted` and `when_sent`."""

    def __init__(self) -> None:
        self._emitted = 0  # bytes handed to the transport, in order
        self._sent = 0  # of those, bytes the kernel took
        self._waiting: deque[tuple[int, Callable[[int], None]]] = deque()  # (end offset, callback), ascending
        self.read_ns = 0  # when the bytes of the latest read arrived: the frames dispatched now arrived then

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
    socket's own.

    A read is timed by when its bytes arrived, not when the loop came round to read them: on a plain TCP
    socket the kernel stamps what it receives (SO_TIMESTAMPNS). The kernel merges segments that wait in
    the socket together and keeps the newest stamp, so a merged read is timed by its last arrival: never
    later than the read itself, which is the time taken where there is no stamp (TLS)."""

    def __init__(self, sock, clock: WireClock):
        self._sock, self._clock = sock, clock
        self._stamped = isinstance(sock, socket.socket) and not isinstance(sock, ssl.SSLSocket)
        if self._stamped:
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)

    def send(self, data) -> int:
        at = time.monotonic_ns()  # handed to the kernel now; on loopback the frame is on the wire within the call
        n = self._sock.send(data)
        self._clock.sent(n, at)
        return n

    def recv(self, size: int) -> bytes:
        if not self._stamped:
            data = self._sock.recv(size)
            self._clock.read(time.monotonic_ns())  # before pika parses a byte of it
            return data
        data, ancillary, _flags, _address = self._sock.recvmsg(size, _STAMP_SPACE)
        now, wall = time.monotonic_ns(), time.time_ns()
        arrived = now
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(payload) >= _TIMESPEC.size:
                seconds, nanoseconds = _TIMESPEC.unpack_from(payload)
                arrived = min(now, now - (wall - (seconds * 1_000_000_000 + nanoseconds)))
        self._clock.read(arrived)
        return data

    def __getattr__(self, name: str):
        return getattr(self._sock, name)


class TimedConnection(pika.SelectConnection):
    """A SelectConnection whose `wire` says when its frames left and when what it dispatches arrived.

    It reaches into pika 1.4 where it has no public hook: the connection's one exit for frames
    (`_adapter_emit_data`), the moment it gets its transport (`_proto_connection_made`), the transport's
    socket and write buffer (`_sock`, `_tx_buffers`, `_tx_buffered_byte_count`) and its read handler
    (`_on_socket_readable`). The capture test (tests/test_probe_wire.py) fails if any of them moves.
    """

    def __init__(self, *args, **kwargs):
        self.wire = WireClock()
        super().__init__(*args, **kwargs)

    def read_now(self) -> None:
        """Read and dispatch whatever the socket holds, without waiting for the loop to come round (another
        connection's dispatch may be long); nothing when it holds nothing."""
        if self._transport is not None:
            self._transport._on_socket_readable()

    def _adapter_emit_data(self, data: bytes) -> None:
        self.wire.emitted(len(data))
        pending = getattr(self._transport, "_tx_buffers", None)
        # Frames already wait for the socket: go with them. A loop turn's frames (a publish's method, header
        # and body; a burst slice) leave in one write and one segment: single-frame segments were held by
        # the kernel up to 3 ms behind its congestion window in a burst, and each write costs a syscall.
        if pending:
            pending[-1] += data
            self._transport._tx_buffered_byte_count += len(data)
        else:
            super()._adapter_emit_data(data)

    def _proto_connection_made(self, transport) -> None:
        transport._sock = _TimedSocket(transport._sock, self.wire)
        super()._proto_connection_made(transport)
