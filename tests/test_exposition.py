"""The exposition as Prometheus sees it: promtool's lint, a real Prometheus scrape, gzip, TLS, basic auth."""

from __future__ import annotations

import json

import gzip
import re
import subprocess

import pika
import pytest
import requests
import trustme
from helpers import only_vhost, parse, prometheus_query, value, wait_for, wait_for_sample

from ackscope.core.http_server import WebSecurity
from ackscope.core.secret import Secret


@pytest.fixture
def busy_exporter(broker, vhost, clients, start_exporter):
    """An exporter over a vhost where every family has series: publishers, consumers, all queue types."""
    ch = clients(broker, vhost, "everything").channel()
    ch.confirm_delivery()
    for qtype in ("classic", "quorum", "stream"):
        ch.queue_declare(f"{qtype}-q", durable=True, arguments={"x-queue-type": qtype})
        ch.basic_publish("", f"{qtype}-q", b"x", pika.BasicProperties(delivery_mode=2))
    consumer = clients(broker, vhost, "consumer").channel()
    consumer.basic_qos(prefetch_count=5)
    consumer.basic_consume("classic-q", on_message_callback=lambda *a: None)
    exporter = start_exporter(broker.management_url, selection=only_vhost(vhost))
    wait_for_sample(exporter, "ackscope_channel_messages_unacked", 1, vhost=vhost, connection_name="consumer")
    # The consumer list can come a poll after the channel that holds the message (CI once scraped between the two).
    wait_for_sample(exporter, "ackscope_consumer_prefetch_count", 5, vhost=vhost, queue="classic-q")
    return exporter


# The issue fixes these names as the public contract; promtool reserves a _count suffix for histograms and
# summaries. They are the only lint promtool may report: anything else (units, _total, HELP) fails.
CONTRACT_COUNT_NAMES = {"ackscope_channel_prefetch_count", "ackscope_channel_global_prefetch_count",
                        "ackscope_consumer_prefetch_count"}


def test_promtool_lints_nothing_but_the_contract_prefetch_count_names(busy_exporter, promtool):
    text = requests.get(busy_exporter.url + "/metrics", timeout=5).content
    families = {m for m in re.findall(rb"^# TYPE (\S+)", text, re.M)}
    assert len(families) > 40
    lint = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True)
    problems = [line for line in (lint.stdout + lint.stderr).decode().splitlines() if line.strip()]
    flagged = {line.split()[0] for line in problems if 'should not have "_count" suffix' in line}
    assert flagged == CONTRACT_COUNT_NAMES
    assert len(problems) == len(CONTRACT_COUNT_NAMES), problems


def test_gzip_body_is_the_same_exposition_with_a_fresh_snapshot_age(busy_exporter):
    def age_and_rest(body: bytes) -> tuple[float, bytes]:
        age = re.search(rb"\nackscope_snapshot_age_seconds ([0-9.]+)\n", body)
        return float(age.group(1)), body.replace(age.group(0), b"\n")

    def same_poll():
        plain = requests.get(busy_exporter.url + "/metrics", headers={"Accept-Encoding": "identity"}, timeout=5)
        raw = requests.get(busy_exporter.url + "/metrics", headers={"Accept-Encoding": "gzip"}, timeout=5,
                           stream=True)
        assert raw.headers["Content-Encoding"] == "gzip" and "Content-Encoding" not in plain.headers
        (plain_age, plain_rest), (gz_age, gz_rest) = age_and_rest(plain.content), age_and_rest(gzip.decompress(
            raw.raw.read()))
        # Both rendered from one poll (polls come every 0.5 s: retry until a pair falls within one).
        return (plain_rest, gz_rest, plain_age, gz_age) if plain_age <= gz_age < plain_age + 0.5 else None

    plain_rest, gz_rest, plain_age, gz_age = wait_for(same_poll, what="two scrapes of one poll")
    assert gz_rest == plain_rest  # byte for byte, but for the age, computed at each scrape
    assert value(parse(gz_rest.decode()), "ackscope_up") == 1


def test_real_prometheus_scrapes_the_exporter(busy_exporter, tmp_path, vhost, prometheus):
    with prometheus(busy_exporter.url.removeprefix("http://"), tmp_path) as url:
        def query(q: str) -> list:
            return prometheus_query(url, q)

        wait_for(lambda: query('up{job="ackscope"} == 1'), timeout=30, what="Prometheus to scrape the exporter")
        unacked = wait_for(lambda: query(f'ackscope_channel_messages_unacked{{vhost="{vhost}",'
                                         f'connection_name="consumer"}}'), what="channel series in Prometheus")
        assert float(unacked[0]["value"][1]) == 1
        assert query("ackscope_up == 1") and query("ackscope_snapshot_age_seconds < 10")


