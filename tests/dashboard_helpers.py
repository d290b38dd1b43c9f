"""Rendering one dashboard page in streamlit's AppTest (the real page code, no browser) against an exporter."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import requests
from helpers import wait_for
from streamlit.testing.v1 import AppTest

from ackscope.core.processes import stop_process
from ackscope.workloads.ports import free_port


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


ARTIFACTS = Path(os.environ.get("ACKSCOPE_TEST_ARTIFACTS", Path(__file__).resolve().parent.parent / "test-artifacts"))
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]
# How long a browser test waits for a page's part. Generous: on a loaded CI machine (4 workers, 2 cores, load
# 14) a page took more than 30 s, and on a slower day its first chart more than 60 s (the browser then took more
# than 10 s to draw a screenshot); a timeout then says what the page showed instead (seen, below).
SHOWN_WITHIN_MS = 120_000


def seen(tab, locator, what: str, timeout_ms: int = SHOWN_WITHIN_MS) -> None:
    """Wait for `locator` on the Playwright page `tab`; failing that, fail with what the page showed (its text,
    and a screenshot in ARTIFACTS) rather than a selector's name alone."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    try:
        locator.wait_for(timeout=timeout_ms)
    except PlaywrightTimeout:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shot = ARTIFACTS / f"not-seen-{what.replace(' ', '-')[:40]}.png"
        # A browser that did not draw the part may not draw a screenshot either (seen under load): the failure
        # says what was not shown whether or not the picture was taken.
        try:
            tab.screenshot(path=str(shot), full_page=True, timeout=10_000)
        except PlaywrightTimeout:
            shot = "no screenshot: the browser took more than 10 s to draw one"
        raise AssertionError(f"{what} not shown within {timeout_ms / 1000:g} s; the page ({shot}) said:\n"
                             + tab.inner_text("body", timeout=10_000)[:3000]) from None


@contextmanager
def dashboard(*exporter_urls: str, refresh: float = 5.0, **env: str) -> Iterator[str]:
    """`ackscope dashboard` in a process of its own, an --exporter-url each ([NAME=]URL), redrawing its live
    pages every `refresh` seconds, `env` added to its environment; yields its URL once it answers."""
    port = free_port()
    given = [arg for url in exporter_urls for arg in ("--exporter-url", url)]
    proc = subprocess.Popen([str(Path(sys.executable).with_name("ackscope")), "dashboard", *given,
                             "--port", str(port), "--address", "127.0.0.1", "--refresh", str(refresh)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **env})
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: answers(f"{url}/_stcore/health") or proc.poll() is not None, timeout=60,
                 what="the dashboard's health endpoint")
        assert proc.poll() is None, proc.stderr.read()
        yield url
    finally:
        stop_process(proc, 15, signal.SIGINT)


def answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=2).status_code == 200
    except requests.RequestException:
        return False
