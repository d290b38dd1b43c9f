"""free_port: where the suite's parallel workers find their nodes' ports."""

import socket

import pytest

from ackscope.workloads.ports import NoFreePort, free_port


def test_a_port_range_set_after_import_is_where_free_port_looks(monkeypatch):
    # The suite's conftest sets each worker's range after it has imported this module (stop 44's CI: a node
    # on a kernel-chosen port, outside every worker's range, failed to start).
    monkeypatch.setenv("ACKSCOPE_PORT_RANGE", "23100-23140")
    picked = [free_port() for _ in range(20)]
    assert all(23100 <= p < 23140 for p in picked)
    assert len(set(picked)) == 20


def test_a_new_range_moves_free_port_into_it(monkeypatch):
    monkeypatch.setenv("ACKSCOPE_PORT_RANGE", "23200-23210")
    free_port()
    monkeypatch.setenv("ACKSCOPE_PORT_RANGE", "23300-23310")
    assert 23300 <= free_port() < 23310


def test_a_range_with_every_port_taken_is_said(monkeypatch):
    monkeypatch.setenv("ACKSCOPE_PORT_RANGE", "23400-23402")
    held = [socket.socket(), socket.socket()]
    try:
        for s, port in zip(held, (23400, 23401)):
            s.bind(("127.0.0.1", port))
        with pytest.raises(NoFreePort, match="ACKSCOPE_PORT_RANGE=23400-23402"):
            free_port()
    finally:
        for s in held:
            s.close()
