"""Starting a private node (workloads/private_broker.py, the demo's and the suite's one node start): why a boot
failed, in one line, from what the node printed; a first start whose port another process took starts again on
other free ports."""

import socket
from dataclasses import replace
from pathlib import Path

import pytest

from ackscope.workloads.private_broker import LocalBroker, boot_failure

PRINTED = Path(__file__).parent / "data" / "boot-failures"  # console.log of real 3.10.8 boots that failed


def test_a_port_held_by_another_process_is_named_with_its_listener():
    said = boot_failure((PRINTED / "eaddrinuse-3.10.8.txt").read_text())
    assert said == "a port it was given 127.0.0.1:43583 is held by another process (eaddrinuse)"


def test_the_distribution_port_held_by_another_process_is_named_as_a_port_taken():
    # The demo's node, once, on a loaded machine: an outgoing connection held the port its distribution was given.
    said = boot_failure((PRINTED / "dist-port-3.10.8.txt").read_text())
    assert said == ("its Erlang distribution port 43473 is held by another process (dist_port_already_used)")


def test_a_setting_the_release_does_not_know_is_named_with_the_startup_error():
    said = boot_failure((PRINTED / "unknown-setting-3.10.8.txt").read_text())
    assert said == ("You've tried to set deprecated_features.permit.management_metrics_collection, but there is no "
                    "setting with that name. ({error,failed_to_prepare_configuration})")


def test_a_console_without_a_startup_error_says_nothing_and_a_long_one_is_cut():
    assert boot_failure("  Starting broker...\n") is None
    said = boot_failure("Error during startup: {error,\n" + " x" * 400 + "}\n\nmore")
    assert len(said) == 300 and said.startswith("{error, x x") and said.endswith("...")


def test_a_first_start_whose_port_another_process_holds_starts_on_other_ports(rabbitmq_server):
    node = LocalBroker(name="ackscope-port-taken")
    held = socket.socket()
    held.bind(("127.0.0.1", 0))  # bound, not listening: as an outgoing connection holds its port
    taken = held.getsockname()[1]
    node.ports = replace(node.ports, amqp=taken)
    try:
        node.start()
        assert node.ports.amqp != taken
        with socket.create_connection(("127.0.0.1", node.ports.amqp), timeout=5):
            pass
        assert "eaddrinuse" in (node.base_dir / "log" / "console.log").read_text()  # the first try's failure
    finally:
        held.close()
        node.stop()
        node.remove()


def test_a_first_start_whose_distribution_port_another_process_holds_starts_on_other_ports(rabbitmq_server):
    node = LocalBroker(name="ackscope-dist-taken")
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    taken = held.getsockname()[1]
    node.ports = replace(node.ports, dist=taken)
    try:
        node.start()
        assert node.ports.dist != taken
        assert "dist_port_already_used" in (node.base_dir / "log" / "console.log").read_text()
    finally:
        held.close()
        node.stop()
        node.remove()


def test_a_node_that_refuses_its_configuration_says_why_in_one_line(rabbitmq_server):
    node = LocalBroker(name="ackscope-refused", config=("no_such.setting = 1",))
    try:
        with pytest.raises(Exception) as refused:
            node.start(timeout=60)
    finally:
        node.stop()
        node.remove()
    message = str(refused.value)
    assert "\n" not in message and "exited while starting: You've tried to set no_such.setting" in message
