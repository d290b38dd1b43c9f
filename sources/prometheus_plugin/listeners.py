"""Where each node's Prometheus plugin listens, as the broker says: /api/overview's `listeners`, one per node and
protocol, with `http/prometheus` (or `https/prometheus`) for the plugin. Port 15692 is only the fallback for a
broker that lists none (the plugin off, or an API too old to list it)."""

from __future__ import annotations

from ipaddress import ip_address
from typing import Any
from urllib.parse import urlsplit, urlunsplit

DEFAULT_PORT = 15692
PROTOCOLS = {"http/prometheus": "http", "https/prometheus": "https"}
MANAGEMENT = {"http": "http", "https": "https"}  # each node's management API, where a node's own view is asked


def default_url(management_url: str) -> str:
    """The plugin's default place: the management host, port 15692, the same scheme."""
    parts = urlsplit(management_url)
    return urlunsplit((parts.scheme or "http", _netloc(parts.hostname or "localhost", DEFAULT_PORT), "", "", ""))


def plugin_urls(overview: Any, management_url: str, protocols: dict[str, str] = PROTOCOLS) -> dict[str, str]:
    """{node name: its plugin's URL} for every node whose plugin listener the overview lists (or, given
    `protocols` MANAGEMENT, its management API's). The node that answered the management API is reached at the
    management URL's host; another at the address its listener is bound to, or, bound to every address, at its node
    name's host (rabbit@host)."""
    if not isinstance(overview, dict) or not isinstance(overview.get("listeners"), list):
        return {}
    answering = overview.get("node")
    management_host = urlsplit(management_url).hostname or "localhost"
    urls = {}
    for listener in overview["listeners"]:
        if not isinstance(listener, dict) or listener.get("protocol") not in protocols:
            continue
        node, port = listener.get("node"), listener.get("port")
        if not isinstance(node, str) or not isinstance(port, int) or isinstance(port, bool):
            continue
        # 3.10 lists a listener bound to one address as '::' with the address in its socket options.
        bound = [a for a in (_dict(listener.get("socket_opts")).get("ip"), listener.get("ip_address")) if _specific(a)]
        if node == answering:
            host = management_host
        elif bound:
            host = bound[0]
        else:
            host = node.partition("@")[2] or management_host
        urls[node] = urlunsplit((protocols[listener["protocol"]], _netloc(host, port), "", "", ""))
    return urls


def _dict(v: Any) -> dict:
    return v if isinstance(v, dict) else {}


def _specific(address: Any) -> bool:
    """Whether a listener's address is one host's, not the wildcard every interface listens on."""
    try:
        return isinstance(address, str) and not ip_address(address).is_unspecified
    except ValueError:
        return False


def _netloc(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
