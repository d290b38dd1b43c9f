"""Synthetic probes: publishers and consumers on queues of their own that measure, end to end, what the
broker cannot report about itself: confirm latency and batching, delivery latency, nacks, returns,
redeliveries, and whether any confirmed message was lost or delivered twice.

config      the options ([probe] in TOML), the targets chosen
service     Probes: the runner, its statistics and its event log together
runner      the AMQP side (pika, one I/O loop); confirms and audit are its pure bookkeeping
statistics  counters, gauges and histograms kept as data (read as ackscope.model.probes.ProbeStats)
events      the Parquet event log the pipeline reads
"""

# This folder is ackscope.probes; imported by its own name from the repository root it would be a second copy of
# every module in it, whose classes and state are not the installed one's.
if __name__ != "ackscope.probes":
    raise ImportError(f"{__name__} is part of ackscope: import ackscope.probes")
