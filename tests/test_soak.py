"""Five minutes of the soak (bench/soak.py runs 30): the exporter with its probes and a data dir, as its own
process on a test host (a network namespace), through a broker killed with kill -9, a memory alarm, a management
API that hangs and then answers garbage, 20 % packet loss on the path to the broker, a graceful restart and 50 ms
latency each way on that path. What an operator relies on: every outage seen and recovered from, nothing
confirmed lost, what a fault raised cleared after it, and each fault said in a few log lines, not a flood."""

from __future__ import annotations

import pytest

from ackscope_testkit.soak import Soak

# Its recovery bound is a timing: nothing may compete with it for the CPU.
pytestmark = pytest.mark.alone


@pytest.fixture(scope="module")
def soak(rabbitmq_server) -> Soak:
    # Six faults; each window (50 s) holds its fault (the API's takes 2 holds) and the exporter's all-clear,
    # said five good intervals (15 s) after the broker answers, and the probes' reconnection after a graceful
    # restart (their backoff reached 16 s while a loaded CI machine took 24 s to restart the broker: 45 s
    # windows left probe-down still firing at the next fault). Before the first, 20 s of calm: the exporter and
    # its probes up, and the confirm latency the faults' is compared with (one is sampled each second).
    return Soak(minutes=5.0, interval=3.0, fault_every=50.0, hold=10.0, calm=20.0).run()


def test_every_outage_is_seen_and_recovered_from_within_two_intervals_of_the_broker_answering(soak):
    outages = [f for f in soak.faults if "restart" in f.name or "API" in f.name]
    assert len(outages) >= 3, [f.name for f in soak.faults]
    for f in outages:
        assert f.down_at is not None, f"{f.name}: ackscope_up never went to 0"
        assert f.recovery_s is not None and f.recovery_s <= 2 * soak.interval + 1, (f.name, f.recovery_s)


def test_no_confirmed_persistent_message_is_lost_across_the_faults(soak):
    assert all(f.probes for f in soak.faults)  # the probes' counters were read across every fault
    assert soak.lost() == 0


def test_packet_loss_on_the_path_to_the_broker_loses_no_confirmed_message_and_confirms_go_on(soak):
    network = next(f for f in soak.faults if "packet loss" in f.name)
    assert network.packets_dropped, "the lossy link dropped nothing"
    # Confirms went on while the loss lasted (a mean over those made then), none timed out, none was lost. How much
    # slower they were is bench/soak.py's figure, not asserted: on this link's sub-millisecond round trip TCP resends a
    # lost segment within milliseconds, which a slow day's baseline (16 ms once) hides.
    assert network.confirm_ms is not None, "no confirm while the loss lasted"
    assert network.probes["lost"] == 0 and network.probes["confirm_timeouts"] == 0, network.probes


def test_latency_on_the_path_to_the_broker_shows_in_the_probes_confirm_latency(soak):
    slow = next(f for f in soak.faults if "latency" in f.name)
    assert slow.confirm_ms is not None
    # A confirm waits for its publish to pass the relay and for the ack to pass back: 2 x 50 ms for each one
    # made while the latency was on; those of the second before and after it dilute the mean, never to half.
    assert slow.confirm_ms > 50, slow.confirm_ms
    assert slow.down_at is None, "the polls fit in the interval: latency is no outage"
    assert slow.probes["lost"] == 0 and slow.probes["confirm_timeouts"] == 0


def test_each_fault_costs_a_few_log_lines_and_the_alarm_is_named(soak):
    for f in soak.faults:
        # Its start and its end, on each path it breaks: the exporter's polls (HTTP) and, when the broker itself
        # goes, the probes' connections (AMQP).
        paths = 2 if "restart" in f.name else 1
        assert len(f.log_lines) <= 2 * paths, (f.name, f.log_lines)
    alarm = next(f for f in soak.faults if f.name == "memory alarm")
    assert "memory-alarm" in alarm.findings


def test_what_a_fault_raises_clears_once_it_is_over(soak):
    # A finding that outlives its fault would tell the on-call engineer of a trouble that is gone.
    for f in soak.faults:
        assert not f.findings_left & {"memory-alarm", "disk-alarm", "connection-blocked", "probe-down"}, (
            f.name, f.findings_left)
