"""Rendering one dashboard page in streamlit's AppTest (the real page code, no browser) against an exporter."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest


def run_page(name: str) -> None:
    from ackscope.dashboard.pages import one
    one(name)


def page(monkeypatch, name: str, url: str, **env: str) -> AppTest:
    """The page `name` rendered against the exporter at `url`, having raised no exception."""
    monkeypatch.setenv("ACKSCOPE_EXPORTER_URL", url)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    app = AppTest.from_function(run_page, args=(name,), default_timeout=30)
    app.run()
    assert not app.exception, [e.value for e in app.exception]
    return app


def frames(app: AppTest) -> list:
    return [d.value for d in app.dataframe]
