"""`ackscope dashboard`: the Streamlit UI, in a process of its own, against an exporter."""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
from collections.abc import Mapping

from ackscope.core import config
from ackscope.core.config import Option
from ackscope.core.processes import stop_process
from ackscope.dashboard.launch import environment, streamlit_command

OPTIONS = (
    Option("exporter_url", "http://localhost:9577", config.http_url(
        "ACKSCOPE_WEB_USERNAME and ACKSCOPE_WEB_PASSWORD or ACKSCOPE_WEB_PASSWORD_FILE"),
        "the ackscope exporter whose /api/* the pages show"),
    Option("port", 8501, config.positive_int, "port of the web UI"),
    Option("address", "0.0.0.0", str, "address the web UI listens on"),
    Option("reports", None, str, "the pipeline's --out directory, for the History page"),
    Option("prometheus_url", None, str, "a Prometheus that scrapes the exporter, for longer history"),
    Option("refresh", 10.0, config.positive_float, "seconds between refreshes of the live pages"),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    config.add_arguments(parser, OPTIONS)


def run(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    values = config.resolve(OPTIONS, args, environ, {})
    print(f"ackscope dashboard: http://{'localhost' if values['address'] == '0.0.0.0' else values['address']}:"
          f"{values['port']}/ (exporter {values['exporter_url']})", file=sys.stderr)
    # SIGTERM (systemd, kill) ends this process through its finally, so Streamlit goes with it.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    proc = subprocess.Popen(streamlit_command(values["port"], values["address"]),
                            env=environment(values, environ))
    try:
        return proc.wait()
    except KeyboardInterrupt:
        return 130
    finally:
        stop_process(proc, timeout=10)
