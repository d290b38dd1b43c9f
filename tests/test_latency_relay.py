"""The soak's latency relay (workloads/latency_relay.py), against an echo server on this machine: what passes
is held for the delay each way, arrives whole and in order, and a close on either end reaches the other."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from ackscope_testkit.latency_relay import LatencyRelay


@pytest.fixture
def echo():
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=pump, args=(conn,), daemon=True).start()

    def pump(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()
    server.close()


@pytest.fixture
def relay(echo):
    relay = LatencyRelay(echo)
    yield relay
    relay.close()


def round_trip(conn: socket.socket, data: bytes) -> tuple[bytes, float]:
    started = time.monotonic()
    conn.sendall(data)
    got = b""
    while len(got) < len(data):
        got += conn.recv(65536)
    return got, time.monotonic() - started


def test_a_round_trip_through_the_relay_takes_the_delay_each_way_and_arrives_whole(relay):
    with socket.create_connection((relay.host, relay.port)) as conn:
        assert round_trip(conn, b"ping")[0] == b"ping"
        relay.delay = 0.05
        data = bytes(range(256)) * 1000  # several chunks: kept in order
        got, took = round_trip(conn, data)
        assert got == data
        assert took >= 0.1, took


def test_the_delay_applies_to_what_arrives_after_it_is_lifted_as_before_it_was_set(relay):
    with socket.create_connection((relay.host, relay.port)) as conn:
        relay.delay = 0.2
        assert round_trip(conn, b"slow")[1] >= 0.4
        relay.delay = 0.0
        assert round_trip(conn, b"fast")[1] < 0.4


def test_a_close_by_the_client_reaches_the_server_and_the_relay_lets_both_go(relay, echo):
    conn = socket.create_connection((relay.host, relay.port))
    assert round_trip(conn, b"x")[0] == b"x"
    conn.shutdown(socket.SHUT_WR)
    assert conn.recv(10) == b""  # the echo server saw the end, closed, and that came back through the relay
    conn.close()
    deadline = time.monotonic() + 5
    while relay.open_sockets and time.monotonic() < deadline:
        time.sleep(0.01)
    assert relay.open_sockets == 0


def test_a_client_of_a_relay_whose_upstream_is_down_sees_its_connection_closed():
    dead = socket.create_server(("127.0.0.1", 0))
    address = dead.getsockname()
    dead.close()
    relay = LatencyRelay(address)
    try:
        with socket.create_connection((relay.host, relay.port)) as conn:
            conn.settimeout(5)
            assert conn.recv(10) == b""
    finally:
        relay.close()
