"""Synthetic probes: publishers and consumers on queues of their own that measure, end to end, what the
broker cannot report about itself: confirm latency and batching, delivery latency, nacks, returns,
redeliveries, and whether any confirmed message was lost or delivered twice."""
