"""The traces source on small inputs: OTLP decoded (protobuf and JSON), the three span shapes normalised, publishes
paired with their deliveries, and every bad request answered in a line with nothing lost. The real clients'
spans are in test_traces_clients.py."""

from __future__ import annotations

import base64
import gzip
import json
import os
import signal
import time

import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from ackscope.apps.exporter_traces import TraceEndpoint, TraceSettings
from ackscope.model.traces import CELERY, GONE, OLDER, PROCESS, PUBLISH, SEMCONV, SETTLE, UNPLACED
from ackscope.sources.traces import Pairing, TraceReceiver
from ackscope.sources.traces.decode import decode
from ackscope.sources.traces.shapes import NotUnderstood, normalise
from helpers import wait_for

pytestmark = pytest.mark.unit

TRACE = bytes.fromhex("5b8efff798038103d269b633813fc60c")
PRODUCER, CONSUMER, INTERNAL = 4, 5, 1
T0 = 1_700_000_000.0


def _id(n: int) -> bytes:
    return n.to_bytes(8, "big")


def span(n: int, name: str, kind: int, start: float, end: float | None = None, parent: int | None = None,
         links: tuple[int, ...] = (), error: bool = False, **attrs) -> Span:
    s = Span(trace_id=TRACE, span_id=_id(n), name=name, kind=kind, start_time_unix_nano=int(start * 1e9),
             end_time_unix_nano=int((end if end is not None else start + 0.001) * 1e9))
    if parent is not None:
        s.parent_span_id = _id(parent)
    for link in links:
        s.links.add(trace_id=TRACE, span_id=_id(link))
    if error:
        s.status.code = 2
    for key, value in attrs.items():
        key = key.replace("__", ".")
        if isinstance(value, bool):
            s.attributes.append(KeyValue(key=key, value=AnyValue(bool_value=value)))
        elif isinstance(value, int):
            s.attributes.append(KeyValue(key=key, value=AnyValue(int_value=value)))
        else:
            s.attributes.append(KeyValue(key=key, value=AnyValue(string_value=value)))
    return s


def request(by_service: dict[str, list[Span]]) -> ExportTraceServiceRequest:
    r = ExportTraceServiceRequest()
    for service, spans in by_service.items():
        rs = r.resource_spans.add()
        rs.resource.attributes.append(KeyValue(key="service.name", value=AnyValue(string_value=service)))
        rs.scope_spans.add().spans.extend(spans)
    return r


def pika_send(n, start, destination="orders", parent=None):
    return span(n, f"{destination} send", PRODUCER, start, parent=parent, messaging__system="rabbitmq",
                messaging__destination=destination, messaging__temp_destination=True)


def pika_receive(n, start, end, parent, destination="orders"):
    return span(n, f"{destination} receive", CONSUMER, start, end, parent=parent, messaging__system="rabbitmq",
                messaging__destination=destination, messaging__operation="receive")


def flows(pairing: Pairing, now: float):
    return {(f.destination, f.service): f for f in pairing.window(now)[0]}


def received(receiver: TraceReceiver, by_service, now=T0 + 1):
    answer = receiver.receive(request(by_service).SerializeToString(), "application/x-protobuf", now=now)
    assert answer.status == 200, answer.body
    return answer


# -- decoding ----------------------------------------------------------------------------------------------
def test_json_with_hex_ids_decodes_to_the_same_spans_as_protobuf():
    """OTLP/JSON writes trace and span ids in hex, where protobuf's JSON mapping would read base64."""
    r = request({"billing": [pika_send(7, T0, parent=3)]})
    document = json_format.MessageToDict(r)
    rs = document["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    rs["traceId"], rs["spanId"], rs["parentSpanId"] = TRACE.hex(), _id(7).hex(), _id(3).hex()
    assert decode(json.dumps(document).encode(), "application/json; charset=utf-8") == r


@pytest.mark.parametrize("body, content_type, encoding, status, says", [
    (b"\x0a\xff\xff\xff", "application/x-protobuf", "", 400, "malformed OTLP protobuf"),
    (b'{"resourceSpans": [', "application/json", "", 400, "malformed OTLP JSON"),
    (b'[1, 2]', "application/json", "", 400, "the document is no object"),
    (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"spanId": "zz"}]}]}]}', "application/json", "", 400,
     "is not hex"),
    (b'{"resourceSpans": 7}', "application/json", "", 400, "malformed OTLP JSON"),
    (b"anything", "text/plain", "", 415, "neither application/x-protobuf nor application/json"),
    (b"not gzip at all", "application/x-protobuf", "gzip", 400, "does not unpack"),
    (b"x", "application/x-protobuf", "br", 400, "is not gzip, deflate or identity"),
    (gzip.compress(b"\0" * (2 << 20), mtime=0), "application/x-protobuf", "gzip", 413, "unpacks to more than"),
    (b"[" * 100_000 + b"]" * 100_000, "application/json", "", 400, "nested too deeply"),
    (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"spanId": "01", "attributes": ' + b"[" * 50_000
     + b"]" * 50_000 + b"}]}]}]}", "application/json", "", 400, "nested too deeply"),
], ids=["protobuf", "json-cut", "json-array", "json-id", "json-type", "content-type", "gzip", "encoding",
        "gzip-bomb", "json-deep", "json-deep-in-a-span"])
def test_a_bad_request_is_answered_in_one_line_and_counted(body, content_type, encoding, status, says):
    receiver = TraceReceiver(max_request_bytes=1 << 20)
    answer = receiver.receive(body, content_type, encoding, now=T0)
    assert answer.status == status
    text = answer.body.decode()
    assert says in text and text.count("\n") == 1 and "Traceback" not in text
    assert receiver.window(T0).rejected_requests == 1


def test_a_good_request_after_a_bad_one_is_taken_whole():
    receiver = TraceReceiver()
    receiver.receive(b"\xff", "application/x-protobuf", now=T0)
    received(receiver, {"billing": [pika_send(1, T0)]})
    window = receiver.window(T0 + 2)
    assert window.rejected_requests == 1 and [f.published for f in window.flows] == [1]


