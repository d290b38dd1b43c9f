"""The benchmarks' charts: a plotly figure as a PNG for the docs, drawn by Debian's chromium (no kaleido)."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import plotly.graph_objects as go


def save_png(fig: go.Figure, path: Path, width: int, height: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        html = Path(tmp) / "chart.html"
        fig.write_html(html, include_plotlyjs=True, full_html=True, config={"displayModeBar": False})
        subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", f"--screenshot={path.resolve()}",
                        f"--window-size={width},{height}", "--hide-scrollbars", "--virtual-time-budget=5000",
                        html.as_uri()], check=True, capture_output=True)
