"""Record what `ackscope upgrade-check` reads, and what each release answers to the declares it predicts for, on
each release of the matrix, for the upgrade parser's and predictions' tests.

    python tests/data/record_upgrade_facts.py      # tests/data/upgrade-facts-<version>.json

A policy with ha-mode, another with queue-mode; classic queues declared with x-consumer-timeout, x-queue-mode,
x-queue-version 1 and x-queue-master-locator; a transient non-exclusive queue. Recorded: each declare's answer,
/api/policies, /api/deprecated-features/used (its HTTP status too: 404 before 3.13) and the queues' arguments.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pika
import requests
from record_broker_log import on_the_matrix, written

from ackscope.workloads.private_broker import ADMIN_PASSWORD, ADMIN_USER, LocalBroker
from ackscope.workloads.rabbitmq_release import Release

DECLARES = {"cto_classic": ("cto", True, {"x-consumer-timeout": 60000}),
            "lazy": ("lazy", True, {"x-queue-mode": "lazy"}),
            "qv1": ("qv1", True, {"x-queue-version": 1}),
            "master_locator": ("mloc", True, {"x-queue-master-locator": "min-masters"}),
            "transient": ("transient", False, {})}


def _declare(broker: LocalBroker, name: str, durable: bool, arguments: dict) -> str:
    """'ok', or what the broker said when it refused (a channel's or the whole connection's close)."""
    conn = pika.BlockingConnection(pika.URLParameters(broker.amqp_url()))
    try:
        conn.channel().queue_declare(name, durable=durable, arguments=arguments)
        return "ok"
    except pika.exceptions.AMQPError as e:
        return repr(e)
    finally:
        if conn.is_open:
            conn.close()


def record(release: Release) -> Path:
    broker = LocalBroker(name="ackscope-upgrade", release=release)
    broker.start()
    try:
        def api(method: str, path: str, **kw) -> requests.Response:
            return requests.request(method, f"{broker.management_url}/api{path}", auth=(ADMIN_USER, ADMIN_PASSWORD),
                                    timeout=30, **kw)
        ha = api("PUT", "/policies/%2F/ha-all", json={"pattern": "^mirrored", "definition": {"ha-mode": "all"},
                                                      "apply-to": "queues"})
        api("PUT", "/policies/%2F/lazy", json={"pattern": "^lazy-by-policy", "definition": {"queue-mode": "lazy"},
                                               "apply-to": "queues"})
        declares = {key: _declare(broker, *args) for key, args in DECLARES.items()}
        used = api("GET", "/deprecated-features/used")
        document = {"recorded_from": f"RabbitMQ {release.version}, tests/data/record_upgrade_facts.py",  # as Debian numbers it
                    "policies": api("GET", "/policies").json(),
                    "deprecated_features_used": {"status": used.status_code, "body": used.json()},
                    "queues": [{"name": q["name"], "arguments": q.get("arguments")}
                               for q in api("GET", "/queues?columns=name,arguments").json()],
                    "declares": declares,
                    "policy_ha": [ha.status_code, ha.json() if ha.content else ""]}
    finally:
        broker.stop()
        broker.remove()
    return written("upgrade-facts", release, document)


def main() -> int:
    return on_the_matrix(record)


if __name__ == "__main__":
    sys.exit(main())
