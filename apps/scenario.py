"""`ackscope scenario NAME…`: run client failure scenarios on a broker until Ctrl-C or --duration."""

from __future__ import annotations

import argparse
from collections.abc import Mapping

from ackscope.core import amqp
from ackscope.core.config import ConfigError
from ackscope.workloads.scenarios import BY_NAME, SCENARIOS, Running


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("names", nargs="*", metavar="NAME", help="scenarios to run (see --list)")
    parser.add_argument("--list", action="store_true", help="say what each scenario does")
    parser.add_argument("--amqp-url", help="broker to run them on (password from ACKSCOPE_AMQP_PASSWORD[_FILE]) "
                        f"[env ACKSCOPE_AMQP_URL; default {amqp.DEFAULT_URL.replace('%', '%%')}]")
    parser.add_argument("--duration", type=float, help="stop after this many seconds [until Ctrl-C]")


def run(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    if args.list or not args.names:
        width = max(len(s.name) for s in SCENARIOS)
        for s in SCENARIOS:
            print(f"{s.name:<{width}}  {s.description}" + (f"  [rule {s.rule}]" if s.rule and s.rule != s.name
                                                            else ""))
        return 0
    unknown = [n for n in args.names if n not in BY_NAME]
    if unknown:
        raise ConfigError(f"unknown scenario {unknown[0]!r}: 'ackscope scenario --list' names them")
    url = amqp.resolve(args.amqp_url, environ)
    running = Running([BY_NAME[n] for n in args.names], url.url).start()
    print(f"running {', '.join(args.names)} on {url.display}; Ctrl-C stops", flush=True)
    try:
        running.stop_event.wait(args.duration)
    except KeyboardInterrupt:
        pass
    finally:
        running.stop()
    if running.errors:
        for name, error in running.errors.items():
            print(f"scenario {name}: {error}")
        return 1
    return 0
