"""The applications' own traces: OTLP requests (the exporter's /v1/traces, or the OpenTelemetry Collector's file
exporter's output under --traces-dir), their messaging spans normalised from the shapes the instrumentations write,
and each publish paired with what became of it.

decode     OTLP protobuf and JSON, by opentelemetry-proto
shapes     which messaging span a span is: pika's and aio-pika's older attributes, semconv v1.44, Celery's tasks
pairing    each publish with its deliveries: queue time, processing, duplicates, settles, unprocessed
receiver   the endpoint's answers, and every span accounted for
directory  the Collector's file exporter's files, followed
"""

from .directory import TraceDirectory
from .pairing import Pairing
from .receiver import Answer, TraceReceiver

__all__ = ["Answer", "Pairing", "TraceDirectory", "TraceReceiver"]
