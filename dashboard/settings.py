"""The dashboard's settings, from the environment `ackscope dashboard` starts it with (secrets never on
Streamlit's command line)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ackscope.core.config import read_secret


@dataclass(frozen=True)
class Settings:
    exporter_url: str
    reports: str | None = None
    prometheus_url: str | None = None
    refresh: float = 10.0
    auth: tuple[str, str] | None = None

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Settings:
        user = environ.get("ACKSCOPE_WEB_USERNAME")
        password = read_secret("web_password", environ, {}, "dashboard")
        return cls(exporter_url=environ.get("ACKSCOPE_EXPORTER_URL", "http://localhost:9577"),
                   reports=environ.get("ACKSCOPE_REPORTS") or None,
                   prometheus_url=environ.get("ACKSCOPE_PROMETHEUS_URL") or None,
                   refresh=float(environ.get("ACKSCOPE_REFRESH", "10")),
                   auth=(user, password.reveal() if password else "") if user else None)
