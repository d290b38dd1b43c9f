"""The applications' own messages, from their OpenTelemetry spans (/v1/traces, --traces-dir): per destination (as
the spans name it) and publishing service, how long messages waited before their first delivery, how long their
processing took, and which were duplicated, settled, or never processed; and every span accounted for."""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.utils import floatToGoString

from ackscope.model.traces import GONE, UNPLACED, WAITING, TraceWindow

FLOW = ("destination", "service")


class TraceCollector:
    def __init__(self, window: TraceWindow | None):
        self._window = window

    def collect(self):
        w = self._window
        if w is None:
            return
        yield from _flows(w)
        yield from _intake(w)


def _flows(w: TraceWindow):
    for attribute, name, doc in (
            ("queue_time", "ackscope_trace_queue_time_seconds", "Seconds from a message's publish span's start to "
             "its first delivery span's start, by destination and publishing service (deliveries that started "
             "before their publish by the hosts' clocks are counted in ackscope_trace_clock_skewed_total instead)."),
            ("processing", "ackscope_trace_processing_seconds", "Seconds a delivery's processing took: the process "
             "span (v1.44), the receive span around the callback (pika, aio-pika), the task's run (Celery).")):
        family = HistogramMetricFamily(name, doc, labels=FLOW)
        for f in w.flows:
            h = getattr(f, attribute)
            family.add_metric([f.destination, f.service], [(floatToGoString(le), n) for le, n in h.buckets], h.sum)
        yield family
    for attribute, name, doc in (
            ("published", "ackscope_trace_published", "Messages published (one per message: pika's nested send "
             "spans count once)."),
            ("publish_errors", "ackscope_trace_publish_errors", "Publish spans that ended in an error."),
            ("delivered", "ackscope_trace_delivered", "Messages delivered at least once (their first delivery)."),
            ("duplicates", "ackscope_trace_duplicate_deliveries", "Deliveries of a message beyond the first to the "
             "same consuming service (a copy to another service is fan-out, not a duplicate)."),
            ("redelivered", "ackscope_trace_redeliveries", "Of the duplicate deliveries, those whose span says the "
             "broker redelivered them (Celery's delivery_info; the pika and aio-pika spans do not say)."),
            ("went_unprocessed", "ackscope_trace_unprocessed", "Messages that reached the deadline with no "
             "delivery, since the start: a late delivery does not take one back, and one forgotten stays counted "
             "(ackscope_trace_unprocessed_messages is what is outstanding now).")):
        family = CounterMetricFamily(name, doc, labels=FLOW)
        for f in w.flows:
            family.add_metric([f.destination, f.service], getattr(f, attribute))
        yield family
    settled = CounterMetricFamily("ackscope_trace_settled", "Deliveries settled, by outcome (ack, nack, reject; "
                                  "from v1.44 settle spans).", labels=FLOW + ("outcome",))
    skewed = CounterMetricFamily("ackscope_trace_clock_skewed", "Deliveries that started before their publish by "
                                 "the two hosts' clocks: the clocks of the publishing and the consuming service "
                                 "disagree. Kept out of the queue time.", labels=FLOW + ("consumer",))
    unprocessed = GaugeMetricFamily(
        "ackscope_trace_unprocessed_messages", "Messages published with no delivery within the deadline, "
        "outstanding now (each is forgotten 60 s past its deadline; ackscope_trace_unprocessed_total keeps the "
        "count), by the broker's view of their queue: waiting (the queue holds at least that many), gone (more than the queue "
        "holds), unplaced (the spans name no queue, the sampling does not keep pairs whole, or no delivery of the "
        "destination was ever traced).", labels=FLOW + ("state",))
    oldest = GaugeMetricFamily("ackscope_trace_unprocessed_oldest_seconds", "Age of the oldest unprocessed "
                               "message.", labels=FLOW)
    for f in w.flows:
        for outcome, n in sorted(f.settled.items()):
            settled.add_metric([f.destination, f.service, outcome], n)
        for consumer, n in sorted(f.skewed.items()):
            skewed.add_metric([f.destination, f.service, consumer], n)
        for state in (WAITING, GONE, UNPLACED):
            unprocessed.add_metric([f.destination, f.service, state], f.unprocessed.get(state, 0))
        if f.unprocessed:
            oldest.add_metric([f.destination, f.service], f.oldest_unprocessed_s)
    yield from (settled, skewed, unprocessed, oldest)


def _intake(w: TraceWindow):
    spans = CounterMetricFamily("ackscope_trace_spans_received", "Spans received, by shape: older (pika, "
                                "aio-pika), semconv (v1.44), celery, other (no messaging span).", labels=("shape",))
    for shape, n in sorted(w.spans.items()):
        spans.add_metric([shape], n)
    yield spans
    orphans = CounterMetricFamily("ackscope_trace_orphan_deliveries", "Deliveries whose publish span never came "
                                  "though their trace context names one (sampled apart, or sent elsewhere): while "
                                  "any are seen, unprocessed messages are not placed.", labels=("consumer",))
    for consumer, n in sorted(w.orphans.items()):
        orphans.add_metric([consumer], n)
    yield orphans
    for name, doc, value in (
            ("ackscope_trace_spans_not_understood", "RabbitMQ messaging spans of no known shape: counted, not "
             "paired (ackscope's log says the first).", w.not_understood),
            ("ackscope_trace_spans_dropped", "Spans not kept because the exporter held as many messages as it may "
             "(--max-trace-messages).", w.dropped),
            ("ackscope_trace_spans_repeated", "Spans received again (a Collector's retried batch): counted once.",
             w.repeated),
            ("ackscope_trace_unrooted_deliveries", "Deliveries with no trace context: their publisher is not "
             "instrumented, or the context was not passed on in the message's headers.", w.unrooted),
            ("ackscope_trace_requests_rejected", "Requests to /v1/traces refused: malformed, too large, or of "
             "another content type.", w.rejected_requests)):
        yield CounterMetricFamily(name, doc, value=value)
    yield GaugeMetricFamily("ackscope_trace_unprocessed_known", "1 while the sampling keeps pairs whole (no "
                            "orphan deliveries among the messages held), so that a publish without a delivery is "
                            "unprocessed; 0 otherwise.",
                            value=int(w.unprocessed_known))
