"""`ackscope dashboard`: the Streamlit UI against one exporter or several (a broker each). The command becomes the
Streamlit server (exec): one process, which a signal or a kill ends whole."""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from ackscope.core import config
from ackscope.core.config import ConfigError, Option
from ackscope.dashboard.launch import environment, streamlit_command
from ackscope.dashboard.settings import DEFAULT_URL, Exporter, listed, named

_URL = config.http_url("ACKSCOPE_WEB_USERNAME and ACKSCOPE_WEB_PASSWORD or ACKSCOPE_WEB_PASSWORD_FILE")
OPTIONS = (
    Option("port", 8501, config.positive_int, "port of the web UI"),
    Option("address", "0.0.0.0", str, "address the web UI listens on"),
    Option("reports", None, str, "the pipeline's --out directory, for the History page"),
    Option("prometheus_url", None, str, "a Prometheus that scrapes the exporter, for longer history"),
    Option("refresh", 10.0, config.positive_float, "seconds between refreshes of the live pages"),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--exporter-url", dest="exporter_url", action="append", metavar="[NAME=]URL",
                        help="an ackscope exporter whose /api/* the pages show; repeated for several brokers, each "
                        f"named (prod-eu=https://...) [env ACKSCOPE_EXPORTER_URL; default {DEFAULT_URL}]")
    parser.add_argument("--exporters", metavar="FILE", help="a file of exporters, a line each: NAME URL "
                        "[env ACKSCOPE_EXPORTERS_FILE]")
    config.add_arguments(parser, OPTIONS)


def exporters(args: argparse.Namespace, environ: Mapping[str, str]) -> tuple[Exporter, ...]:
    """The exporters given: --exporter-url (repeated) and --exporters' file, else ACKSCOPE_EXPORTER_URL or
    ACKSCOPE_EXPORTERS_FILE, else the default; each URL checked, each name once."""
    path = args.exporters or (None if args.exporter_url else environ.get("ACKSCOPE_EXPORTERS_FILE"))
    given = [named(u) for u in args.exporter_url or ()]
    if path:
        try:
            given += listed(Path(path).read_text(encoding="utf-8"))
        except OSError as e:
            raise ConfigError(f"--exporters: cannot read {path}: {e.strerror}") from None
    if not given:
        given = [named(environ.get("ACKSCOPE_EXPORTER_URL") or DEFAULT_URL)]
    seen: set[str] = set()
    for e in given:
        try:
            _URL(e.url)
        except ValueError as error:
            raise ConfigError(f"--exporter-url: {error}") from None
        if not e.name or any(c.isspace() or c == "#" for c in e.name):
            raise ConfigError(f"--exporter-url: a broker's name is one word without '#', not {e.name!r}")
        if e.name in seen:
            raise ConfigError(f"--exporter-url: the name {e.name!r} is given twice")
        seen.add(e.name)
    return tuple(given)


def run(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    values = {**config.resolve(OPTIONS, args, environ, {}), "exporters": exporters(args, environ)}
    missing = [m for m in ("streamlit", "pandas", "plotly") if importlib.util.find_spec(m) is None]
    if missing:
        # The dashboard extra: the exporter's install and image do without it.
        print(f"ackscope dashboard: {', '.join(missing)} not installed here: pip install 'ackscope[dashboard]', or "
              "run the ackscope-dashboard image", file=sys.stderr)
        return 2
    print(f"ackscope dashboard: http://{'localhost' if values['address'] == '0.0.0.0' else values['address']}:"
          f"{values['port']}/ (exporter " + ", ".join(e.url if len(values["exporters"]) == 1 else f"{e.name} {e.url}"
                                                     for e in values["exporters"]) + ")", file=sys.stderr)
    sys.stderr.flush()
    # Replaced, not a parent: a server started as a child outlived this process when it was killed (SIGKILL, the
    # OOM killer), kept the port, and the next start failed on it.
    command = streamlit_command(values["port"], values["address"])
    os.execve(command[0], command, environment(values, environ))