def test_tls_and_basic_auth_protect_the_exporter_endpoints(broker, start_exporter, tmp_path):
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "server.pem"))
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    web = WebSecurity("prometheus", Secret("scrape-secret"), str(tmp_path / "server.pem"), str(tmp_path / "server.pem"))
    exporter = start_exporter(broker.management_url, web=web)
    assert exporter.url.startswith("https://")
    ca_file = str(tmp_path / "ca.pem")

    assert requests.get(exporter.url + "/metrics", verify=ca_file, timeout=5).status_code == 401
    bad = requests.get(exporter.url + "/metrics", verify=ca_file, auth=("prometheus", "wrong"), timeout=5)
    assert bad.status_code == 401
    wait_for(lambda: "ackscope_up 1.0" in requests.get(exporter.url + "/metrics", verify=ca_file,
             auth=("prometheus", "scrape-secret"), timeout=5).text, what="an authenticated scrape")
    assert requests.get(exporter.url + "/healthz", verify=ca_file, timeout=5).status_code == 200
    with pytest.raises(requests.exceptions.SSLError):
        requests.get(exporter.url + "/healthz", timeout=5)  # an unknown CA is refused by default
    with pytest.raises(requests.exceptions.ConnectionError):
        requests.get(exporter.url.replace("https", "http") + "/healthz", timeout=5)


def test_management_api_tls_is_verified_against_ca_file_unless_turned_off(start_exporter, tmp_path):
    """An HTTPS endpoint whose certificate nobody vouches for is refused (reason 'tls'); --ca-file vouches for
    it; --insecure-skip-verify skips the check. REQUESTS_CA_BUNDLE in the environment changes none of this."""
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "server.pem"))
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    fake = start_exporter("http://127.0.0.1:9", web=WebSecurity(tls_cert=str(tmp_path / "server.pem"),
                                                                 tls_key=str(tmp_path / "server.pem")))
    # An HTTPS server with an unknown CA, as "management", under a path prefix where it serves nothing (an exporter
    # serves an /api/overview of its own).
    management = fake.url + "/elsewhere"
    exporter = start_exporter(management, interval=0.3)
    wait_for_sample(exporter, "ackscope_poll_errors_total", lambda v: v >= 1, endpoint="overview", reason="tls")
    unverified = start_exporter(management, interval=0.3, verify=False)  # --insecure-skip-verify
    s = wait_for_sample(unverified, "ackscope_poll_errors_total", lambda v: v >= 1, endpoint="overview",
                        reason="not_found")  # past TLS: that server has no /api/overview
    assert value(s, "ackscope_poll_errors_total", endpoint="overview", reason="tls") is None
    with_ca = start_exporter(management, interval=0.3, verify=str(tmp_path / "ca.pem"))  # --ca-file
    s = wait_for_sample(with_ca, "ackscope_poll_errors_total", lambda v: v >= 1, endpoint="overview",
                        reason="not_found")
    assert value(s, "ackscope_poll_errors_total", endpoint="overview", reason="tls") is None


@pytest.mark.parametrize("case, identity, expires, says", [
    ("expired", "127.0.0.1", -1, "certificate has expired: renew it"),
    ("wrong host", "rabbit.other.example", 30, "not for this host name"),
])
def test_an_expired_or_wrong_host_management_certificate_is_refused_in_one_line(start_exporter, tmp_path, case,
                                                                                 identity, expires, says):
    import datetime

    ca = trustme.CA()
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = ca.issue_cert(identity, not_before=now - datetime.timedelta(days=60),
                         not_after=now + datetime.timedelta(days=expires))
    cert.private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "server.pem"))
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    fake = start_exporter("http://127.0.0.1:9", web=WebSecurity(tls_cert=str(tmp_path / "server.pem"),
                                                                 tls_key=str(tmp_path / "server.pem")))
    exporter = start_exporter(fake.url, interval=0.3, verify=str(tmp_path / "ca.pem"))  # the CA is trusted
    wait_for_sample(exporter, "ackscope_poll_errors_total", lambda v: v >= 1, endpoint="overview", reason="tls")
    error = requests.get(exporter.url + "/api/snapshot", timeout=5).json()["last_error"]
    assert says in error.lower() and "\n" not in error, (case, error)


def test_docs_metrics_reference_is_the_one_generated_from_the_code():
    from pathlib import Path

    from ackscope.exporter.reference import families, markdown
    doc = (Path(__file__).resolve().parent.parent / "docs" / "metrics.md").read_text()
    assert markdown() in doc, "docs/metrics.md is stale: paste python -m ackscope.apps.reference metrics"
    names = {name for name, *_ in families()}
    # What the alert rules and the Grafana dashboard rely on is in it.
    for used in ("ackscope_up", "ackscope_snapshot_age_seconds", "ackscope_finding", "ackscope_probe_lost_total",
                 "ackscope_probe_confirm_latency_seconds", "ackscope_channel_prefetch_utilisation",
                 "ackscope_node_disk_free_alarm", "ackscope_folded_objects"):
        assert used in names, used


def test_a_snapshot_with_every_field_reported_renders_as_json_for_the_ui():
    # The reference's snapshot has every record and field, the overview's churn counts among them.
    from ackscope.exporter.exposition import snapshot_json
    from ackscope.exporter.reference import sample_snapshot
    from ackscope.exporter.status import PollStatus
    document = json.loads(snapshot_json(sample_snapshot(), PollStatus(up=True)))
    assert document["snapshot"]["overview"]["churn"] == {"connections_opened": 1, "connections_closed": 1,
                                                         "channels_opened": 1, "channels_closed": 1}