# -- shapes ------------------------------------------------------------------------------------------------
def test_the_older_shape_of_pika_and_aio_pika():
    publish = normalise(pika_send(1, T0, destination=",orders"), "shop")  # aio-pika: "{exchange},{routing key}"
    assert (publish.role, publish.shape, publish.exchange, publish.routing_key, publish.queue) == (
        PUBLISH, OLDER, "", "orders", "orders")
    named = normalise(pika_send(2, T0, destination="events,order.created"), "shop")
    assert (named.exchange, named.queue) == ("events", None)  # an exchange routes where bindings say: no queue
    pika = normalise(pika_send(3, T0, destination="orders"), "shop")  # pika: exchange or routing key, unsaid which
    assert (pika.exchange, pika.queue) == (None, None)
    receive = normalise(pika_receive(4, T0, T0 + 2, parent=3), "billing")
    assert (receive.role, receive.parents, receive.end - receive.start) == ("receive", (3,), pytest.approx(2))


def test_the_v1_44_shape_names_the_queue_only_where_it_is_spelled_out():
    send = normalise(span(1, "send orders", PRODUCER, T0, messaging__system="rabbitmq",
                          messaging__operation__type="send", messaging__destination__name="amq.default",
                          messaging__rabbitmq__destination__routing_key="orders"), "shop")
    assert (send.role, send.shape, send.exchange, send.queue) == (PUBLISH, SEMCONV, "", "orders")
    topic = normalise(span(2, "send", PRODUCER, T0, messaging__system="rabbitmq", messaging__operation__type="send",
                           messaging__destination__name="events:order.created",
                           messaging__rabbitmq__destination__routing_key="order.created"), "shop")
    assert (topic.exchange, topic.routing_key, topic.queue) == ("events", "order.created", None)
    process = normalise(span(3, "process", CONSUMER, T0, messaging__system="rabbitmq",
                             messaging__operation__type="process",
                             messaging__destination__name="events:order.created:billing"), "billing")
    assert (process.role, process.queue) == (PROCESS, "billing")
    settle = normalise(span(4, "ack", CONSUMER, T0, parent=3, messaging__system="rabbitmq",
                            messaging__operation__type="settle", messaging__operation__name="ack",
                            messaging__destination__name="events:order.created:billing"), "billing")
    assert (settle.role, settle.outcome) == (SETTLE, "ack")


def test_celery_task_spans():
    apply = normalise(span(1, "apply_async/shop.charge", PRODUCER, T0, celery__action="apply_async",
                           messaging__message_id="7b2e", messaging__destination="celery",
                           celery__task_name="shop.charge"), "web")
    run = normalise(span(2, "run/shop.charge", CONSUMER, T0, parent=1, celery__action="run",
                         celery__delivery_info="{'exchange': '', 'routing_key': 'celery', 'priority': 0, "
                                               "'redelivered': True}"), "worker")
    assert (apply.role, apply.shape, apply.destination) == (PUBLISH, CELERY, "celery")
    assert (run.role, run.redelivered, run.exchange) == (PROCESS, True, "")
    assert "7b2e" not in repr(apply)  # the task's id is a message id: never kept


def test_a_span_of_another_kind_is_someone_elses_and_one_of_no_known_shape_is_said_not_guessed():
    assert normalise(span(1, "GET /orders", 2, T0, http__method="GET"), "web") is None
    assert normalise(span(2, "topic send", PRODUCER, T0, messaging__system="kafka",
                          messaging__destination__name="topic"), "web") is None
    with pytest.raises(NotUnderstood, match="without a destination"):
        normalise(span(3, "publish", PRODUCER, T0, messaging__system="rabbitmq"), "web")
    receiver = TraceReceiver()
    received(receiver, {"web": [span(1, "GET /orders", 2, T0, http__method="GET"),
                                span(3, "publish", PRODUCER, T0, messaging__system="rabbitmq"),
                                span(4, "publish", PRODUCER, T0, messaging__system="rabbitmq")]})
    window = receiver.window(T0 + 1)
    assert window.spans == {"other": 1} and window.not_understood == 2
    assert "span 'publish' from web" in window.first_not_understood


# -- pairing -----------------------------------------------------------------------------------------------
def test_queue_time_runs_from_the_publish_span_start_to_the_first_delivery_start():
    receiver = TraceReceiver()
    received(receiver, {"shop": [pika_send(1, T0)], "billing": [pika_receive(2, T0 + 0.3, T0 + 2.3, parent=1)]})
    flow = flows(receiver.pairing, T0 + 3)[("orders", "shop")]
    assert (flow.published, flow.delivered, flow.consumers) == (1, 1, ("billing",))
    assert flow.queue_time.sum == pytest.approx(0.3) and flow.queue_time.count == 1
    assert flow.processing.sum == pytest.approx(2.0)  # the older shape's receive span wraps the callback


@pytest.mark.parametrize("inner_first", [False, True])
def test_pikas_two_nested_send_spans_are_one_publish(inner_first):
    """pika's instrumentation nests two send spans per message, and the consumer's parent is the inner one."""
    outer, inner = pika_send(1, T0), pika_send(2, T0 + 0.0001, parent=1)
    pairing = Pairing()
    for s in ([inner, outer] if inner_first else [outer, inner]):
        pairing.take([normalise(s, "shop")], T0 + 0.5)
    pairing.take([normalise(pika_receive(3, T0 + 0.2, T0 + 0.3, parent=2), "billing")], T0 + 1)
    flow = flows(pairing, T0 + 2)[("orders", "shop")]
    assert (flow.published, flow.delivered, flow.duplicates) == (1, 1, 0)


def test_a_delivery_that_arrives_before_its_publish_waits_for_it():
    pairing = Pairing()
    pairing.take([normalise(pika_receive(2, T0 + 0.2, T0 + 0.3, parent=1), "billing")], T0 + 1)
    pairing.take([normalise(pika_send(1, T0), "shop")], T0 + 4)
    flow = flows(pairing, T0 + 5)[("orders", "shop")]
    assert (flow.delivered, flow.queue_time.sum) == (1, pytest.approx(0.2))


def test_a_second_delivery_to_the_same_service_is_a_duplicate_and_the_broker_flag_names_redeliveries():
    pairing = Pairing()
    run = dict(celery__action="run", messaging__destination="celery")
    pairing.take([normalise(span(1, "apply_async/t", PRODUCER, T0, celery__action="apply_async",
                                 messaging__destination="celery"), "web"),
                  normalise(span(2, "run/t", CONSUMER, T0 + 1, parent=1, **run,
                                 celery__delivery_info="{'redelivered': False}"), "worker"),
                  normalise(span(3, "run/t", CONSUMER, T0 + 9, parent=1, **run,
                                 celery__delivery_info="{'redelivered': True}"), "worker"),
                  normalise(span(4, "run/t", CONSUMER, T0 + 9, parent=1, **run), "audit")], T0 + 10)
    flow = flows(pairing, T0 + 11)[("celery", "web")]
    # A copy to another service is fan-out (a second queue), not a duplicate.
    assert (flow.delivered, flow.duplicates, flow.redelivered) == (1, 1, 1)
    assert flow.consumers == ("audit", "worker")


