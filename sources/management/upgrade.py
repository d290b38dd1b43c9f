"""What an upgrade depends on beyond a poll's lists: the policies and operator policies (a release may refuse what
they set: classic queue mirroring's ha-* keys from 4.0), and the deprecated features the broker says are in use
(/api/deprecated-features/used, from 3.13). Small lists that change rarely, whatever the broker's statistics: read
in the background beside the polls (sources/refresh.py), every REFRESH_SECONDS."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from ackscope.core.secret import Secret
from ackscope.model.snapshot import DeprecatedFeature, Policy, Snapshot, Unread
from ackscope.model.source import FetchError

from ..refresh import Refreshed
from .client import ManagementClient
from .normalise import MalformedResponse, deprecated_feature, objects, policy

# A policy set or a deprecated feature first used shows within this long (ackscope_upgrade_blocker).
REFRESH_SECONDS = 60.0


@dataclass(frozen=True)
class UpgradeFacts:
    policies: tuple[Policy, ...] | None  # None: not read (why is in unread)
    deprecated_used: tuple[DeprecatedFeature, ...] | None  # None: not read, or a release before 3.13 keeps none
    unread: tuple[Unread, ...]

    def onto(self, s: Snapshot) -> Snapshot:
        return replace(s, policies=self.policies, deprecated_used=self.deprecated_used, unread=s.unread + self.unread)


def read(client: ManagementClient, deadline: float) -> UpgradeFacts:
    """Each list, or None where it could not be read, with why. A release before 3.13 has no list of deprecated
    features: None, and no error."""
    policies: list | None = []
    unread = []
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
    return UpgradeFacts(None if policies is None else tuple(policies), used, tuple(unread))


def reader(base_url: str, username: str, password: Secret, *, timeout: float, verify: bool | str,
           refresh_seconds: float = REFRESH_SECONDS) -> Refreshed[UpgradeFacts]:
    """The facts, read in the background through a client of their own (its thread is not the poll's)."""
    client = ManagementClient(base_url, username, password, timeout=timeout, verify=verify)
    # Each list's failure is in the facts' unread, said by the poll like any endpoint's; anything else raised is a
    # bug, said once in the log rather than costing a poll.
    return Refreshed("the policies and deprecated features", lambda: read(client, time.monotonic() + 3 * timeout),
                     refresh_seconds, (Exception,))


def _unread(endpoint: str, e: FetchError | MalformedResponse) -> Unread:
    """As a poll's unread endpoint: its message names the endpoint once."""
    return Unread(endpoint, "malformed" if isinstance(e, MalformedResponse) else e.reason, str(e))
