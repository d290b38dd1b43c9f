"""The probes when things go wrong: bad credentials, a conflicting queue, a memory alarm, a broker crash."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pika
import requests
from helpers import memory_alarm, only_vhost, suspended_queue, value, wait_for, wait_for_sample
from probe_helpers import (
    captured_log,
    connection_failures,
    probe_config,
    probe_samples,
    probe_value,
    quick,
    running_probes,
    settled_since,
    wait_probe,
)

from ackscope.workloads.ports import free_port


def test_wrong_amqp_password_shows_probes_down_and_the_exporter_keeps_polling(broker, vhost, start_exporter):
    bad = broker.amqp_url(vhost, password="not-the-password")
    targets = (quick("classic-persistent"), quick("quorum", "quorum"))
    with captured_log() as lines:
        exporter = start_exporter(broker.management_url, probes=probe_config(broker, vhost, targets, url=bad),
                                  selection=only_vhost(vhost))
        wait_for_sample(exporter, "ackscope_up", 1)
        # Several attempts per connection, each refused: the log must still say it once per connection.
        wait_for(lambda: min(connection_failures(exporter.probes, role) for role in ("publisher", "consumer")) >= 3,
                 what="three refused logins on each probe connection")
        s = wait_for_sample(exporter, "ackscope_up", 1)
    for t in targets:
        assert value(s, "ackscope_probe_up", target=t.name) == 0
        assert value(s, "ackscope_probe_published_total", target=t.name) == 0
    assert value(s, "ackscope_up") == 1
    refused = [line for line in lines if "login refused" in line]
    assert len(refused) == 1, lines  # one line for the outage: not one per connection, nor per retry
    assert not any("not-the-password" in line for line in lines)


def test_probe_queue_declared_with_other_arguments_gives_one_clear_error(broker, vhost):
    conflicting = quick("classic-persistent")
    healthy = quick("quorum", "quorum")
    conn = pika.BlockingConnection(pika.URLParameters(broker.amqp_url(vhost)))
    conn.channel().queue_declare(conflicting.queue, durable=True, arguments={"x-max-length": 3})
    conn.close()
    with captured_log() as lines, running_probes(probe_config(broker, vhost, (conflicting, healthy))) as probes:
        wait_probe(probes, "ackscope_probe_delivered_total", healthy.name, 10)
        wait_for(lambda: any("PRECONDITION_FAILED" in line for line in lines),
                 what="the probe to say the queue conflicts")
        assert probe_value(probes, "ackscope_probe_up", conflicting.name) == 0
        assert probe_value(probes, "ackscope_probe_up", healthy.name) == 1
    errors = [line for line in lines if "PRECONDITION_FAILED" in line]
    assert all(conflicting.name in line and "inequivalent arg" in line for line in errors), lines
    assert len(errors) <= 2  # at most once per channel (publisher, consumer), never once per retry
    # The user's queue is left as it was: the probe never redeclares or deletes what it did not create.
    queue = broker.api("GET", f"/queues/{vhost}/{conflicting.queue}").json()
    assert queue["arguments"] == {"x-max-length": 3}


def test_memory_alarm_blocks_the_probe_publisher_and_it_says_so(broker, vhost):
    target = quick("classic-persistent", burst_size=0)
    with captured_log() as lines, running_probes(probe_config(broker, vhost, (target,), confirm_timeout=60)) as probes:
        wait_probe(probes, "ackscope_probe_confirmed_total", target.name, 10)
        with memory_alarm(broker):
            wait_for(lambda: _blocked(probes) == 1, what="the probe to report its publisher blocked")
            published = probe_value(probes, "ackscope_probe_published_total", target.name)
            # Blocked: a second of ticks (20/s) held back instead of piling up unconfirmed messages.
            wait_probe(probes, "ackscope_probe_held_back_total", target.name, 20)
            assert probe_value(probes, "ackscope_probe_published_total", target.name) <= published + 1
        wait_for(lambda: _blocked(probes) == 0, what="the probe to report its publisher unblocked")
        published = probe_value(probes, "ackscope_probe_published_total", target.name)
        wait_probe(probes, "ackscope_probe_published_total", target.name, published + 10)
    assert any("blocks the probe's publishing connection" in line for line in lines)


def _blocked(probes) -> float:
    return value(probe_samples(probes), "ackscope_probe_publisher_blocked")


def test_probe_command_serves_its_own_metrics_and_keeps_the_password_out_of_ps(broker, vhost):
    port = free_port()
    url = broker.amqp_url(vhost).replace("guest:guest@", "guest@")
    env = dict(os.environ, ACKSCOPE_AMQP_PASSWORD="guest", ACKSCOPE_RATE="20")
    proc = subprocess.Popen([sys.executable, "-m", "ackscope", "probe", "--amqp-url", url,
                             "--listen", f"127.0.0.1:{port}"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        def delivered():
            try:
                text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
            except requests.ConnectionError:
                return None
            return "ackscope_probe_delivered_total{" in text and re.search(
                r'ackscope_probe_delivered_total\{[^}]*target="quorum"[^}]*\} ([1-9])', text)
        wait_for(delivered, timeout=30, what="ackscope probe to deliver on the quorum target")
        with open(f"/proc/{proc.pid}/cmdline", "rb") as f:
            assert b"guest:guest" not in f.read()
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert "Traceback" not in err


def test_probe_command_refuses_a_password_on_its_command_line(broker, vhost):
    done = subprocess.run([sys.executable, "-m", "ackscope", "probe", "--amqp-url", broker.amqp_url(vhost)],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert "must not carry a password" in done.stderr
    assert "Traceback" not in done.stderr and "guest:guest" not in done.stderr


def test_unreachable_amqp_port_is_one_clear_line_and_probes_down(broker, vhost):
    closed = f"amqp://guest:guest@127.0.0.1:{free_port()}/%2F"
    target = quick("classic-persistent")
    with captured_log() as lines, running_probes(probe_config(broker, vhost, (target,), url=closed)) as probes:
        wait_for(lambda: min(connection_failures(probes, role) for role in ("publisher", "consumer")) >= 2,
                 what="a retry of each probe connection")
        assert probe_value(probes, "ackscope_probe_up", target.name) == 0
    # One line for the outage, naming whichever connection failed first.
    said = [line for line in lines if "connection to" in line]
    assert len(said) == 1 and re.fullmatch(
        rf"probe (publisher|consumer) connection to amqp://{re.escape(closed.split('@')[-1])}: cannot connect "
        r"\(Connection refused\); retrying with backoff", said[0]), said


def test_unconfirmed_messages_are_republished_when_the_connection_is_closed_under_them(broker, vhost):
    # Bursts of 300 a second put hundreds in flight at the close; 2,000 a second outran the consumer on a CPU shared
    # with the suite's other workers (the queue's length limit dropped what waited, counted as lost).
    target = quick("classic-persistent", burst_size=300, burst_interval=1.0)
    with running_probes(probe_config(broker, vhost, (target,), loss_deadline=30)) as probes:
        wait_probe(probes, "ackscope_probe_confirmed_total", target.name, 300)

        def publisher_name():
            conns = broker.api("GET", f"/vhosts/{vhost}/connections").json()
            return next((c["name"] for c in conns
                         if c.get("client_properties", {}).get("connection_name") == "ackscope-probe publisher"), None)
        name = wait_for(publisher_name, what="the probe's publishing connection")
        # The queue cannot confirm while suspended: publishes are certainly unconfirmed when the connection goes.
        with suspended_queue(broker, vhost, target.queue):
            wait_for(lambda: len(probes.runner.probes[0].confirms) > 100, timeout=10,
                     what="publishes awaiting confirms")
            broker.api("DELETE", f"/connections/{requests.utils.quote(name, safe='')}")
            closed = time.monotonic()
        republished = wait_probe(probes, "ackscope_probe_republished_total", target.name, 1)
        wait_probe(probes, "ackscope_probe_reconnects_total", target.name, 1)
        wait_for(lambda: settled_since(probes, closed), timeout=60, what="every confirm before the close to be settled")
        assert probe_value(probes, "ackscope_probe_lost_total", target.name) == 0
    assert republished >= 1
