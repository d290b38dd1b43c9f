"""`ackscope bench`: measurements on the user's broker; `confirms` compares the publisher strategies
RabbitMQ's confirms guide compares (ackscope.workloads.confirm_strategies)."""

from __future__ import annotations

import argparse
import importlib.util
import json
import time
from collections.abc import Mapping
from pathlib import Path

import pika
import pika.exceptions

from ackscope.core import amqp
from ackscope.core.config import ConfigError
from ackscope.model.confirm_bench import ConfirmBench, StrategyRate
from ackscope.workloads.confirm_strategies import QUEUE_TYPES, STRATEGIES, run_all, table_rows, write_chart


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--amqp-url", default=None, help="broker to measure (password from ACKSCOPE_AMQP_PASSWORD"
                        "[_FILE]) [env ACKSCOPE_AMQP_URL; default amqp://guest@localhost:5672/%%2F]")
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds per strategy and queue type [5]")
    parser.add_argument("--html", default="confirms.html", help="where to write the chart [confirms.html]")
    parser.add_argument("--save", metavar="FILE", default=None, help="also write the figures as JSON, for the "
                        "exporter's --confirm-bench: its findings on how publishers wait for confirms quote them")


def saved(path: str) -> ConfirmBench:
    """The figures `--save` wrote; ConfigError, in one line, where the file is unreadable or not such figures."""
    try:
        return ConfirmBench.from_json(json.loads(Path(path).read_text(encoding="utf-8")))
    except OSError as e:
        raise ConfigError(f"--confirm-bench {path}: {e.strerror}") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise ConfigError(f"--confirm-bench {path}: {e}") from None


def run(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table

    url = amqp.resolve(args.amqp_url, environ)
    display = url.display
    if args.seconds <= 0:
        raise ConfigError("--seconds must be positive")
    params = pika.URLParameters(url.url.reveal())
    params.client_properties = {"connection_name": "ackscope bench confirms"}
    console = Console(stderr=True)
    total = len(QUEUE_TYPES) * len(STRATEGIES)
    try:
        with Progress(console=console, transient=True) as bar:
            task = bar.add_task("starting", total=total)

            def progress(label: str) -> None:
                bar.update(task, description=label, completed=len(done))
                done.append(label)
            done: list[str] = []
            results = run_all(params, args.seconds, progress)
    except pika.exceptions.AMQPError as e:
        raise ConfigError(f"{display}: {amqp.describe_close(e)}") from None
    table = Table(title=f"Publisher strategies on {display}, persistent messages, {args.seconds:g} s each")
    for heading in ("strategy", "queue", "msg/s", "p50 ms", "p99 ms", "cost vs streaming"):
        table.add_column(heading, justify="left" if heading in ("strategy", "queue") else "right")
    for row in table_rows(results):
        table.add_row(*row)
    Console().print(table)
    if importlib.util.find_spec("plotly") is None:  # the dashboard extra: the exporter's image has the table
        console.print("chart not written: plotly is not installed here (pip install 'ackscope[dashboard]')")
    else:
        write_chart(results, Path(args.html))
        console.print(f"chart written to {args.html}")
    if args.save:
        figures = ConfirmBench(display, time.time(), tuple(StrategyRate(r.strategy, r.queue_type, r.rate,
                                                                        r.percentile(0.5)) for r in results))
        Path(args.save).write_text(json.dumps(figures.to_json(), indent=2) + "\n", encoding="utf-8")
        console.print(f"figures written to {args.save}")
    tx = {r.queue_type: r.rate for r in results if r.strategy == "transaction per message"}
    streaming = {r.queue_type: r.rate for r in results if r.strategy.startswith("streaming")}
    for queue_type in QUEUE_TYPES:
        if tx.get(queue_type):
            console.print(f"{queue_type}: streaming confirms publish {streaming[queue_type] / tx[queue_type]:.0f}x "
                          "as many messages per second as a transaction per message (the guide says about 250x)")
    return 0

