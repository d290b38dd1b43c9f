"""ackscope's image, built by scripts/container-image.sh and run as a user runs it: non-root, a read-only root,
configuration from the environment and secrets from mounted files, a data volume. Against the suite's broker
(the host's network), and against RabbitMQ 4 in a container of its own with management statistics off, as the
official image and the Kubernetes operator run it, ackscope's container sharing its network as in a pod."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import subprocess
import time

import pyarrow.parquet as pq
import pytest
import requests
from container_helpers import REPO, USER_ID, container, data_volume, exit_code, image_size_mib, logs, podman, secret_file
from helpers import parse, scenarios_running, value, wait_for

from ackscope.workloads.ports import free_port
from ackscope.workloads.private_broker import ADMIN_PASSWORD, ADMIN_USER, LocalBroker

MONITORING_USER = "ackscope-monitoring"
MONITORING_PASSWORD = "monitoring-secret-7c1d"


@pytest.fixture(scope="module")
def monitoring_user(broker: LocalBroker):
    """A user tagged monitoring, with no permission to configure, write or read: what the exporter needs."""
    broker.api("PUT", f"/users/{MONITORING_USER}", json={"password": MONITORING_PASSWORD, "tags": "monitoring"})
    yield MONITORING_USER
    broker.api("DELETE", f"/users/{MONITORING_USER}")


def metrics(port: int) -> dict:
    try:
        return parse(requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text)
    except requests.ConnectionError:
        return {}


def exporter_env(broker: LocalBroker, listen: int, secrets: str = "/run/secrets") -> dict[str, str]:
    return {"ACKSCOPE_MANAGEMENT_URL": broker.management_url, "ACKSCOPE_USERNAME": MONITORING_USER,
            "ACKSCOPE_PASSWORD_FILE": f"{secrets}/monitoring-password", "ACKSCOPE_LISTEN": f"127.0.0.1:{listen}",
            "ACKSCOPE_INTERVAL": "1", "ACKSCOPE_AMQP_URL": f"amqp://{ADMIN_USER}@127.0.0.1:{broker.ports.amqp}/%2F",
            "ACKSCOPE_AMQP_PASSWORD_FILE": f"{secrets}/probe-password"}


def secrets_dir(tmp_path, probe_password: str = ADMIN_PASSWORD) -> str:
    """The two passwords as files the image's user may read, and their mount."""
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    secret_file(secrets, "monitoring-password", MONITORING_PASSWORD)
    secret_file(secrets, "probe-password", probe_password)
    return f"{secrets}:/run/secrets:ro"


def test_the_image_is_under_its_size_budget_and_runs_as_a_user_of_its_own(ackscope_image):
    size = image_size_mib(ackscope_image)
    print(f"\n{ackscope_image}: {size:.0f} MiB")  # docs/containers.md gives the bound below
    # pandas, plotly and Streamlit are the dashboard extra, PySpark the pipeline's: neither is in this image.
    assert size <= 250, f"{size:.0f} MiB: something large came into the exporter's image"
    config = json.loads(podman("image", "inspect", ackscope_image).stdout)[0]["Config"]
    assert config["User"] == f"{USER_ID}:{USER_ID}"
    assert config["Entrypoint"] == ["ackscope"] and config["Cmd"] == ["exporter"]
    assert config["Volumes"] == {"/var/lib/ackscope": {}}


def test_the_exporter_in_its_container_is_scraped_healthy_with_its_probes_on_a_read_only_root(
        broker, monitoring_user, ackscope_image, tmp_path):
    port = free_port()
    data = data_volume(tmp_path / "data")
    with container(ackscope_image, env=exporter_env(broker, port), options=("--network", "host"),
                   mounts=(secrets_dir(tmp_path), f"{data}:/var/lib/ackscope")) as name:
        samples = wait_for(lambda: (m := metrics(port)) and value(m, "ackscope_up") == 1
                           and (value(m, "ackscope_probe_confirmed_total", target="quorum") or 0) >= 10 and m,
                           60, lambda: f"ackscope_up 1 and confirms (logs: {logs(name)[-5:]})")
        assert value(samples, "ackscope_source_info", source="management") == 1
        assert value(samples, "ackscope_probe_lost_total", target="quorum") == 0
        assert podman("healthcheck", "run", name, check=False).returncode == 0  # the image's HEALTHCHECK
        assert podman("exec", name, "id", "-u").stdout.strip() == str(USER_ID)
        # The secrets were read from files: neither is in the process's arguments or environment.
        environ = podman("exec", name, "cat", "/proc/1/environ", "/proc/1/cmdline").stdout
        assert MONITORING_PASSWORD not in environ and ADMIN_PASSWORD + "\0" not in environ
        wrote = podman("exec", name, "touch", "/opt/ackscope/x", check=False)
        assert "Read-only file system" in wrote.stderr
        assert not [line for line in logs(name) if "Traceback" in line or "ERROR" in line]


