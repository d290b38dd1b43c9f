"""Per-link series of federation: each link from an upstream to a federated exchange or queue here, and its
status as the broker says (the error itself is in /api/findings and /api/snapshot, not a label)."""

from __future__ import annotations

from ackscope.model.snapshot import FederationLink, Snapshot

from .families import gauge

LABELS = ("vhost", "upstream", "type", "local")


def _labels(k: FederationLink) -> tuple[str, ...]:
    return k.vhost, k.upstream, k.type, k.local


class FederationCollector:
    def __init__(self, snapshot: Snapshot):
        self._links = snapshot.federation_links

    def collect(self):
        links = self._links
        yield gauge("ackscope_federation_link_info", "A federation link: from upstream (its name) to the federated "
                    "exchange or queue `local`, consuming upstream_name there through uri (without its password). "
                    "Always 1.", (*LABELS, "upstream_name", "uri", "node"), links,
                    lambda k: (*_labels(k), k.upstream_name, k.uri, k.node or ""), lambda k: 1)
        yield gauge("ackscope_federation_link_state", "1 for the link's status as the broker says: running, "
                    "starting, error, shutdown.", (*LABELS, "state"), links, lambda k: (*_labels(k), k.status),
                    lambda k: 1)
