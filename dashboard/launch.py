"""How the dashboard's Streamlit server is started: its command line and its environment (the settings
travel in the environment, so no secret is on a command line)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

APP = Path(__file__).with_name("app.py")


def streamlit_command(port: int, address: str) -> list[str]:
    """Headless, no usage statistics, no error details on pages, no watching of source files; Streamlit's command
    line run by dashboard/server.py, which imports the pages first.

    Streamlit watches the app's sources for edits: each new browser session, once its first run has ended, walks
    every module loaded (pandas, plotly, pyarrow: thousands) for files to watch, on the server's event loop. The
    dashboard is an installed tool whose sources change only with an upgrade, which restarts it. Not watching took
    0.6 s off every load of an empty page, 0.1-0.34 s off the landing page's (docs/benchmarks.md, run 7)."""
    return [sys.executable, "-m", "ackscope.dashboard.server", "run", str(APP), "--server.port", str(port),
            "--server.address", address, "--server.headless", "true", "--server.fileWatcherType", "none",
            "--browser.gatherUsageStats", "false", "--client.showErrorDetails", "none", "--client.toolbarMode",
            "viewer", "--theme.base", "light"]


def environment(values: Mapping, environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` with the dashboard's settings (exporters, refresh, reports, prometheus_url) added."""
    env = dict(environ)
    env["ACKSCOPE_EXPORTERS"] = "".join(f"{e.name} {e.url}\n" for e in values["exporters"])
    env["ACKSCOPE_REFRESH"] = str(values["refresh"])
    for key in ("reports", "prometheus_url"):
        if values[key]:
            env[f"ACKSCOPE_{key.upper()}"] = values[key]
    return env