def test_a_publish_with_no_delivery_within_the_deadline_is_unprocessed_until_it_comes():
    pairing = Pairing(deadline_s=60, keep_s=60)
    pairing.take([normalise(pika_send(1, T0), "shop"), normalise(pika_send(2, T0), "shop")], T0 + 1)
    pairing.take([normalise(pika_receive(3, T0 + 0.5, T0 + 0.6, parent=1), "billing")], T0 + 2)
    assert flows(pairing, T0 + 30)[("orders", "shop")].unprocessed == {}
    flow = flows(pairing, T0 + 62)[("orders", "shop")]
    assert flow.unprocessed == {UNPLACED: 1} and flow.oldest_unprocessed_s == pytest.approx(62)
    pairing.take([normalise(pika_receive(4, T0 + 70, T0 + 70.1, parent=2), "billing")], T0 + 71)
    flow = flows(pairing, T0 + 72)[("orders", "shop")]
    assert (flow.unprocessed, flow.delivered) == ({}, 2)  # late, counted in the queue time's long tail
    assert flows(pairing, T0 + 200)[("orders", "shop")].unprocessed == {}  # forgotten past keeping
    assert flows(pairing, T0 + 200)[("orders", "shop")].went_unprocessed == 1  # ... and still counted
    assert GONE not in flow.unprocessed  # the pairing never says gone: only the broker's view can


def test_a_delivery_before_its_publish_by_the_clocks_is_skew_kept_out_of_the_percentiles():
    pairing = Pairing()
    pairing.take([normalise(pika_send(1, T0 + 5), "shop"),
                  normalise(pika_receive(2, T0 + 1, T0 + 1.1, parent=1), "billing")], T0 + 6)
    flow = flows(pairing, T0 + 7)[("orders", "shop")]
    assert (flow.delivered, flow.skewed, flow.queue_time.count) == (1, {"billing": 1}, 0)


def test_a_retried_batch_counts_once():
    receiver = TraceReceiver()
    batch = {"shop": [pika_send(1, T0)], "billing": [pika_receive(2, T0 + 0.1, T0 + 0.2, parent=1)]}
    received(receiver, batch)
    received(receiver, batch)
    window = receiver.window(T0 + 3)
    assert ([(f.published, f.delivered, f.duplicates) for f in window.flows], window.repeated) == ([(1, 1, 0)], 2)


def test_a_flood_beyond_what_is_kept_is_dropped_and_counted():
    pairing = Pairing(max_messages=100)
    pairing.take([normalise(pika_send(n, T0), "shop") for n in range(1, 151)], T0 + 1)
    assert (flows(pairing, T0 + 2)[("orders", "shop")].published, pairing.dropped) == (100, 50)
    pairing.window(T0 + 200)  # forgotten past the deadline and keeping: room again
    pairing.take([normalise(pika_send(1000, T0 + 200), "shop")], T0 + 200)
    assert flows(pairing, T0 + 201)[("orders", "shop")].published == 101


def test_destinations_beyond_the_limit_fold_into_one():
    pairing = Pairing(max_destinations=2)
    pairing.take([normalise(pika_send(n, T0, destination=f"q{n}"), "shop") for n in range(1, 5)], T0 + 1)
    assert sorted(d for d, _ in flows(pairing, T0 + 2)) == ["(other)", "q1", "q2"]


def test_deliveries_whose_publish_never_came_make_unprocessed_unknowable():
    """Under independent sampling a publish's span may be dropped while its delivery's is kept (and the other
    way round): a publish without a delivery then proves nothing."""
    receiver = TraceReceiver()
    received(receiver, {"billing": [pika_receive(2, T0, T0 + 0.1, parent=99)]})
    assert receiver.window(T0 + 30).unprocessed_known
    window = receiver.window(T0 + 62)
    assert (window.orphans, window.unprocessed_known) == ({"billing": 1}, False)
    window = receiver.window(T0 + 200)  # no orphan among the messages held now
    assert (window.orphans, window.unprocessed_known) == ({"billing": 1}, True)


def test_a_delivery_with_no_trace_context_is_counted_unrooted():
    receiver = TraceReceiver()
    received(receiver, {"billing": [pika_receive(2, T0, T0 + 0.1, parent=None)]})
    assert (receiver.window(T0 + 62).unrooted, receiver.window(T0 + 62).unprocessed_known) == (1, True)


def test_a_v1_44_receive_process_and_settle_are_one_delivery():
    attrs = dict(messaging__system="rabbitmq", messaging__destination__name="events:created:billing")
    pairing = Pairing()
    pairing.take([normalise(s, service) for s, service in [
        (span(4, "ack", INTERNAL, T0 + 1.5, parent=3, messaging__operation__type="settle",
              messaging__operation__name="ack", **attrs), "billing"),
        (span(3, "process", CONSUMER, T0 + 0.5, T0 + 1.5, parent=2, messaging__operation__type="process", **attrs),
         "billing"),
        (span(2, "receive", CONSUMER, T0 + 0.4, T0 + 0.45, links=(1,), messaging__operation__type="receive",
              **attrs), "billing"),
        (span(1, "send", PRODUCER, T0, messaging__operation__type="send", messaging__system="rabbitmq",
              messaging__destination__name="events:created", messaging__rabbitmq__destination__routing_key="created"),
         "shop")]], T0 + 2)
    flow = flows(pairing, T0 + 3)[("events:created", "shop")]
    assert (flow.delivered, flow.duplicates, flow.settled) == (1, 0, {"ack": 1})
    assert (flow.queue_time.sum, flow.processing.sum, flow.processing.count) == (
        pytest.approx(0.4), pytest.approx(1.0), 1)


def test_a_publish_error_is_counted():
    pairing = Pairing()
    pairing.take([normalise(span(1, "orders send", PRODUCER, T0, error=True, messaging__system="rabbitmq",
                                 messaging__destination="orders"), "shop")], T0 + 1)
    assert flows(pairing, T0 + 2)[("orders", "shop")].publish_errors == 1


