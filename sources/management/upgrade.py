"""What `ackscope upgrade-check` reads beside a poll: the policies and operator policies (a release may refuse
what they set: classic queue mirroring's ha-* keys from 4.0), and the deprecated features the broker says are in
use (/api/deprecated-features/used, from 3.13). Small lists, read once, whatever the broker's statistics."""

from __future__ import annotations

import time
from dataclasses import replace

from ackscope.core.secret import Secret
from ackscope.model.snapshot import Snapshot, Unread
from ackscope.model.source import FetchError, as_fetch_error

from .client import ManagementClient
from .normalise import MalformedResponse, deprecated_feature, objects, policy


def with_upgrade_facts(s: Snapshot, base_url: str, username: str, password: Secret, *, timeout: float = 5.0,
                       verify: bool | str = True) -> Snapshot:
    """`s` with the management API's policies and the deprecated features in use, each left None where it could
    not be read, and why listed in `unread`. A release before 3.13 has no list of deprecated features: None, and
    no error."""
    client = ManagementClient(base_url, username, password, timeout=timeout, verify=verify)
    try:
        return _read(s, client, time.monotonic() + timeout * 3)
    finally:
        client.close()


def _read(s: Snapshot, client: ManagementClient, deadline: float) -> Snapshot:
    policies: list | None = []
    unread = list(s.unread)
    for endpoint, operator in (("policies", False), ("operator-policies", True)):
        try:
            found = [policy(p, operator) for p in objects(client.fetch(endpoint, deadline), endpoint)]
            policies = None if policies is None else [*policies, *found]
        except (FetchError, MalformedResponse) as e:
            policies = None
            unread.append(_unread(endpoint, e))
    used = None
    endpoint = "deprecated-features/used"
    try:
        used = tuple(deprecated_feature(f) for f in objects(client.fetch(endpoint, deadline), endpoint))
    except FetchError as e:
        if e.status != 404:  # 404: a release before 3.13, which keeps no such list
            unread.append(_unread(endpoint, e))
    except MalformedResponse as e:
        unread.append(_unread(endpoint, e))
    return replace(s, policies=None if policies is None else tuple(policies), deprecated_used=used,
                   unread=tuple(unread))


def _unread(endpoint: str, e: Exception) -> Unread:
    error = as_fetch_error(endpoint, e) if isinstance(e, FetchError) else FetchError(endpoint, "malformed", str(e))
    return Unread(endpoint, error.reason, str(error))
