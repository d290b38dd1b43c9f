"""The HTTP reader both sources share, against a local socket server that misbehaves on purpose (no broker)."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ackscope.core.secret import Secret
from ackscope.model.source import FetchError
from ackscope.sources.http import HttpReader, _loads_by_item

OK = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n[]"


@contextmanager
def server(answer: Callable[[int, socket.socket], None]) -> Iterator[tuple[str, list[int]]]:
    """An HTTP server on a free port; `answer(n, conn)` handles the n-th connection (from 1)."""
    listener = socket.create_server(("127.0.0.1", 0))
    connections: list[int] = []

    def serve():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            connections.append(len(connections) + 1)
            threading.Thread(target=answer, args=(connections[-1], conn), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", connections
    finally:
        listener.close()


def reader(url: str, timeout: float = 1.0) -> HttpReader:
    return HttpReader(url, "guest", Secret("guest"), timeout=timeout, verify=True, what="test server")


def test_a_request_on_a_connection_the_server_closed_is_sent_once_more():
    def answer(n: int, conn: socket.socket) -> None:
        conn.recv(65536)
        if n > 1:
            conn.sendall(OK)
        conn.close()  # the first connection closes without a word, as a server closing an idle keep-alive

    with server(answer) as (url, connections):
        assert reader(url).json("queues", "/api/queues", {}, time.monotonic() + 5) == []
        assert len(connections) == 2


def test_a_server_that_keeps_closing_is_one_connection_error_not_a_retry_storm():
    def answer(n: int, conn: socket.socket) -> None:
        conn.recv(65536)
        conn.close()

    with server(answer) as (url, connections):
        with pytest.raises(FetchError) as raised:
            reader(url).json("queues", "/api/queues", {}, time.monotonic() + 5)
        assert raised.value.reason == "connection" and len(connections) == 2


@pytest.mark.thorough  # waits out a slow answer: seconds
def test_a_whole_list_may_take_until_the_deadline_where_one_request_may_not():
    def answer(n: int, conn: socket.socket) -> None:
        conn.recv(65536)
        time.sleep(1.5)  # a broker listing 50,000 queues before its first byte
        conn.sendall(OK)
        conn.close()

    with server(answer) as (url, _):
        with pytest.raises(FetchError) as raised:
            reader(url, timeout=0.5).json("queues", "/api/queues", {}, time.monotonic() + 5)
        assert raised.value.reason == "timeout"
        assert reader(url, timeout=0.5).json("queues", "/api/queues", {}, time.monotonic() + 5, patient=True) == []
        with pytest.raises(FetchError) as raised:
            reader(url, timeout=0.5).json("queues", "/api/queues", {}, time.monotonic() + 1, patient=True)
        assert raised.value.reason in ("timeout", "deadline")


def answering(body: bytes) -> Callable[[int, socket.socket], None]:
    def answer(n: int, conn: socket.socket) -> None:
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
                     + body)
        conn.close()
    return answer


def test_a_large_list_is_decoded_item_by_item_to_the_same_objects():
    queues = [{"name": f"q-{i}", "vhost": "/", "messages_ready": i, "arguments": {"x-queue-type": "quorum"}}
              for i in range(20_000)]  # about 1.4 MB: above the size decoded item by item
    body = json.dumps(queues, indent=1).encode()
    with server(answering(body)) as (url, _):
        assert reader(url).json("queues", "/api/queues", {}, time.monotonic() + 5) == queues


@pytest.mark.parametrize("tail", [b",]", b"] x", b"", b" {", b",,"])
def test_a_large_list_cut_short_or_garbled_is_a_malformed_answer(tail):
    body = json.dumps([{"name": "q" * 100}] * 20_000).encode()[:-1] + tail
    with server(answering(body)) as (url, _):
        with pytest.raises(FetchError) as raised:
            reader(url).json("queues", "/api/queues", {}, time.monotonic() + 5)
        assert raised.value.reason == "malformed"


@pytest.mark.thorough  # 300 cases
@settings(max_examples=300, deadline=None)
@given(st.lists(st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
                             lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner), max_leaves=8)),
       st.sampled_from(["", " ", "\n", " \r\n\t"]))
def test_decoding_by_item_reads_what_json_loads_reads(items, blank):
    text = blank + json.dumps(items, indent=1 if blank else None) + blank
    assert _loads_by_item(text) == json.loads(text)