def test_memory_is_given_back_once_messages_are_past_keeping():
    pairing = Pairing(deadline_s=10, keep_s=10)
    for second in range(100):
        batch = []
        for n in range(100):
            key = second * 1000 + n * 2 + 1
            batch += [normalise(pika_send(key, T0 + second), "shop"),
                      normalise(pika_receive(key + 1, T0 + second + 0.1, T0 + second + 0.2, parent=key), "billing")]
        pairing.take(batch, T0 + second)
        pairing.window(T0 + second)
    held = (len(pairing._messages), len(pairing._delivery_of), len(pairing._inner_of), len(pairing._alias))
    assert held[0] <= 100 * 23 and held[1] <= 100 * 23 and held[2:] == (0, 0), held


# -- the Collector's files ---------------------------------------------------------------------------------
def _json_line(by_service) -> bytes:
    document = json_format.MessageToDict(request(by_service))
    for rs in document["resourceSpans"]:
        for s in rs["scopeSpans"][0]["spans"]:
            for key in ("traceId", "spanId", "parentSpanId"):
                if key in s:
                    s[key] = base64.b64decode(s[key]).hex()
    return json.dumps(document).encode() + b"\n"


def test_the_collectors_files_are_read_across_rotation_and_a_bad_line_costs_only_itself(tmp_path):
    from ackscope.sources.traces import TraceDirectory
    receiver = TraceReceiver()
    folder = TraceDirectory(str(tmp_path), receiver)
    current = tmp_path / "traces.json"
    current.write_bytes(_json_line({"shop": [pika_send(1, T0)]}) + b"{not json\n" + _json_line({"shop": [
        pika_send(2, T0)]})[:-20])  # the last line still being written
    folder.read(T0 + 1)
    assert [f.published for f in receiver.window(T0 + 1).flows] == [1] and receiver.window(T0).rejected_requests == 1
    with current.open("ab") as f:  # the rest of the line, then the file rotated away and a new one begun
        f.write(_json_line({"shop": [pika_send(2, T0)]})[-20:])
    current.rename(tmp_path / "traces-2026-12-02T06-00-00.json")
    current.write_bytes(_json_line({"billing": [pika_receive(3, T0 + 1, T0 + 2, parent=1)]}))
    folder.read(T0 + 2)
    [flow] = receiver.window(T0 + 3).flows
    assert (flow.published, flow.delivered) == (2, 1)
    folder.read(T0 + 4)  # nothing new: nothing counted twice
    assert receiver.window(T0 + 4).flows[0].published == 2


def test_a_traces_dir_that_cannot_be_read_is_said_and_tried_again(tmp_path, caplog):
    from ackscope.sources.traces import TraceDirectory
    folder = TraceDirectory(str(tmp_path / "missing"), TraceReceiver())
    folder.read(T0)
    folder.read(T0 + 1)
    assert folder.problem and "cannot be read" in folder.problem
    assert sum("cannot be read" in r.message for r in caplog.records) == 1
    (tmp_path / "missing").mkdir()
    folder.read(T0 + 2)
    assert folder.problem is None


# -- the rules: the spans joined with the broker's view ----------------------------------------------------
def _flow(**kw):
    from ackscope.model.probes import Histogram
    from ackscope.model.traces import Flow
    base = dict(destination=",orders", service="shop", exchange="", queue="orders", published=100, delivered=100,
                queue_time=Histogram(((1.0, 100.0), (float("inf"), 100.0)), 10.0), consumers=("billing",))
    return Flow(**{**base, **kw})


def _histogram(*counts):
    """Cumulative buckets from per-bucket counts over the queue-time bounds."""
    from ackscope.model.probes import Histogram
    from ackscope.model.traces import QUEUE_TIME_BUCKETS
    total, out = 0, []
    for bound, n in zip((*QUEUE_TIME_BUCKETS, float("inf")), list(counts) + [0] * 30):
        total += n
        out.append((bound, float(total)))
    return Histogram(tuple(out), 0.0)


def _judge(flows_now, flows_then=(), snapshot_kw=None, window_kw=None, start_kw=None):
    from snapshot_builders import snapshot

    from ackscope.diagnosis.rules import Context, diagnose
    from ackscope.diagnosis.traces import placed
    from ackscope.model.traces import TraceWindow
    now = snapshot(T0 + 300, **(snapshot_kw or {}))
    then = snapshot(T0, **{k: v for k, v in (snapshot_kw or {}).items() if k != "queues"},
                    queues=(start_kw or {}).get("queues", ()))
    window = placed(TraceWindow(T0 + 300, tuple(flows_now), spans={"older": 10}, deadline_s=60.0,
                                **(window_kw or {})), now)
    start = TraceWindow(T0, tuple(flows_then), spans={"older": 1})
    return diagnose(Context(now, then, window=then, traces=window, traces_start=start))


def _found(diagnosis, rule):
    return [f for f in diagnosis.findings if f.rule == rule]


def test_no_spans_leave_the_trace_rules_not_evaluated():
    from snapshot_builders import snapshot

    from ackscope.diagnosis.rules import Context, diagnose
    skipped = {n.rule for n in diagnose(Context(snapshot(T0))).not_evaluated}
    assert {"trace-queue-time-high", "trace-messages-unprocessed", "trace-duplicate-deliveries"} <= skipped


def test_queue_time_high_only_where_the_whole_p99_bucket_is_over_the_threshold_naming_the_queues_consumers():
    from snapshot_builders import channel, consumer, queue
    # 90 within 10 ms, 10 between 30 and 60 s: p99 certainly over 30 s.
    slow = _flow(queue_time=_histogram(0, 0, 0, 90, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10))
    parts = dict(queues=[queue("orders", messages_ready=400, messages_unacked=1, consumers=1)],
                 channels=[channel("ch 1", prefetch_count=1, messages_unacked=1, connection_name="billing-1")],
                 consumers=[consumer("orders", "ch 1", connection_name="billing-1", prefetch_count=1)])
    [finding] = _found(_judge([slow], snapshot_kw=parts), "trace-queue-time-high")
    assert (finding.severity, finding.object, finding.connection_name) == ("warning", "queue orders, published by shop",
                                                                            "billing-1")
    assert finding.evidence["queue_time_p99"] == "between 30 and 60 s"
    assert "at its prefetch" in finding.evidence["queue_consumers"][0]
    assert "waited p99 between 30 and 60 s" in finding.explanation and "400 ready" in finding.explanation
    # The same deliveries before the window: none in it, nothing to judge.
    assert not _found(_judge([slow], [slow], snapshot_kw=parts), "trace-queue-time-high")
    # The p99 in the bucket that holds the threshold: perhaps over it, so not said.
    maybe = _flow(queue_time=_histogram(0, 0, 0, 90, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10))
    assert not _found(_judge([maybe], snapshot_kw=parts), "trace-queue-time-high")


