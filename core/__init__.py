"""Machinery every part shares, with nothing of the parts in it: configuration and secrets, the Parquet
log, the HTTP server, signals and child processes, AMQP URLs and errors, durations and quantiles."""

# This folder is ackscope.core; imported by its own name from the repository root it would be a second copy of
# every module in it, whose classes and state are not the installed one's.
if __name__ != "ackscope.core":
    raise ImportError(f"{__name__} is part of ackscope: import ackscope.core")
