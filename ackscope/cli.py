"""The `ackscope` command: one subcommand per job. Errors end in one line and an exit code, no traceback."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from . import __version__
from .config import ConfigError


def _parser() -> argparse.ArgumentParser:
    from ackscope.exporter import command as exporter

    from . import demo

    parser = argparse.ArgumentParser(prog="ackscope", description="Observability for RabbitMQ delivery guarantees.")
    parser.add_argument("--version", action="version", version=f"ackscope {__version__}")
    parser.add_argument("--log-level", default=os.environ.get("ACKSCOPE_LOG_LEVEL", "info"),
                        choices=("debug", "info", "warning", "error"), help="[env ACKSCOPE_LOG_LEVEL]")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = commands.add_parser("exporter", help="poll the management API and serve Prometheus metrics")
    p.add_argument("--config", metavar="FILE", default=os.environ.get("ACKSCOPE_CONFIG"),
                   help="TOML file; its [exporter] table holds these options [env ACKSCOPE_CONFIG]")
    exporter.add_arguments(p)
    p.set_defaults(run=exporter.run)

    p = commands.add_parser("demo", help="start a private local broker and the exporter against it")
    demo.add_arguments(p)
    p.set_defaults(run=demo.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("urllib3").setLevel(logging.ERROR)
    try:
        return args.run(args, os.environ)
    except ConfigError as e:
        print(f"ackscope {args.command}: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