def test_gone_messages_are_said_with_the_broker_deliveries_beside_them():
    from snapshot_builders import queue, stats
    gone = _flow(delivered=97, unprocessed={UNPLACED: 3}, oldest_unprocessed_s=70.0)
    # The broker delivered 97 over the window: as many as the spans show. The three left another way.
    parts = dict(queues=[queue("orders", messages_ready=0, message_stats=stats(deliver_get=97))])
    [finding] = _found(_judge([gone], snapshot_kw=parts, start_kw=dict(queues=[queue("orders")])),
                       "trace-messages-unprocessed")
    assert (finding.severity, finding.evidence["gone"], finding.evidence["broker_deliveries_in_window"]) == (
        "warning", 3, 97)
    assert "left it another way" in finding.evidence["inferred"]
    # The broker delivered 100: three more than the spans show, so an untraced (or dead) consumer may have them.
    parts = dict(queues=[queue("orders", messages_ready=0, message_stats=stats(deliver_get=100))])
    [finding] = _found(_judge([gone], snapshot_kw=parts, start_kw=dict(queues=[queue("orders")])),
                       "trace-messages-unprocessed")
    assert "a consumer that sends no spans may have taken them" in finding.evidence["inferred"]
    # No count of the queue's deliveries (a 4.0 node's consumer channel killed before its statistics were emitted):
    # neither way is said, the count not known.
    parts = dict(queues=[queue("orders", messages_ready=0)])
    [finding] = _found(_judge([gone], snapshot_kw=parts, start_kw=dict(queues=[queue("orders")])),
                       "trace-messages-unprocessed")
    assert finding.evidence["broker_deliveries_in_window"] is None and "not known" in finding.evidence["inferred"]
    assert "another way (" not in finding.evidence["inferred"] and "may have taken" not in finding.evidence["inferred"]


def test_unprocessed_messages_still_in_their_queue_are_a_backlog_with_its_age():
    from snapshot_builders import queue
    late = _flow(delivered=90, unprocessed={UNPLACED: 10}, oldest_unprocessed_s=95.0)
    [finding] = _found(_judge([late], snapshot_kw=dict(queues=[queue("orders", messages_ready=50, consumers=0)])),
                       "trace-messages-unprocessed")
    assert (finding.severity, finding.evidence["waiting"]) == ("warning", 10)
    assert "the oldest 95 s" in finding.explanation and "a backlog, with 0 consumers" in finding.explanation


@pytest.mark.parametrize("flow_kw, window_kw, queues, why", [
    (dict(queue=None, destination="orders"), {}, ["orders"], "the spans name no queue"),
    ({}, dict(recent_orphans=2, orphans={"billing": 2}), ["orders"], "the sampling does not keep pairs whole"),
    (dict(delivered=0, consumers=()), {}, ["orders"], "its consumers send no spans"),
    ({}, {}, [], "no single queue orders"),
])
def test_unprocessed_messages_that_cannot_be_placed_are_info_saying_why(flow_kw, window_kw, queues, why):
    from snapshot_builders import queue
    flow = _flow(unprocessed={UNPLACED: 4}, oldest_unprocessed_s=61.0, **flow_kw)
    diagnosis = _judge([flow], snapshot_kw=dict(queues=[queue(q, messages_ready=0) for q in queues]),
                       window_kw=window_kw)
    [finding] = _found(diagnosis, "trace-messages-unprocessed")
    assert finding.severity == "info" and why in finding.evidence["why_unplaced"]


def test_a_queue_name_in_two_vhosts_is_not_joined():
    from snapshot_builders import queue
    flow = _flow(unprocessed={UNPLACED: 4})
    diagnosis = _judge([flow], snapshot_kw=dict(queues=[queue("orders", messages_ready=0),
                                                        queue("orders", vhost="other", messages_ready=0)]))
    [finding] = _found(diagnosis, "trace-messages-unprocessed")
    assert finding.severity == "info"


def test_two_services_publishing_to_one_queue_are_two_findings_and_gone_and_waiting_are_one():
    """ackscope_finding's labels (rule, vhost, object, ...) must differ between findings: one series each."""
    from snapshot_builders import queue
    from ackscope.model.traces import WAITING
    flows = [_flow(unprocessed={GONE: 2, WAITING: 3}, oldest_unprocessed_s=80.0),
             _flow(service="admin", unprocessed={WAITING: 1}, oldest_unprocessed_s=61.0)]
    found = _found(_judge(flows, snapshot_kw=dict(queues=[queue("orders", messages_ready=4)])),
                   "trace-messages-unprocessed")
    assert sorted(f.object for f in found) == ["queue orders, published by admin", "queue orders, published by shop"]
    shop = next(f for f in found if f.object.endswith("shop"))
    assert (shop.evidence["gone"], shop.evidence["waiting"]) == (2, 3)
    assert "2 of shop's messages" in shop.explanation and "3 of shop's messages" in shop.explanation


def test_duplicates_skew_and_broken_sampling_are_info():
    from snapshot_builders import queue, stats
    flow = _flow(duplicates=4, redelivered=1, skewed={"billing": 2})
    diagnosis = _judge([flow], snapshot_kw=dict(queues=[queue("orders", message_stats=stats(redeliver=4))]),
                       window_kw=dict(recent_orphans=1, orphans={"audit": 1}),
                       start_kw=dict(queues=[queue("orders")]))
    [dup] = _found(diagnosis, "trace-duplicate-deliveries")
    assert (dup.severity, dup.evidence["duplicate_deliveries"], dup.evidence["broker_redeliveries_in_window"]) == (
        "info", 4, 4)
    [skew] = _found(diagnosis, "trace-clock-skew")
    assert skew.evidence == {"publishing_service": "shop", "consuming_service": "billing", "deliveries": 2}
    [sampling] = _found(diagnosis, "trace-sampling-incomplete")
    assert "audit" in sampling.explanation


def test_api_traces_puts_gone_first_then_waiting_then_the_slowest_and_the_page_keeps_that_order():
    from ackscope.dashboard import views
    from ackscope.exporter.exposition import traces_json
    from ackscope.model.traces import WAITING, TraceWindow
    fast = _flow(destination="fast", queue_time=_histogram(10))
    slow = _flow(destination="slow", queue_time=_histogram(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10))
    backlog = _flow(destination="backlog", unprocessed={WAITING: 3})
    lost = _flow(destination="lost", unprocessed={GONE: 1}, oldest_unprocessed_s=75.04)
    document = json.loads(traces_json(TraceWindow(T0, (fast, slow, backlog, lost), spans={"older": 8})))
    assert [f["destination"] for f in document["flows"]] == ["lost", "backlog", "slow", "fast"]
    assert document["flows"][2]["queue_time_p99"] == "between 30 and 60 s"
    assert document["intake"]["unprocessed_known"] is True
    table = views.traces(document, search="ba")
    assert list(table["destination"]) == ["backlog"] and table.iloc[0]["waiting"] == 3
    assert views.traces(document).iloc[0]["oldest unprocessed (s)"] == 75.0
    assert json.loads(traces_json(None)) == {"taken_at": None, "flows": [], "intake": None}


