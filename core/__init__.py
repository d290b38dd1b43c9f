"""Machinery every part shares, with nothing of the parts in it: configuration and secrets, the Parquet
log, the HTTP server, signals and child processes, AMQP URLs and errors, durations and quantiles."""
