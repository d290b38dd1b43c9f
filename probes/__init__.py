"""Synthetic probes: publishers and consumers on queues of their own that measure, end to end, what the
broker cannot report about itself: confirm latency and batching, delivery latency, nacks, returns,
redeliveries, and whether any confirmed message was lost or delivered twice.

config      the options ([probe] in TOML), the targets chosen
service     Probes: the runner, its statistics and its event log together
runner      the AMQP side (pika, one I/O loop); confirms and audit are its pure bookkeeping
statistics  counters, gauges and histograms kept as data (read as ackscope.model.probes.ProbeStats)
events      the Parquet event log the pipeline reads
"""