def test_each_message_is_a_row_once_forgotten_and_a_stop_writes_those_past_their_deadline():
    rows: list[dict] = []
    pairing = Pairing(deadline_s=10, keep_s=10, on_forget=rows.extend)
    pairing.take([normalise(pika_send(1, T0), "shop"), normalise(pika_send(2, T0), "shop"),
                  normalise(pika_receive(3, T0 + 0.5, T0 + 1.5, parent=1), "billing"),
                  normalise(pika_receive(4, T0 + 5, T0 + 5.5, parent=1), "billing")], T0 + 1)
    pairing.window(T0 + 15)
    assert rows == []  # past the deadline, still kept for a late delivery
    pairing.window(T0 + 25)
    by_time = sorted(rows, key=lambda r: r["deliveries"])
    assert by_time[0] == {"published_at": int(T0 * 1e6), "destination": "orders", "service": "shop",
                          "exchange": None, "queue": None, "consumer": None, "delivered_at": None,
                          "processing_s": None, "deliveries": 0, "duplicates": 0, "redelivered": 0,
                          "publish_error": False}
    assert (by_time[1]["delivered_at"], by_time[1]["deliveries"], by_time[1]["duplicates"],
            by_time[1]["processing_s"], by_time[1]["consumer"]) == (int((T0 + 0.5) * 1e6), 2, 1, 1.0, "billing")
    rows.clear()
    pairing.take([normalise(pika_send(10, T0 + 30), "shop")], T0 + 30)
    pairing.take([normalise(pika_send(11, T0 + 45), "shop")], T0 + 45)
    assert pairing.forget_all(T0 + 46) == 1 and len(rows) == 1  # 11 is within its deadline: not judged


def test_gone_beside_a_live_auto_ack_consumer_says_it_may_still_hold_them():
    from snapshot_builders import consumer, queue, stats
    gone = _flow(delivered=97, unprocessed={UNPLACED: 3}, oldest_unprocessed_s=70.0)
    parts = dict(queues=[queue("orders", messages_ready=0, message_stats=stats(deliver_get=100))],
                 consumers=[consumer("orders", "ch 1", connection_name="slow-worker", ack_required=False)])
    [finding] = _found(_judge([gone], snapshot_kw=parts, start_kw=dict(queues=[queue("orders")])),
                       "trace-messages-unprocessed")
    assert "slow-worker, consuming with auto-ack now, still holds them" in finding.evidence["inferred"]


def test_a_healthy_traced_flow_beside_other_queues_is_named_by_nothing_at_warning_or_above():
    """The trace rules' 'never': every message delivered within a few ms, once, by the same clocks, with other
    queues and their consumers beside it."""
    from snapshot_builders import channel, consumer, queue
    healthy = _flow(queue_time=_histogram(0, 0, 100))
    other = _flow(destination=",audit", queue="audit", service="admin", queue_time=_histogram(5))
    parts = dict(queues=[queue("orders", messages_ready=0), queue("audit", messages_ready=3), queue("bulk")],
                 channels=[channel("ch 1", prefetch_count=10, messages_unacked=1, connection_name="billing-1")],
                 consumers=[consumer("orders", "ch 1", connection_name="billing-1")])
    diagnosis = _judge([healthy, other], snapshot_kw=parts)
    assert not [f for f in diagnosis.findings if f.rule.startswith("trace-")]


def test_gone_names_only_the_consumers_of_the_queue_the_spans_name():
    """Another queue's consumer, or a consumer of a queue of the same name in another vhost, could not have taken
    them: never named. With the name in two vhosts nothing is placed, so nobody is named at all."""
    from snapshot_builders import consumer, queue
    gone = _flow(delivered=97, unprocessed={UNPLACED: 3})
    parts = dict(queues=[queue("orders", messages_ready=0, consumers=1), queue("audit", consumers=1)],
                 consumers=[consumer("orders", "ch 1", connection_name="billing-1"),
                            consumer("audit", "ch 2", connection_name="auditor")])
    [finding] = _found(_judge([gone], snapshot_kw=parts), "trace-messages-unprocessed")
    assert finding.connection_name == "billing-1" and "auditor" not in repr(finding.evidence)
    parts["queues"].append(queue("orders", vhost="other", messages_ready=0, consumers=1))
    parts["consumers"].append(consumer("orders", "ch 3", vhost="other", connection_name="stranger"))
    [finding] = _found(_judge([gone], snapshot_kw=parts), "trace-messages-unprocessed")
    assert (finding.severity, finding.connection_name) == ("info", "")


def test_the_endpoint_pairs_in_its_worker_and_a_worker_that_ended_costs_a_503_not_the_exporter(tmp_path):
    endpoint = TraceEndpoint(TraceSettings(data_dir=str(tmp_path)))
    try:
        assert endpoint.window(T0).flows == () and endpoint.worker.started == 0  # no span yet: no process
        now = time.time()
        body = request({"shop": [pika_send(1, now - 1)], "billing": [pika_receive(2, now - 0.5, now, parent=1)]})
        answer = endpoint.receive(body.SerializeToString(), "application/x-protobuf")
        assert answer.status == 200 and endpoint.worker.pid != os.getpid()
        [flow] = endpoint.window(time.time()).flows
        assert (flow.destination, flow.service, flow.published, flow.delivered) == ("orders", "shop", 1, 1)
        os.kill(endpoint.worker.pid, signal.SIGKILL)
        wait_for(lambda: not endpoint.worker.running, 5, "the killed worker gone")
        refused = endpoint.receive(body.SerializeToString(), "application/x-protobuf")
        # The sender's exporter sends the batch again on a 503; the poll keeps the last window meanwhile.
        assert (refused.status, refused.body.count(b"\n")) == (503, 1), refused.body
        assert b"the traces worker ended (exit code -9)" in refused.body
        assert endpoint.window(time.time()).flows == (flow,)
        again = wait_for(lambda: endpoint.receive(body.SerializeToString(), "application/x-protobuf").status == 200,
                         10, "a new worker to take the batch")
        assert again and endpoint.worker.started == 2
    finally:
        endpoint.stop()


