"""What a client says about itself in AMQP's client_properties, read the same way from the management API
and the broker's CLI. Clients differ: py-amqp sends `product_version` where the others send `version`, and
amqp-tools send no connection name (docs/clients.md lists what each sends).

A connection's name is not among them: it is the name the broker took, its `user_provided_name`, which the
broker takes from `connection_name` only when that is a long string. A client that sends it void (the
management API then shows "undefined"), or as a number, gave no name (measured on 3.10 and 4.3)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def _text(v: Any) -> str | None:
    return v.strip() or None if isinstance(v, str) else None


def client(props: Mapping[str, Any]) -> str | None:
    """The client library and its version, e.g. "py-amqp 5.4.2"; None when it names neither."""
    version = _text(props.get("version")) or _text(props.get("product_version"))
    return " ".join(p for p in (_text(props.get("product")), version) if p) or None


def platform(props: Mapping[str, Any]) -> str | None:
    return _text(props.get("platform"))


def given_name(typed: Iterable[Any]) -> str:
    """The name the broker takes from client_properties as the CLI lists them, typed ([[key, type, value]]): the
    `connection_name` that is a long string, else "" (no name)."""
    return next((_text(p[2]) or "" for p in typed if isinstance(p, list) and len(p) == 3
                 and p[0] == "connection_name" and p[1] == "longstr"), "")
