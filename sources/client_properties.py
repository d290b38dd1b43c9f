"""What a client says about itself in AMQP's client_properties, read the same way from the management API
and the broker's CLI. Clients differ: py-amqp sends `product_version` where the others send `version`, and
amqp-tools send no connection name (docs/clients.md lists what each sends)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def _text(v: Any) -> str | None:
    return v.strip() or None if isinstance(v, str) else None


def client(props: Mapping[str, Any]) -> str | None:
    """The client library and its version, e.g. "py-amqp 5.4.2"; None when it names neither."""
    version = _text(props.get("version")) or _text(props.get("product_version"))
    return " ".join(p for p in (_text(props.get("product")), version) if p) or None


def platform(props: Mapping[str, Any]) -> str | None:
    return _text(props.get("platform"))


def connection_name(props: Mapping[str, Any]) -> str:
    return _text(props.get("connection_name")) or ""