# -- what the spans cannot show is never claimed -------------------------------------------------------------
def _pika_send_failed(n, start, parent=None):
    return span(n, "orders send", PRODUCER, start, parent=parent, error=True, messaging__system="rabbitmq",
                messaging__destination="orders")


@pytest.mark.parametrize("order", ["inner first", "outer first", "one span"])
def test_a_failed_publish_is_a_publish_error_and_never_unprocessed(order):
    """The publisher was told its publish failed: the broker may never have had the message, so it is neither
    waiting nor gone. pika's outer send may carry the error while its inner one does not, and either ends first."""
    pairing = Pairing(deadline_s=60)
    if order == "one span":
        spans = [_pika_send_failed(1, T0)]
    else:
        spans = [pika_send(2, T0 + 0.0001, parent=1), _pika_send_failed(1, T0)]
        spans = spans if order == "inner first" else spans[::-1]
    for s in spans:
        pairing.take([normalise(s, "shop")], T0 + 0.5)
    flow = flows(pairing, T0 + 70)[("orders", "shop")]
    assert (flow.published, flow.publish_errors, flow.unprocessed) == (1, 1, {})


def test_a_flow_whose_publishes_name_several_queues_is_placed_beside_none_of_them():
    """Publishes to the default exchange named as "amq.default" go to the queue of each routing key: one
    destination, several queues. Naming the last one seen would blame a queue that may not hold them."""
    from snapshot_builders import queue, snapshot
    from ackscope.diagnosis.traces import placed

    def send(n, key):
        return span(n, "publish", PRODUCER, T0, messaging__system="rabbitmq", messaging__operation__type="send",
                    messaging__destination__name="amq.default", messaging__rabbitmq__destination__routing_key=key)
    receiver = TraceReceiver()
    received(receiver, {"shop": [send(1, "emails"), send(2, "orders"), send(3, "emails")],
                        "billing": [span(4, "process", CONSUMER, T0 + 0.1, parent=2, messaging__system="rabbitmq",
                                         messaging__operation__type="process",
                                         messaging__destination__name="amq.default:orders:orders")]})
    window = receiver.window(T0 + 70)
    [flow] = window.flows
    assert (flow.queue, flow.unprocessed) == (None, {UNPLACED: 2})
    snap = snapshot(T0 + 70, queues=[queue("orders", messages_ready=0, consumers=1)])
    assert placed(window, snap).flows[0].unprocessed == {UNPLACED: 2}


def test_the_queue_a_consumer_span_spells_out_does_not_place_a_flow_whose_publishes_name_an_exchange():
    """The consumer's queue is where the delivered messages came from, not where the undelivered went: a headers
    exchange may route the rest to a queue whose consumers send no spans."""
    attrs = dict(messaging__system="rabbitmq")
    pairing = Pairing()
    pairing.take([normalise(span(1, "send", PRODUCER, T0, messaging__operation__type="send",
                                 messaging__destination__name="events:created",
                                 messaging__rabbitmq__destination__routing_key="created", **attrs), "shop"),
                  normalise(span(2, "process", CONSUMER, T0 + 0.1, parent=1, messaging__operation__type="process",
                                 messaging__destination__name="events:created:billing", **attrs), "billing")],
                 T0 + 1)
    assert flows(pairing, T0 + 2)[("events:created", "shop")].queue is None


def test_a_delivery_linking_its_publish_under_a_parent_of_its_own_waits_for_the_publish():
    """A v1.44 consumer span's parent may be the consumer's own (ambient) span, its publish a link: it waits
    under both, is paired once, and its parent's deadline does not make it an orphan."""
    receiver = TraceReceiver()
    delivery = span(3, "process", CONSUMER, T0 + 0.2, parent=77, links=(1,), messaging__system="rabbitmq",
                    messaging__operation__type="process", messaging__destination__name="orders")
    received(receiver, {"billing": [delivery]}, now=T0 + 1)
    received(receiver, {"shop": [span(1, "publish", PRODUCER, T0, messaging__system="rabbitmq",
                                      messaging__operation__type="send", messaging__destination__name="orders")]},
             now=T0 + 3)
    window = receiver.window(T0 + 80)
    assert [(f.delivered, f.unprocessed) for f in window.flows] == [(1, {})]
    assert (window.orphans, window.unprocessed_known) == ({}, True)


def test_a_receive_and_a_process_span_of_one_delivery_are_one_delivery_and_a_second_queue_is_no_duplicate():
    attrs = dict(messaging__system="rabbitmq")

    def consumer_span(n, operation, queue, start):
        return span(n, operation, CONSUMER, T0 + start, links=(1,), messaging__operation__type=operation,
                    messaging__destination__name=f"events:created:{queue}", **attrs)
    pairing = Pairing()
    pairing.take([normalise(span(1, "send", PRODUCER, T0, messaging__operation__type="send",
                                 messaging__destination__name="events:created",
                                 messaging__rabbitmq__destination__routing_key="created", **attrs), "shop")]
                 + [normalise(s, "billing") for s in (consumer_span(2, "receive", "billing", 0.1),
                                                      consumer_span(3, "process", "billing", 0.2),
                                                      consumer_span(4, "process", "billing-audit", 0.3))], T0 + 1)
    flow = flows(pairing, T0 + 2)[("events:created", "shop")]
    assert (flow.delivered, flow.duplicates) == (1, 0)
    # The same consumer's second receive and process: a second delivery, one duplicate.
    pairing.take([normalise(s, "billing") for s in (consumer_span(5, "receive", "billing", 5),
                                                    consumer_span(6, "process", "billing", 5.1))], T0 + 6)
    assert flows(pairing, T0 + 7)[("events:created", "shop")].duplicates == 1


def test_the_age_of_unprocessed_messages_never_runs_ahead_of_their_arrival():
    """A publisher's clock two hours ahead: its span starts "in the future"; the age counts from its arrival."""
    pairing = Pairing(deadline_s=60)
    pairing.take([normalise(pika_send(1, T0 + 7200), "shop")], T0)
    flow = flows(pairing, T0 + 70)[("orders", "shop")]
    assert flow.unprocessed == {UNPLACED: 1} and 60 <= flow.oldest_unprocessed_s <= 71


