"""The data pipeline on Apache Spark: probe events and snapshot history → delivery audit, latency
percentiles, confirm batching, prefetch saturation, redelivery hot spots and publisher safety."""

# This folder is ackscope.pipeline; imported by its own name from the repository root it would be a second copy of
# every module in it, whose classes and state are not the installed one's.
if __name__ != "ackscope.pipeline":
    raise ImportError(f"{__name__} is part of ackscope: import ackscope.pipeline")
