"""ackscope: observability and diagnostics for RabbitMQ's delivery guarantees.

The tree, bottom to top (each layer imports only those below it; import-linter checks it):
    model       immutable records: snapshot, findings, probe statistics, Parquet schemas
    core        shared machinery: config, secrets, Parquet log, HTTP server, AMQP URLs, quantiles, durations
    parts       sources, probes, diagnosis, exporter, pipeline, dashboard, workloads (never each other)
    apps        the `ackscope` commands that assemble them
"""

# This folder is the package ackscope; imported by its own name from the repository root it would be a second
# copy, whose state is not the installed one's.
if __name__ != "ackscope":
    raise ImportError(f"{__name__} is ackscope's root: import ackscope")

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("ackscope")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"
