"""Per-link series of AMQP 1.0 clients: credit, what is unsettled, settle mode, transfers; and per session, the
unsettled deliveries the broker counts there."""

from __future__ import annotations

from ackscope.model.snapshot import Link, Snapshot

from .families import flag, gauge

LABELS = ("vhost", "connection", "session", "handle", "link", "role", "address", "client", "identity")
SESSION_LABELS = ("vhost", "connection", "session", "client", "identity")


def _labels(k: Link) -> tuple[str, ...]:
    return (k.vhost, k.connection, str(k.session), str(k.handle), k.name, k.role, k.address, k.client or "",
            k.identity)


def _session_labels(k: Link) -> tuple[str, ...]:
    return (k.vhost, k.connection, str(k.session), k.client or "", k.identity)


class LinkCollector:
    def __init__(self, snapshot: Snapshot):
        self._snapshot = snapshot

    def collect(self):
        links = self._snapshot.links
        receivers = [k for k in links if k.role == "receiver"]
        senders = [k for k in links if k.role == "sender"]
        yield gauge("ackscope_link_credit", "Credit an AMQP 1.0 link holds, as the broker sees it: what it may still "
                    "transfer. A receiver that grants credit as transfers arrive is not bounded by it.", LABELS,
                    links, _labels, lambda k: k.credit)
        yield gauge("ackscope_link_delivery_count", "Transfers on an AMQP 1.0 link so far (its delivery-count, a "
                    "sequence number that wraps at 2^32).", LABELS, links, _labels, lambda k: k.delivery_count)
        yield gauge("ackscope_link_presettled", "1 when the link settles before anything is known: a receiver's "
                    "at-most-once deliveries, a sender publishing with no outcome (no confirm).", LABELS, links,
                    _labels, lambda k: flag(k.settled))
        yield gauge("ackscope_link_unsettled_deliveries", "Deliveries sent on an AMQP 1.0 receiver and not yet "
                    "settled by the client, where it is its session's only receiver (the broker counts them per "
                    "session).", LABELS, receivers, _labels, lambda k: k.unsettled)
        yield gauge("ackscope_link_unconfirmed_messages", "Messages an AMQP 1.0 sender transferred that the broker "
                    "has not settled yet (the unconfirmed publishes of AMQP 0-9-1).", LABELS, senders, _labels,
                    lambda k: k.unconfirmed)
        # One row per session: the first receiver of each carries its count.
        sessions = {(k.connection, k.session): k for k in reversed(receivers)}
        yield gauge("ackscope_session_unsettled_deliveries", "Deliveries an AMQP 1.0 session sent and the client has "
                    "not settled yet, all its receivers together.", SESSION_LABELS, sessions.values(),
                    _session_labels, lambda k: k.session_unsettled)
