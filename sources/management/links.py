"""Pure functions from the sessions of AMQP 1.0 connections (GET /api/connections/{name}/sessions, RabbitMQ 4)
to the model's links.

The broker names links from its own side: its outgoing links deliver to the client (the client's receivers), its
incoming links take the client's transfers (the client's senders). It counts unsettled deliveries per session,
not per link. Each client also opens a link pair to "/management" (declaring queues, binding): no consumer nor
publisher, left out."""

from __future__ import annotations

from typing import Any

from ackscope.model.snapshot import Connection, Link, attribution

MANAGEMENT_ADDRESS = "/management"


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _str(v: Any) -> str:
    return v if isinstance(v, str) else ""


class MalformedSessions(ValueError):
    """A sessions answer that is not the shape the endpoint has."""


def links(connection: Connection, sessions: Any) -> list[Link]:
    """The receivers and senders of one AMQP 1.0 connection's sessions; MalformedSessions when the answer is not
    a list of session objects."""
    if not isinstance(sessions, list) or not all(isinstance(s, dict) for s in sessions):
        raise MalformedSessions(f"the sessions of {connection.name!r} are not a JSON list of objects")
    client, identity = attribution(connection, connection.connection_name)
    out: list[Link] = []
    for session in sessions:
        number = _int(session.get("channel_number"))
        if number is None:
            continue
        outgoing = [k for k in _listed(session.get("outgoing_links")) if k.get("source_address") != MANAGEMENT_ADDRESS]
        incoming = [k for k in _listed(session.get("incoming_links")) if k.get("target_address") != MANAGEMENT_ADDRESS]
        common = dict(vhost=connection.vhost, user=connection.user, connection=connection.name, session=number,
                      client=client, identity=identity)
        for k in outgoing:
            out.append(Link(**common, handle=_int(k.get("handle")) or 0, name=_str(k.get("link_name")),
                            role="receiver", address=_str(k.get("source_address")),
                            queue=_str(k.get("queue_name")) or None, settled=_bool(k.get("send_settled")),
                            credit=_int(k.get("credit")), delivery_count=_int(k.get("delivery_count")),
                            session_unsettled=_int(session.get("outgoing_unsettled_deliveries")),
                            session_receivers=len(outgoing)))
        for k in incoming:
            mode = k.get("snd_settle_mode")
            out.append(Link(**common, handle=_int(k.get("handle")) or 0, name=_str(k.get("link_name")),
                            role="sender", address=_str(k.get("target_address")), queue=None,
                            # "mixed" lets the sender choose per transfer: the broker cannot tell.
                            settled=True if mode == "settled" else False if mode == "unsettled" else None,
                            credit=_int(k.get("credit")), delivery_count=_int(k.get("delivery_count")),
                            unconfirmed=_int(k.get("unconfirmed_messages"))))
    return out


def _listed(v: Any) -> list[dict]:
    return [k for k in v if isinstance(k, dict)] if isinstance(v, list) else []


def _bool(v: Any) -> bool | None:
    return v if isinstance(v, bool) else None
