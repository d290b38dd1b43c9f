"""The `ackscope` command: one subcommand per job. Errors end in one line and an exit code, no traceback."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from ackscope import __version__
from ackscope.core.config import ConfigError


def _parser() -> argparse.ArgumentParser:
    # Imported here, not at the top: `ackscope --help` must not wait for Spark, Streamlit or pandas.
    from . import bench, dashboard, demo, diagnose, exporter, pipeline, probe, scenario, upgrade_check

    parser = argparse.ArgumentParser(prog="ackscope", description="Observability for RabbitMQ delivery guarantees.")
    parser.add_argument("--version", action="version", version=f"ackscope {__version__}")
    parser.add_argument("--log-level", default=os.environ.get("ACKSCOPE_LOG_LEVEL", "info"),
                        choices=("debug", "info", "warning", "error"), help="[env ACKSCOPE_LOG_LEVEL]")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    subcommands = (
        ("exporter", exporter, "poll the management API and serve Prometheus metrics"),
        ("probe", probe, "run the synthetic probes alone, with their own /metrics"),
        ("diagnose", diagnose, "one-shot report: what is wrong, who causes it, what to do (exit 0 ok, 1 warning, "
                               "2 critical, 3 unreachable)"),
        ("upgrade-check", upgrade_check, "before an upgrade: what the target release (--to) changes for each "
                                         "client (exit 2 refused or messages lost, 1 behaves differently, 0 "
                                         "nothing, 3 cannot say)"),
        ("scenario", scenario, "reproduce client failure modes on a broker (--list says which)"),
        ("pipeline", pipeline, "on Spark: probe events and exporter history → delivery audit, latency, batching "
                               "and saturation reports"),
        ("dashboard", dashboard, "the web UI for on-call diagnosis, against an exporter"),
        ("bench", None, "measure something on your broker"),
        ("demo", demo, "start a private local broker and the exporter against it"),
    )
    for name, app, help_text in subcommands:
        p = commands.add_parser(name, help=help_text)
        if app is None:  # bench: one more level, BENCH names what is measured
            p = p.add_subparsers(dest="bench", required=True, metavar="BENCH").add_parser(
                "confirms", help="publisher strategies side by side: transactions, confirms, fire-and-forget")
            app = bench
        app.add_arguments(p)
        p.set_defaults(run=app.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("urllib3").setLevel(logging.ERROR)
    logging.getLogger("py4j").setLevel(logging.WARNING)  # PySpark's bridge logs each connection it closes
    if args.log_level != "debug":
        # pika logs every failed connection attempt with its whole workflow; ackscope says it in one line.
        logging.getLogger("pika").setLevel(logging.CRITICAL)
    try:
        return args.run(args, os.environ)
    except ConfigError as e:
        print(f"ackscope {args.command}: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`ackscope scenario --list | head`): nothing left to say, and no traceback.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
