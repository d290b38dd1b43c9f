"""Pure functions from the sessions of AMQP 1.0 connections (GET /api/connections/{name}/sessions, RabbitMQ 4)
to the model's links.

The broker names links from its own side: its outgoing links deliver to the client (the client's receivers), its
incoming links take the client's transfers (the client's senders). It counts unsettled deliveries per session,
not per link. Each client also opens a link pair to "/management" (declaring queues, binding): no consumer nor
publisher, left out."""

from __future__ import annotations

from typing import Any

from ackscope.model.snapshot import Connection, Link, attribution

from .fields import as_bool, as_int, as_str

MANAGEMENT_ADDRESS = "/management"


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
        number = as_int(session.get("channel_number"))
        if number is None:
            continue
        outgoing = [k for k in _listed(session.get("outgoing_links")) if k.get("source_address") != MANAGEMENT_ADDRESS]
        incoming = [k for k in _listed(session.get("incoming_links")) if k.get("target_address") != MANAGEMENT_ADDRESS]
        common = dict(vhost=connection.vhost, user=connection.user, connection=connection.name, session=number,
                      client=client, identity=identity)
        for k in outgoing:
            out.append(Link(**common, handle=as_int(k.get("handle")) or 0, name=as_str(k.get("link_name")) or "",
                            role="receiver", address=as_str(k.get("source_address")) or "",
                            queue=as_str(k.get("queue_name")) or None, settled=as_bool(k.get("send_settled")),
                            credit=as_int(k.get("credit")), delivery_count=as_int(k.get("delivery_count")),
                            session_unsettled=as_int(session.get("outgoing_unsettled_deliveries")),
                            session_receivers=len(outgoing)))
        for k in incoming:
            mode = k.get("snd_settle_mode")
            out.append(Link(**common, handle=as_int(k.get("handle")) or 0, name=as_str(k.get("link_name")) or "",
                            role="sender", address=as_str(k.get("target_address")) or "", queue=None,
                            # "mixed" lets the sender choose per transfer: the broker cannot tell.
                            settled=True if mode == "settled" else False if mode == "unsettled" else None,
                            credit=as_int(k.get("credit")), delivery_count=as_int(k.get("delivery_count")),
                            unconfirmed=as_int(k.get("unconfirmed_messages"))))
    return out


def _listed(v: Any) -> list[dict]:
    return [k for k in v if isinstance(k, dict)] if isinstance(v, list) else []
