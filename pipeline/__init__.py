"""The data pipeline on Apache Spark: probe events and snapshot history → delivery audit, latency
percentiles, confirm batching, prefetch saturation, redelivery hot spots and publisher safety."""
