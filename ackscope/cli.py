"""The `ackscope` command: one subcommand per job. Errors end in one line and an exit code, no traceback."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from . import __version__
from . import config
from .config import ConfigError


def _parser() -> argparse.ArgumentParser:
    from ackscope.diagnosis import command as diagnose
    from ackscope.diagnosis import scenarios
    from ackscope.dashboard import command as dashboard
    from ackscope.exporter import command as exporter
    from ackscope.pipeline import command as pipeline
    from ackscope.probes import command as probes
    from ackscope.probes import confirm_strategies

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

    p = commands.add_parser("probe", help="run the synthetic probes alone, with their own /metrics")
    p.add_argument("--config", metavar="FILE", default=os.environ.get("ACKSCOPE_CONFIG"),
                   help="TOML file; its [probe] table holds these options [env ACKSCOPE_CONFIG]")
    p.add_argument("--listen", metavar="HOST:PORT", help=f"address of /metrics [env ACKSCOPE_LISTEN; default "
                   f"0.0.0.0:{probes.DEFAULT_PORT}]")
    probes.add_arguments(p)
    config.add_arguments(p, (probes.DATA_DIR,))
    p.set_defaults(run=probes.run)

    p = commands.add_parser("diagnose", help="one-shot report: what is wrong, who causes it, what to do "
                            "(exit 0 ok, 1 warning, 2 critical, 3 unreachable)")
    diagnose.add_arguments(p)
    p.set_defaults(run=diagnose.run)

    p = commands.add_parser("scenario", help="reproduce client failure modes on a broker (--list says which)")
    scenarios.add_arguments(p)
    p.set_defaults(run=scenarios.run)

    p = commands.add_parser("pipeline", help="on Spark: probe events and exporter history → delivery audit, "
                            "latency, batching and saturation reports")
    pipeline.add_arguments(p)
    p.set_defaults(run=pipeline.run)

    p = commands.add_parser("dashboard", help="the web UI for on-call diagnosis, against an exporter")
    dashboard.add_arguments(p)
    p.set_defaults(run=dashboard.run)

    p = commands.add_parser("bench", help="measure something on your broker")
    benches = p.add_subparsers(dest="bench", required=True, metavar="BENCH")
    b = benches.add_parser("confirms", help="publisher strategies side by side: transactions, confirms, "
                           "fire-and-forget")
    confirm_strategies.add_arguments(b)
    b.set_defaults(run=confirm_strategies.run)

    p = commands.add_parser("demo", help="start a private local broker and the exporter against it")
    demo.add_arguments(p)
    p.set_defaults(run=demo.run)
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