def test_diagnose_from_the_image_names_the_culprit_and_exits_1(broker, vhost, monitoring_user, ackscope_image,
                                                                tmp_path):
    broker.api("PUT", f"/permissions/{vhost}/{MONITORING_USER}", json={"configure": "^$", "write": "^$",
                                                                       "read": "^$"})
    env = {"ACKSCOPE_MANAGEMENT_URL": broker.management_url, "ACKSCOPE_USERNAME": MONITORING_USER,
           "ACKSCOPE_PASSWORD_FILE": "/run/secrets/monitoring-password"}
    command = ("diagnose", "--include-vhosts", re.escape(vhost), "--window", "1.5s")

    secrets = secrets_dir(tmp_path)

    def diagnosed():
        with container(ackscope_image, *command, env=env, options=("--network", "host"), mounts=(secrets,)) as name:
            code, out = exit_code(name), logs(name)
        return code == 1 and out

    with scenarios_running(broker, vhost, "prefetch-unlimited"):
        out = wait_for(diagnosed, 60, "diagnose in the container to exit 1 on the scenario")
    head = next(line for line in out if "prefetch-unlimited" in line)
    assert head.startswith("WARNING") and "(ackscope-scenario prefetch-unlimited)" in head


BAD_STARTS = {
    "no credentials": ({"ACKSCOPE_MANAGEMENT_URL": "http://rabbitmq.example:15672"}, (),
                       "ackscope exporter: no credentials for http://rabbitmq.example:15672: RabbitMQ's guest account "
                       "answers on loopback only; set ACKSCOPE_USERNAME and ACKSCOPE_PASSWORD or "
                       "ACKSCOPE_PASSWORD_FILE"),
    "a secret it cannot read": ({"ACKSCOPE_USERNAME": MONITORING_USER,
                                 "ACKSCOPE_PASSWORD_FILE": "/run/secrets/monitoring-password"}, ("secret",),
                                "ackscope exporter: ACKSCOPE_PASSWORD_FILE: cannot read "
                                "/run/secrets/monitoring-password: Permission denied"),
    "a read-only data volume": ({}, ("data:ro",),
                                "ackscope exporter: ACKSCOPE_DATA_DIR: cannot write in /var/lib/ackscope: "
                                "Read-only file system"),
}


@pytest.mark.parametrize("case", BAD_STARTS, ids=list(BAD_STARTS))
def test_a_bad_start_is_one_line_and_exit_2_which_a_restart_does_not_cure(ackscope_image, tmp_path, case):
    env, needs, line = BAD_STARTS[case]
    mounts = [] if "data:ro" in needs else [f"{data_volume(tmp_path / 'data')}:/var/lib/ackscope"]
    if "secret" in needs:  # root's own file, as a Secret mounted without the pod's fsGroup
        secrets = tmp_path / "secrets"
        secrets.mkdir()
        secret_file(secrets, "monitoring-password", MONITORING_PASSWORD, owner=0, mode=0o600)
        mounts.append(f"{secrets}:/run/secrets:ro")
    if "data:ro" in needs:
        mounts.append(f"{data_volume(tmp_path / 'data')}:/var/lib/ackscope:ro")
    with container(ackscope_image, env=env, mounts=tuple(mounts), options=("--network", "none")) as name:
        assert exit_code(name) == 2  # a configuration error (the systemd unit does not restart on it)
        assert logs(name) == [line]


def test_the_pipeline_and_the_dashboard_in_the_exporters_image_say_they_are_extras(ackscope_image, tmp_path):
    with container(ackscope_image, "pipeline", "--data-dir", "/var/lib/ackscope", "--out", "/var/lib/ackscope/r",
                   mounts=(f"{data_volume(tmp_path / 'data')}:/var/lib/ackscope",),
                   options=("--network", "none")) as name:
        assert exit_code(name) == 1
        assert logs(name) == ["ackscope pipeline: PySpark is not installed here: pip install 'ackscope[pipeline]' "
                              "(and a Java 17+ runtime)"]
    with container(ackscope_image, "dashboard", options=("--network", "none")) as name:
        assert exit_code(name) == 2
        assert logs(name) == ["ackscope dashboard: streamlit, pandas, plotly not installed here: pip install "
                              "'ackscope[dashboard]', or run the ackscope-dashboard image"]


