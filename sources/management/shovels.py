"""Pure functions from the shovel and federation plugins' management answers to the model: /api/shovels (each
shovel's state, where it runs, its endpoints and, from 4.x, what it forwarded and holds), /api/parameters/shovel
(a dynamic shovel's definition: its ack mode is said nowhere else) and /api/federation-links. Every URI loses its
password here, before it reaches a record: the broker gives a definition's URIs as they were declared."""

from __future__ import annotations

from typing import Any

from ackscope.core.amqp import without_password
from ackscope.model.snapshot import FederationLink, Shovel

from .fields import as_dict, as_int

# The broker's default where a dynamic shovel's definition says none (rabbit_shovel_parameters).
DEFAULT_ACK_MODE = "on-confirm"


class MalformedTransfers(ValueError):
    """An answer of the shovel or federation plugin that is not the shape its endpoint has."""


def _objects(raw: Any, what: str) -> list[dict]:
    if not isinstance(raw, list) or not all(isinstance(i, dict) for i in raw):
        raise MalformedTransfers(f"the {what} are not a JSON list of objects")
    return raw


def _uri(value: Any) -> str:
    """A URI or a list of them (a shovel may fail over between several), each without its password."""
    uris = value if isinstance(value, list) else [value] if value else []
    return ", ".join(without_password(str(u)) for u in uris)


def _text(value: Any) -> str | None:
    return str(value) if value not in (None, "") else None


def _state(status: dict) -> str | None:
    """A shovel's state, with its destination's flow control where it runs: 4.0 and 4.3 give that as blocked_status
    beside state "running", later releases as the state itself."""
    state, blocked = _text(status.get("state")), _text(status.get("blocked_status"))
    return blocked if state == "running" and blocked in ("flow", "blocked") else state


def definitions(raw: Any) -> dict[tuple[str, str], dict]:
    """Each dynamic shovel's definition by (vhost, name), from /api/parameters/shovel."""
    out = {}
    for p in _objects(raw, "shovel definitions"):
        out[(str(p.get("vhost", "")), str(p.get("name", "")))] = as_dict(p.get("value"))
    return out


def _from_definition(d: dict, prefix: str) -> dict:
    """A side of a definition ("src" or "dest"): its URI, protocol, queue and exchange (AMQP 1.0's address is
    given as the queue where it names one)."""
    return {"uri": _uri(d.get(f"{prefix}-uri")), "protocol": _text(d.get(f"{prefix}-protocol")),
            "queue": _text(d.get(f"{prefix}-queue")) or _text(d.get(f"{prefix}-address")),
            "exchange": _text(d.get(f"{prefix}-exchange"))}


def shovels(status: Any, defined: dict[tuple[str, str], dict] | None) -> list[Shovel]:
    """The shovels /api/shovels reports (None: not read), each with its definition where it has one, and the
    defined shovels it does not report (state None). `defined` None: the definitions were not read."""
    out, seen = [], set()
    for s in _objects(status, "shovels") if status is not None else []:
        kind = str(s.get("type", "dynamic"))
        vhost = _text(s.get("vhost")) if kind == "dynamic" else None
        name = str(s.get("name", ""))
        d = (defined or {}).get((vhost or "", name)) if kind == "dynamic" else None
        seen.add((vhost or "", name))
        src, dest = _from_definition(d or {}, "src"), _from_definition(d or {}, "dest")
        out.append(Shovel(
            name=name, type=kind, vhost=vhost, state=_state(s), node=_text(s.get("node")),
            ack_mode=(str(d.get("ack-mode") or DEFAULT_ACK_MODE) if d is not None else None),
            source_uri=_uri(s.get("src_uri")) or src["uri"],
            source_protocol=_text(s.get("src_protocol")) or src["protocol"],
            source_queue=_text(s.get("src_queue")) or _text(s.get("src_address")) or src["queue"],
            source_exchange=_text(s.get("src_exchange")) or src["exchange"],
            destination_uri=_uri(s.get("dest_uri")) or dest["uri"],
            destination_protocol=_text(s.get("dest_protocol")) or dest["protocol"],
            destination_queue=_text(s.get("dest_queue")) or _text(s.get("dest_address")) or dest["queue"],
            destination_exchange=_text(s.get("dest_exchange")) or dest["exchange"],
            forwarded=as_int(s.get("forwarded")), pending=as_int(s.get("pending")), reason=_text(s.get("reason"))))
    for (vhost, name), d in sorted((defined or {}).items()):
        if (vhost, name) in seen:
            continue
        src, dest = _from_definition(d, "src"), _from_definition(d, "dest")
        out.append(Shovel(name=name, type="dynamic", vhost=vhost, state=None,
                          ack_mode=str(d.get("ack-mode") or DEFAULT_ACK_MODE), source_uri=src["uri"],
                          source_protocol=src["protocol"], source_queue=src["queue"], source_exchange=src["exchange"],
                          destination_uri=dest["uri"], destination_protocol=dest["protocol"],
                          destination_queue=dest["queue"], destination_exchange=dest["exchange"]))
    return out


def federation_links(raw: Any) -> list[FederationLink]:
    out = []
    for f in _objects(raw, "federation links"):
        kind = str(f.get("type", ""))
        error = f.get("error")
        out.append(FederationLink(
            vhost=str(f.get("vhost", "")), upstream=str(f.get("upstream", "")), type=kind,
            local=str(f.get(kind, f.get("exchange", f.get("queue", ""))) or ""),
            upstream_name=str(f.get(f"upstream_{kind}", "") or ""), status=str(f.get("status", "")),
            uri=_uri(f.get("uri")), node=_text(f.get("node")),
            error=None if error in (None, "") else error if isinstance(error, str) else str(error),
            local_connection=_text(f.get("local_connection"))))
    return out
