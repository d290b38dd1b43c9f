"""Pure functions from the stream plugin's management answers (rabbitmq_stream_management: /api/stream/consumers,
/api/stream/publishers, /api/stream/{vhost}/{stream}/tracking) to the model's stream clients and stored offsets."""

from __future__ import annotations

from typing import Any

from ackscope.model.snapshot import Connection, StoredOffset, StreamConsumer, StreamPublisher, attribution

from .fields import as_dict, as_int


class MalformedStreams(ValueError):
    """An answer of the stream plugin that is not the shape its endpoint has."""


def _objects(raw: Any, what: str) -> list[dict]:
    if not isinstance(raw, list) or not all(isinstance(i, dict) for i in raw):
        raise MalformedStreams(f"the stream {what} are not a JSON list of objects")
    return raw


def _owner(raw: dict, connections: dict[str, Connection]) -> tuple[str, str, str, str | None, str]:
    """(vhost, stream, connection, client, identity) of a stream consumer or publisher."""
    queue, conn = as_dict(raw.get("queue")), str(as_dict(raw.get("connection_details")).get("name", ""))
    client, identity = attribution(connections.get(conn), conn)
    return str(queue.get("vhost", "")), str(queue.get("name", "")), conn, client, identity


def consumers(raw: Any, connections: dict[str, Connection]) -> list[StreamConsumer]:
    out = []
    for c in _objects(raw, "consumers"):
        vhost, stream, conn, client, identity = _owner(c, connections)
        name = as_dict(c.get("properties")).get("name")
        out.append(StreamConsumer(vhost=vhost, stream=stream, connection=conn,
                                  subscription_id=as_int(c.get("subscription_id")) or 0, offset=as_int(c.get("offset")),
                                  offset_lag=as_int(c.get("offset_lag")), credits=as_int(c.get("credits")),
                                  consumed=as_int(c.get("consumed")), reference=name if isinstance(name, str) else None,
                                  client=client, identity=identity))
    return out


def publishers(raw: Any, connections: dict[str, Connection]) -> list[StreamPublisher]:
    out = []
    for p in _objects(raw, "publishers"):
        vhost, stream, conn, client, identity = _owner(p, connections)
        reference = p.get("reference")
        out.append(StreamPublisher(vhost=vhost, stream=stream, connection=conn,
                                   publisher_id=as_int(p.get("publisher_id")) or 0,
                                   reference=reference if isinstance(reference, str) and reference else None,
                                   published=as_int(p.get("published")), confirmed=as_int(p.get("confirmed")),
                                   errored=as_int(p.get("errored")), client=client, identity=identity))
    return out


def stored_offsets(vhost: str, stream: str, raw: Any) -> list[StoredOffset]:
    """The offsets stored under each reference on one stream (the tracking endpoint's "offsets")."""
    if not isinstance(raw, dict):
        raise MalformedStreams(f"the offset tracking of stream {stream!r} is not a JSON object")
    return [StoredOffset(vhost=vhost, stream=stream, reference=str(ref), offset=offset)
            for ref, offset in sorted(as_dict(raw.get("offsets")).items()) if as_int(offset) is not None]
