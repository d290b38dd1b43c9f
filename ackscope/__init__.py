"""ackscope: observability and diagnostics for RabbitMQ's delivery guarantees."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("ackscope")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"