@pytest.mark.alone  # a bound in seconds: nothing may compete with it for the CPU
def test_sigterm_mid_poll_ends_the_container_within_5s_with_its_parquet_closed(broker, ackscope_image, tmp_path):
    # The management API hangs (a socket that takes connections and never answers), so a poll is in flight
    # whenever the signal comes; the probes keep writing events to the data volume meanwhile.
    import socket
    hanging = socket.socket()
    hanging.bind(("127.0.0.1", 0))
    hanging.listen(64)
    port = free_port()
    env = dict(exporter_env(broker, port), ACKSCOPE_MANAGEMENT_URL=f"http://127.0.0.1:{hanging.getsockname()[1]}",
               ACKSCOPE_TIMEOUT="60", ACKSCOPE_USERNAME=ADMIN_USER,
               ACKSCOPE_PASSWORD_FILE="/run/secrets/probe-password")
    data = data_volume(tmp_path / "data")
    try:
        with container(ackscope_image, env=env, options=("--network", "host"),
                       mounts=(secrets_dir(tmp_path), f"{data}:/var/lib/ackscope")) as name:
            wait_for(lambda: (value(metrics(port), "ackscope_probe_confirmed_total", target="quorum") or 0) >= 20,
                     60, lambda: f"the probes' confirms (logs: {logs(name)[-5:]})")
            samples = metrics(port)
            assert value(samples, "ackscope_up") is None or value(samples, "ackscope_up") == 0  # no poll ended
            signalled = time.monotonic()
            podman("kill", "--signal", "TERM", name)
            code = exit_code(name, timeout=30)
            took = time.monotonic() - signalled
            print(f"\nSIGTERM mid-poll: exit {code} after {took:.1f} s")  # docs/containers.md gives the bound below
            assert code == 0 and took <= 5, f"exit {code} after {took:.1f} s"
    finally:
        hanging.close()
    files = sorted(data.glob("events/date=*/*.parquet"))
    assert files and not list(data.rglob(".*.tmp")), "the buffered events written whole, nothing half-written"
    rows = sum(pq.read_table(f).num_rows for f in files)
    assert rows >= 20


def _hashed(password: str) -> str:
    """RabbitMQ's rabbit_password_hashing_sha256: base64 of a 4-byte salt and SHA-256(salt + password)."""
    salt = os.urandom(4)
    return base64.b64encode(salt + hashlib.sha256(salt + password.encode()).digest()).decode()


