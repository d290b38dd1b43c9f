"""The dashboard's settings, from the environment `ackscope dashboard` starts it with (secrets never on
Streamlit's command line)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from ackscope.core.config import read_secret

DEFAULT_URL = "http://localhost:9577"


@dataclass(frozen=True)
class Exporter:
    """One broker's exporter, and the name the pages give its broker (`prod-eu`)."""
    name: str
    url: str


def named(given: str) -> Exporter:
    """`NAME=URL`, or a URL alone, named by its host and port."""
    name, sep, url = given.partition("=")
    if not sep or "://" in name:
        url = given
        parts = urlsplit(url)
        name = parts.netloc or url
    return Exporter(name.strip(), url.strip())


def listed(text: str) -> tuple[Exporter, ...]:
    """The exporters of a list: a line each, `NAME URL` (or a URL alone); blank lines and # comments skipped.
    The format of --exporters' file and of ACKSCOPE_EXPORTERS."""
    out = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            fields = line.split()
            out.append(named(fields[0] if len(fields) == 1 else f"{fields[0]}={fields[1]}"))
    return tuple(out)


@dataclass(frozen=True)
class Settings:
    exporters: tuple[Exporter, ...]
    reports: str | None = None
    prometheus_url: str | None = None
    refresh: float = 10.0
    auth: tuple[str, str] | None = None

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Settings:
        user = environ.get("ACKSCOPE_WEB_USERNAME")
        password = read_secret("web_password", environ, {}, "dashboard")
        exporters = (listed(environ["ACKSCOPE_EXPORTERS"]) if environ.get("ACKSCOPE_EXPORTERS") else
                     (named(environ.get("ACKSCOPE_EXPORTER_URL") or DEFAULT_URL),))
        return cls(exporters=exporters,
                   reports=environ.get("ACKSCOPE_REPORTS") or None,
                   prometheus_url=environ.get("ACKSCOPE_PROMETHEUS_URL") or None,
                   refresh=float(environ.get("ACKSCOPE_REFRESH", "10")),
                   auth=(user, password.reveal() if password else "") if user else None)
