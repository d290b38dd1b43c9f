"""Passwords never leak; a monitoring-only user is all the exporter needs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from helpers import wait_for

from ackscope.core.secret import Secret
from ackscope.sources.management.client import ManagementClient
from ackscope.workloads.ports import free_port

PASSWORD = "Zq7-very-distinctive-pa55word"


@pytest.fixture
def monitoring_user(broker, tmp_path):
    """A user tagged 'monitoring' with no permission in any vhost; its password in a file."""
    broker.api("PUT", "/users/watcher", json={"password": PASSWORD, "tags": "monitoring"})
    secret_file = tmp_path / "watcher.password"
    secret_file.write_text(PASSWORD + "\n")
    yield secret_file
    broker.api("DELETE", "/users/watcher")


def _run_exporter(broker_url: str, env: dict) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "ackscope", "exporter", "--management-url", broker_url, "--username", "watcher",
         "--listen", f"127.0.0.1:{port}", "--interval", "0.5"],
        env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"

    def answering():
        try:
            return requests.get(url + "/healthz", timeout=1).ok
        except requests.ConnectionError:
            return False

    wait_for(answering, what="the exporter process to listen")
    return proc, url


def _stop(proc: subprocess.Popen) -> str:
    proc.terminate()
    out, _ = proc.communicate(timeout=20)
    return out


def test_monitoring_tag_without_vhost_permissions_sees_everything(broker, vhost, clients, monitoring_user):
    ch = clients(broker, vhost, "app").channel()
    ch.queue_declare("seen")
    ch.basic_consume("seen", on_message_callback=lambda *a: None)
    proc, url = _run_exporter(broker.management_url, {"ACKSCOPE_PASSWORD_FILE": str(monitoring_user)})
    try:
        def consumer_seen():
            text = requests.get(url + "/metrics", timeout=5).text
            return 'queue="seen"' in text and 'connection_name="app"' in text and "ackscope_up 1.0" in text
        wait_for(consumer_seen, what="the monitoring user's view of the test vhost")
    finally:
        out = _stop(proc)
    assert "Traceback" not in out
    # The one path the tag does not open (shovel definitions are parameters) is said as such: the management API
    # answers it 401, as it does a wrong password, and only its reason tells them apart.
    assert "login failed" not in out, out
    assert ("user 'watcher' may not read /api/parameters/shovel (the broker: User not authorised to access object)"
            in out), out


def test_password_appears_nowhere_a_user_or_attacker_could_read(broker, vhost, clients, monitoring_user):
    clients(broker, vhost, "app").channel().queue_declare("q")
    good, good_url = _run_exporter(broker.management_url, {"ACKSCOPE_PASSWORD": PASSWORD})
    bad, bad_url = _run_exporter(broker.management_url, {"ACKSCOPE_PASSWORD": PASSWORD + "-wrong"})
    try:
        wait_for(lambda: "ackscope_up 1.0" in requests.get(good_url + "/metrics", timeout=5).text, what="good up")
        wait_for(lambda: "unauthorized" in requests.get(bad_url + "/metrics", timeout=5).text, what="bad counted")
        exposed = []
        for url in (good_url, bad_url):
            for path in ("/metrics", "/api/snapshot", "/healthz", "/"):
                exposed.append(requests.get(url + path, timeout=5).text)
        for proc in (good, bad):
            exposed.append(Path(f"/proc/{proc.pid}/cmdline").read_bytes().decode(errors="replace"))
    finally:
        exposed += [_stop(good), _stop(bad)]
    leaked = [text[:200] for text in exposed if PASSWORD in text]
    assert not leaked
    assert not any("Traceback" in text for text in exposed)
    assert any("login failed for user 'watcher'" in text for text in exposed), "the bad one said why"


def test_fetch_errors_and_secret_reprs_do_not_contain_the_password():
    client = ManagementClient("http://127.0.0.1:9", "someone", Secret(PASSWORD), timeout=1)
    with pytest.raises(Exception) as failure:
        client.fetch("overview", deadline=time.monotonic() + 2)
    assert PASSWORD not in str(failure.value) and PASSWORD not in repr(failure.value)
    assert PASSWORD not in repr(Secret(PASSWORD)) and PASSWORD not in f"{Secret(PASSWORD)}"
    with pytest.raises(ValueError) as refused:
        ManagementClient(f"http://someone:{PASSWORD}@127.0.0.1:15672", "someone", Secret("x"))
    assert PASSWORD not in str(refused.value)
    assert re.search("must not carry credentials", str(refused.value))


def test_a_user_without_the_monitoring_tag_gets_one_line_that_says_to_add_it(broker, tmp_path):
    broker.api("PUT", "/users/watcher", json={"password": PASSWORD, "tags": ""})
    try:
        proc, url = _run_exporter(broker.management_url, {"ACKSCOPE_PASSWORD": PASSWORD})
        try:
            wait_for(lambda: "unauthorized" in requests.get(url + "/metrics", timeout=5).text, what="the refusal")
        finally:
            out = _stop(proc)
    finally:
        broker.api("DELETE", "/users/watcher")
    said = [line for line in out.splitlines() if "monitoring" in line]
    assert len(said) == 1 and "no management tag" in said[0], out
    assert "login failed" not in out and "Traceback" not in out


def test_the_dashboard_refuses_an_exporter_url_that_carries_credentials_without_echoing_them():
    # In the URL they would be on the command line (ps), in the startup line and on every page's caption.
    done = subprocess.run([str(Path(sys.executable).with_name("ackscope")), "dashboard", "--exporter-url",
                           f"http://ui:{PASSWORD}@127.0.0.1:9577"], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    said = done.stderr.strip().splitlines()
    assert len(said) == 1 and PASSWORD not in done.stderr + done.stdout, said
    assert "--exporter-url: must not carry credentials: use ACKSCOPE_WEB_USERNAME" in said[0]