def test_rabbitmq_4_in_a_container_with_statistics_off_is_read_through_its_plugin_by_ackscope_in_its_network(
        ackscope_image, rabbitmq_image, tmp_path):
    # As the operator runs it: management statistics off, the Prometheus plugin on, users from definitions;
    # the probe user may touch ackscope.probe.* only. ackscope's container joins the broker's network
    # namespace, as two containers of one pod share theirs, and reaches it on localhost.
    conf = tmp_path / "rabbitmq"
    conf.mkdir()
    (conf / "rabbitmq.conf").write_text("management_agent.disable_metrics_collector = true\n"
                                        "load_definitions = /etc/rabbitmq/definitions.json\n")
    (conf / "enabled_plugins").write_text("[rabbitmq_management,rabbitmq_prometheus].\n")
    probe_only = r"^ackscope\.probe\."
    (conf / "definitions.json").write_text(json.dumps({
        "users": [{"name": MONITORING_USER, "password_hash": _hashed(MONITORING_PASSWORD), "tags": ["monitoring"],
                   "hashing_algorithm": "rabbit_password_hashing_sha256"},
                  {"name": "ackscope-probe", "password_hash": _hashed("probe-secret"), "tags": [],
                   "hashing_algorithm": "rabbit_password_hashing_sha256"}],
        "vhosts": [{"name": "/"}],
        "permissions": [{"user": "ackscope-probe", "vhost": "/", "configure": probe_only, "write": probe_only,
                         "read": probe_only}]}))
    for f in conf.iterdir():
        f.chmod(0o644)
    secrets = secrets_dir(tmp_path, probe_password="probe-secret")
    port = free_port()
    env = {"ACKSCOPE_MANAGEMENT_URL": "http://localhost:15672", "ACKSCOPE_USERNAME": MONITORING_USER,
           "ACKSCOPE_PASSWORD_FILE": "/run/secrets/monitoring-password", "ACKSCOPE_INTERVAL": "2",
           "ACKSCOPE_AMQP_URL": "amqp://ackscope-probe@localhost:5672/%2F",
           "ACKSCOPE_AMQP_PASSWORD_FILE": "/run/secrets/probe-password"}
    # The broker's container is no read-only one: RabbitMQ writes its data under /var/lib/rabbitmq.
    rabbit = podman("run", "--detach", "--hostname", "rabbitmq-0", "--publish", f"127.0.0.1:{port}:9577",
                    "--volume", f"{conf}:/etc/rabbitmq:ro", rabbitmq_image).stdout.strip()
    try:
        with container(ackscope_image, env=env, options=("--network", f"container:{rabbit}"),
                       mounts=(secrets, f"{data_volume(tmp_path / 'data')}:/var/lib/ackscope")
                       ) as name:
            samples = wait_for(lambda: (m := metrics(port)) and value(m, "ackscope_up") == 1
                               and (value(m, "ackscope_probe_confirmed_total", target="quorum") or 0) >= 5 and m,
                               120, lambda: f"ackscope_up 1 and confirms (ackscope: {logs(name)[-4:]}, "
                                            f"rabbitmq: {logs(rabbit)[-4:]})")
            assert value(samples, "ackscope_source_info", source="prometheus") == 1  # statistics off: the plugin
            assert value(samples, "ackscope_probe_lost_total", target="quorum") == 0
            said = "\n".join(logs(name))
            assert "management statistics are disabled on the broker" in said and "RabbitMQ 4.0" in said
    finally:
        podman("rm", "--force", "--time", "0", rabbit, check=False)


def test_the_dashboard_image_built_in_a_fresh_clone_as_the_docs_say_is_healthy_and_calls_nowhere(
        ackscope_image, tmp_path):
    """docs/containers.md's two commands in a clone with no .venv (the script makes the wheels in a venv of its
    own), then the dashboard as a user runs it: read-only, its port from ACKSCOPE_PORT, healthy by its image's
    HEALTHCHECK (the exporter image's asks /healthz, which the dashboard does not serve)."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True, timeout=120)
    done = subprocess.run(["bash", "scripts/container-image.sh", "--dashboard"], cwd=clone, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-1500:]
    assert not (clone / ".venv").exists()
    image = done.stdout.strip().splitlines()[-1].split()[1]
    assert image.startswith("localhost/ackscope-dashboard:"), done.stdout
    size = image_size_mib(image)
    print(f"\n{image}: {size:.0f} MiB")  # docs/containers.md gives the bound below
    assert size < 700, f"{size:.0f} MiB"
    port = free_port()
    with container(image, env={"ACKSCOPE_PORT": str(port), "ACKSCOPE_EXPORTER_URL": "http://127.0.0.1:9"},
                   options=("--network", "host")) as name:
        wait_for(lambda: status_of(f"http://127.0.0.1:{port}/_stcore/health") == 200, 60,
                 lambda: f"the dashboard's health (logs: {logs(name)[-5:]})")
        assert status_of(f"http://127.0.0.1:{port}/") == 200
        checked = podman("healthcheck", "run", name, check=False)
        assert checked.returncode == 0, checked.stdout + checked.stderr  # the dashboard image's HEALTHCHECK
        said = logs(name)
    # Streamlit, left to itself, asks a public service for the external address (dashboard/server.py).
    assert not [line for line in said if "external IP" in line or "External URL" in line], said


def test_the_image_script_says_in_one_line_what_it_needs_before_it_runs_anything():
    script = str(REPO / "scripts" / "container-image.sh")
    done = subprocess.run(["runuser", "-u", "nobody", "--", "bash", script], capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 1 and done.stderr.strip().startswith("container-image: run it as root"), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    done = subprocess.run(["bash", script, "--dashbaord"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and done.stderr.strip() == (
        "container-image: unknown option --dashbaord (usage: scripts/container-image.sh [--dashboard | --rabbitmq])")


def status_of(url: str) -> int | None:
    try:
        return requests.get(url, timeout=5).status_code
    except requests.ConnectionError:
        return None