def test_services_beyond_the_limit_fold_into_one_and_names_are_kept_short():
    pairing = Pairing(max_services=2)
    pairing.take([normalise(pika_send(n, T0, destination="d" * 10_000), f"svc-{n}") for n in range(1, 5)]
                 + [normalise(pika_receive(10 + n, T0 + 1, T0 + 2, parent=n), f"consumer-{n}")
                    for n in range(1, 5)], T0 + 1)
    window = flows(pairing, T0 + 2)
    assert sorted(service for _, service in window) == ["(other)", "svc-1", "svc-2"]
    assert all(len(destination) <= 200 for destination, _ in window)
    assert {c for f in window.values() for c in f.consumers} == {"(other)"}


def test_deliveries_waiting_for_a_publish_and_publish_spans_under_one_are_bounded():
    pairing = Pairing(max_messages=100)
    pairing.take([normalise(pika_receive(n, T0, T0 + 0.1, parent=1), "billing") for n in range(2, 5_002)], T0)
    assert (len(pairing._waiting), pairing.dropped) == (100, 4_900)
    pairing = Pairing(max_messages=100)
    pairing.take([normalise(pika_send(1, T0), "shop")]
                 + [normalise(pika_send(n, T0, parent=1), "shop") for n in range(2, 1_002)], T0)
    assert (len(pairing._alias), pairing.dropped) == (100, 900)


def test_a_retried_batch_of_deliveries_with_no_trace_context_counts_them_once():
    receiver = TraceReceiver()
    batch = {"billing": [pika_receive(2, T0, T0 + 0.1, parent=None), pika_receive(3, T0, T0 + 0.1, parent=None)]}
    for _ in range(3):
        received(receiver, batch)
    window = receiver.window(T0 + 2)
    assert (window.unrooted, window.repeated) == (2, 4)


def test_a_span_named_like_a_celery_task_without_celerys_attributes_is_someone_elses():
    assert normalise(span(1, "run/nightly-report", INTERNAL, T0), "cron") is None


def test_a_span_with_no_id_or_no_start_is_not_understood_and_a_zero_parent_is_no_parent():
    for bad in (span(0, "orders send", PRODUCER, T0, messaging__system="rabbitmq", messaging__destination="orders"),
                span(1, "orders send", PRODUCER, 0.0, messaging__system="rabbitmq", messaging__destination="orders")):
        with pytest.raises(NotUnderstood, match="no span id or no start time"):
            normalise(bad, "shop")
    assert normalise(pika_receive(2, T0, T0 + 0.1, parent=0), "billing").parents == ()


def test_a_delivery_waiting_long_for_its_publish_makes_unprocessed_unknown_before_it_is_judged_an_orphan():
    """Independent sampling: A kept only its publish, B (2 s later) only its delivery. A falls due before B is
    judged an orphan; B's long wait already says the pairs are broken, so A is not called unprocessed."""
    receiver = TraceReceiver()
    received(receiver, {"shop": [pika_send(1, T0)], "billing": [pika_receive(2, T0 + 0.1, T0 + 0.2, parent=1)]},
             now=T0)
    received(receiver, {"shop": [pika_send(3, T0 + 10)]}, now=T0 + 10)
    received(receiver, {"billing": [pika_receive(4, T0 + 12, T0 + 12.1, parent=777)]}, now=T0 + 12)
    assert receiver.window(T0 + 30).unprocessed_known  # B has waited 18 s: batches come that late
    window = receiver.window(T0 + 71)
    assert (window.orphans, window.waiting_long, window.unprocessed_known) == ({}, 1, False)
    window = receiver.window(T0 + 73)
    assert (window.orphans, window.waiting_long, window.unprocessed_known) == ({"billing": 1}, 0, False)
    diagnosis = _judge([], window_kw=dict(waiting_long=1))
    [finding] = _found(diagnosis, "trace-sampling-incomplete")
    assert "1 deliveries have waited more than 30 s for theirs" in finding.explanation


def test_gone_is_never_said_to_have_left_another_way_across_a_counter_that_went_back_or_a_worker_restart():
    from snapshot_builders import queue, stats
    gone = _flow(delivered=30, unprocessed={UNPLACED: 10})
    # The queue declared again (or its node restarted) within the window: 5,000 delivered before, 45 since.
    parts = dict(queues=[queue("orders", messages_ready=0, message_stats=stats(deliver_get=45))])
    start = dict(queues=[queue("orders", message_stats=stats(deliver_get=5_000))])
    [finding] = _found(_judge([gone], snapshot_kw=parts, start_kw=start), "trace-messages-unprocessed")
    assert finding.evidence["broker_deliveries_in_window"] is None and "went back" in finding.evidence["inferred"]
    assert "another way (" not in finding.evidence["inferred"]
    # The exporter's trace worker started again: the spans' count went back from 5,000 to 30.
    parts = dict(queues=[queue("orders", messages_ready=0, message_stats=stats(deliver_get=40))])
    [finding] = _found(_judge([gone], [_flow(delivered=5_000)], snapshot_kw=parts,
                              start_kw=dict(queues=[queue("orders")])), "trace-messages-unprocessed")
    assert finding.evidence["traced_deliveries_in_window"] is None and "started again" in finding.evidence["inferred"]


def test_the_deliveries_the_spans_show_from_a_queue_count_every_traced_flow_to_it():
    """Two services publish to orders, 50 traced deliveries each; the broker delivered 100: none is untraced."""
    from snapshot_builders import queue, stats
    shop = _flow(delivered=50, unprocessed={UNPLACED: 10})
    billing = _flow(service="billing", delivered=50)
    parts = dict(queues=[queue("orders", messages_ready=0, message_stats=stats(deliver_get=100))])
    [finding] = _found(_judge([shop, billing], snapshot_kw=parts, start_kw=dict(queues=[queue("orders")])),
                       "trace-messages-unprocessed")
    assert finding.evidence["traced_deliveries_in_window"] == 100
    assert "left it another way" in finding.evidence["inferred"] and "more than the spans" not in finding.explanation
    assert finding.evidence["joined_by"].startswith("the queue's name")


def test_a_backlog_beside_gone_messages_is_not_given_the_oldest_age():
    from snapshot_builders import queue
    mixed = _flow(delivered=90, unprocessed={UNPLACED: 10}, oldest_unprocessed_s=110.0)
    parts = dict(queues=[queue("orders", messages_ready=4)])
    [finding] = _found(_judge([mixed], snapshot_kw=parts, start_kw=dict(queues=[queue("orders")])),
                       "trace-messages-unprocessed")
    assert (finding.evidence["gone"], finding.evidence["waiting"]) == (6, 4)
    assert "the oldest 110 s" not in finding.explanation and finding.evidence["oldest_seconds"] == 110
