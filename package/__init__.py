"""ackscope: observability and diagnostics for RabbitMQ's delivery guarantees.

The tree, bottom to top (each layer imports only those below it; import-linter checks it):
    model       immutable records: snapshot, findings, probe statistics, Parquet schemas
    core        shared machinery: config, secrets, Parquet log, HTTP server, AMQP URLs, quantiles, durations
    parts       sources, probes, diagnosis, exporter, pipeline, dashboard, workloads (never each other)
    apps        the `ackscope` commands that assemble them
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("ackscope")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"
