"""A TCP relay on the exporter's path to the broker that can hold every chunk for a set delay, each way (the
soak's latency fault).

This kernel has no netem (CONFIG_NET_SCH_NETEM is not set), so latency is added as Toxiproxy adds it: clients
connect to the relay, which connects on to the broker and passes the bytes on, each chunk `delay` seconds after
it arrived. Order is kept and nothing is dropped; a chunk is not held up by the one before it beyond that
chunk's own due time, so a burst is delayed, not slowed down. With no delay it only passes bytes on.
"""

from __future__ import annotations

import queue
import socket
import threading
import time

CHUNK = 65536


class LatencyRelay:
    def __init__(self, upstream: tuple[str, int], host: str = "127.0.0.1"):
        """Listen on `host` (a free port) and relay each connection to `upstream`."""
        self.upstream = upstream
        self.delay = 0.0  # seconds each way; set it at any time, it applies to the chunks that arrive after
        self._listener = socket.create_server((host, 0))
        self.host, self.port = host, self._listener.getsockname()[1]
        self._sockets: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closing = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closing.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=5)
                server.settimeout(None)
            except OSError:  # the broker is down: the client sees its connection refused, as it would directly
                client.close()
                continue
            for s in (client, server):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._sockets |= {client, server}
            pair = _Pair()
            self._pipe(client, server, pair)
            self._pipe(server, client, pair)

    def _pipe(self, source: socket.socket, sink: socket.socket, pair: _Pair) -> None:
        due: queue.SimpleQueue[tuple[float, bytes]] = queue.SimpleQueue()

        def read() -> None:
            while True:
                try:
                    data = source.recv(CHUNK)
                except OSError:
                    data = b""
                due.put((time.monotonic() + self.delay, data))
                if not data:
                    return

        def write() -> None:
            while True:
                at, data = due.get()
                wait = at - time.monotonic()
                if wait > 0 and self._closing.wait(wait):
                    return
                try:
                    if data:
                        sink.sendall(data)
                        continue
                    # The source closed: close this way too, so the other end sees it; the way that ends last
                    # closes both sockets.
                    sink.shutdown(socket.SHUT_WR)
                    if not pair.ended():
                        return
                except OSError:  # one end is gone: so is the other (its reader ends on the closed socket)
                    pass
                self._forget(source, sink)
                return

        threading.Thread(target=read, daemon=True).start()
        threading.Thread(target=write, daemon=True).start()

    @property
    def open_sockets(self) -> int:
        """The sockets of the connections it relays now, two a connection."""
        with self._lock:
            return len(self._sockets)

    def _forget(self, *sockets: socket.socket) -> None:
        with self._lock:
            for s in sockets:
                self._sockets.discard(s)
                s.close()

    def close(self) -> None:
        self._closing.set()
        self._listener.close()
        with self._lock:
            relayed = list(self._sockets)
        self._forget(*relayed)


class _Pair:
    """The two ways of one relayed connection: which of them ends last."""

    def __init__(self) -> None:
        self._open = 2
        self._lock = threading.Lock()

    def ended(self) -> bool:
        """One way has ended; True when it was the last."""
        with self._lock:
            self._open -= 1
            return self._open == 0
