"""What the applications' traces cost the exporter (a benchmark, not a test): OTLP/HTTP protobuf requests of 512
spans, as the SDK's batch processor sends them, from 4 services to 50 destinations at 10,000 messages a second
(a publish span and a delivery span each, aio-pika's shape: 20,000 spans a second), for 5 minutes, into a running
exporter's /v1/traces while a scraper, a process of its own as Prometheus is, reads /metrics every 50 ms.

Reports, from one run:
- CPU per request of the exporter's trace worker (decode, shapes, pairing: the process's CPU over the load by the
  requests sent), beside the CPU opentelemetry-proto alone takes to decode the same requests (every 50th request's
  body, decoded again after the run). Target: at most 2x. And the exporter's own process's CPU over the load (the
  HTTP requests, the bodies passed to the worker, the polls and the scrapes).
- The exporter's RSS at each window (the deadline and what is kept after it: 120 s). Target: flat after the first.
- Scrape p50, p90, p99 and max of /metrics in three phases of one run: 60 s without spans; 60 s of the same load
  sent to a receiver that reads each request and throws it away (a process of its own: what the load generator
  and the loopback cost this 2-core machine, which the applications' hosts bear in production); then the load
  into the exporter. Target: p99 unchanged.

The load comes from a process of its own, which patches the ids and times of one prepared request (building 20,000
spans a second with the protobuf classes would take that process's core). The exporter polls a management URL that
does not answer (its broker series are then absent; the trace families are rendered at each poll all the same).

    python bench/traces.py [--rate 10000] [--seconds 300] [--services 4] [--destinations 50]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import struct
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import psutil
import requests
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from ackscope.apps.exporter import Exporter, ExporterConfig
from ackscope.core.http_server import WebSecurity
from ackscope.core.quantile import sample_quantile
from ackscope.core.secret import Secret
from ackscope.diagnosis.thresholds import Thresholds
from ackscope.exporter.cardinality import Limits
from ackscope.sources.selection import Selection
from ackscope.workloads.ports import free_port

BATCH = 512  # spans a request: the SDK's BatchSpanProcessor's max_export_batch_size
PAIRS = BATCH // 2


def _kv(key: str, value) -> KeyValue:
    return KeyValue(key=key, value=AnyValue(int_value=value) if isinstance(value, int) else AnyValue(
        string_value=value))


def _template(service: str, destinations: list[str], rng: random.Random) -> tuple[bytes, list[int], list[int]]:
    """One request of PAIRS publish and delivery spans from `service`, its ids and times placeholders: the bytes,
    and the offsets of each 8-byte id and each 8-byte time to patch per request."""
    request = ExportTraceServiceRequest()
    marks_ids, marks_times = [], []
    for role, kind, owner in (("send", 4, service), ("receive", 5, f"{service}-consumer")):
        rs = request.resource_spans.add()
        rs.resource.attributes.append(_kv("service.name", owner))
        spans = rs.scope_spans.add().spans
        for n in range(PAIRS):
            destination = destinations[n % len(destinations)]
            ids = [rng.getrandbits(64).to_bytes(8, "big") for _ in range(2 if role == "receive" else 1)]
            times = [rng.getrandbits(63).to_bytes(8, "little") for _ in range(2)]
            marks_ids.extend(ids)
            marks_times.extend(times)
            span = spans.add(trace_id=rng.getrandbits(128).to_bytes(16, "big"), span_id=ids[0], kind=kind,
                             name=f"{destination} {role}",
                             start_time_unix_nano=int.from_bytes(times[0], "little"),
                             end_time_unix_nano=int.from_bytes(times[1], "little"))
            if role == "receive":
                span.parent_span_id = ids[1]
            span.attributes.extend([_kv("messaging.system", "rabbitmq"), _kv("messaging.destination", destination),
                                    _kv("net.peer.name", "rabbit-1"), _kv("net.peer.port", 5672)])
            if role == "receive":
                span.attributes.append(_kv("messaging.operation", "receive"))
    body = request.SerializeToString()
    return body, [body.index(m) for m in marks_ids], [body.index(m) for m in marks_times]


def _load(url: str, rate: int, seconds: float, services: int, destinations: int, sent) -> None:
    """The load process: requests at `rate` messages a second for `seconds`, each a fresh copy of a service's
    template with new ids (a delivery's parent is its publish) and times around now."""
    rng = random.Random(7)
    names = [f"dest-{d:02d}" for d in range(destinations)]
    templates = [_template(f"svc-{s}", names[s::services] or names, rng) for s in range(services)]
    session = requests.Session()
    next_id = rng.getrandbits(40) << 20
    interval = PAIRS / rate
    started = time.monotonic()
    n = 0
    while time.monotonic() - started < seconds:
        body, id_at, time_at = templates[n % services]
        out = bytearray(body)
        now_ns = time.time_ns()
        for i in range(PAIRS):
            publish_id = struct.pack(">Q", next_id)
            next_id += 1
            # The send span's own id, then (in the delivery's half) the delivery's id and its parent, the send.
            out[id_at[i]:id_at[i] + 8] = publish_id
            out[id_at[PAIRS + 2 * i]:id_at[PAIRS + 2 * i] + 8] = struct.pack(">Q", next_id | (1 << 63))
            out[id_at[PAIRS + 2 * i + 1]:id_at[PAIRS + 2 * i + 1] + 8] = publish_id
            start = now_ns - 50_000_000
            for j, t in ((2 * i, start), (2 * i + 1, start + 2_000_000),
                         (2 * PAIRS + 2 * i, start + 20_000_000), (2 * PAIRS + 2 * i + 1, start + 30_000_000)):
                out[time_at[j]:time_at[j] + 8] = struct.pack("<Q", t)
        session.post(url, data=bytes(out), headers={"Content-Type": "application/x-protobuf"}, timeout=30)
        n += 1
        sent.value = n
        delay = started + n * interval - time.monotonic()
        if delay > 0:
            time.sleep(delay)


def _scrapes(url: str, seconds: float, out) -> None:
    """The scraper process: a GET of `url` every 50 ms for `seconds`; each scrape's seconds put on `out`."""
    session = requests.Session()
    taken = []
    ends = time.monotonic() + seconds
    while time.monotonic() < ends:
        t = time.perf_counter()
        session.get(url, headers={"Accept-Encoding": "gzip"}, timeout=10).content
        taken.append(time.perf_counter() - t)
        time.sleep(0.05)
    out.put(taken)


def _scraper(url: str, seconds: float) -> tuple[multiprocessing.Process, multiprocessing.Queue]:
    out = multiprocessing.Queue()
    process = multiprocessing.Process(target=_scrapes, args=(url, seconds, out))
    process.start()
    return process, out


def _sink(port: int) -> None:
    """The sink process: answers each POST 200 once its body is read, and keeps nothing."""
    class Discard(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass
    ThreadingHTTPServer(("127.0.0.1", port), Discard).serve_forever()


def _sunk(url: str, args: argparse.Namespace, seconds: float) -> list[float]:
    """Scrapes of `url` while the load goes for `seconds` to the sink, which is then ended."""
    port = free_port()
    sink = multiprocessing.Process(target=_sink, args=(port,), daemon=True)
    sink.start()
    while True:  # until the sink listens
        try:
            requests.post(f"http://127.0.0.1:{port}/", data=b"", timeout=10)
            break
        except requests.ConnectionError:
            time.sleep(0.05)
    scraper, out = _scraper(url, seconds)
    load = multiprocessing.Process(target=_load, args=(f"http://127.0.0.1:{port}/v1/traces", args.rate, seconds,
                                                      args.services, args.destinations, multiprocessing.Value("l", 0)))
    load.start()
    taken = out.get()
    scraper.join()
    load.join()
    sink.terminate()
    return taken


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=int, default=10_000, help="messages a second")
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--services", type=int, default=4)
    parser.add_argument("--destinations", type=int, default=50)
    args = parser.parse_args()

    cfg = ExporterConfig(management_url=f"http://127.0.0.1:{free_port()}", username="guest",
                         password=Secret("guest"), listen=("127.0.0.1", free_port()), interval=10.0, timeout=1.0,
                         deadline=3.0, verify=True, selection=Selection(), limits=Limits(), web=WebSecurity(),
                         thresholds=Thresholds(), max_trace_messages=5_000_000)
    exporter = Exporter(cfg)
    measured: list[bytes] = []
    received = [0]
    receive = exporter.traces.receive

    def kept(body, content_type, encoding=""):
        received[0] += 1
        if received[0] % 50 == 0:
            measured.append(body)
        return receive(body, content_type, encoding)
    exporter.traces.receive = kept
    exporter.start()
    me = psutil.Process(os.getpid())
    try:
        metrics = exporter.url + "/metrics"
        baseline = min(60.0, args.seconds)
        scraper, out = _scraper(metrics, baseline)
        idle = out.get()
        scraper.join()
        sunk = _sunk(metrics, args, baseline)
        sent = multiprocessing.Value("l", 0)
        load = multiprocessing.Process(target=_load, args=(exporter.url + "/v1/traces", args.rate, args.seconds,
                                                          args.services, args.destinations, sent))
        started = time.monotonic()
        mine_before = sum(me.cpu_times()[:2])
        load.start()
        generator = psutil.Process(load.pid)
        scraper, out = _scraper(metrics, args.seconds)
        while exporter.traces.worker.pid is None:  # started by the first request
            time.sleep(0.01)
        worker = psutil.Process(exporter.traces.worker.pid)
        rss = []
        while load.is_alive():
            load_cpu = sum(generator.cpu_times()[:2])
            load.join(timeout=10)
            rss.append((time.monotonic() - started, me.memory_info().rss, worker.memory_info().rss, sent.value))
        loaded = out.get()
        scraper.join()
        took = time.monotonic() - started
        # The worker's CPU, its start (an interpreter and its imports) included.
        worker_cpu = sum(worker.cpu_times()[:2])
        mine = sum(me.cpu_times()[:2]) - mine_before
        window = exporter.traces.window(time.time())
    finally:
        exporter.stop()
    decode = []
    for body in measured:
        t = time.thread_time()
        for _ in range(5):
            ExportTraceServiceRequest.FromString(body)
        decode.append((time.thread_time() - t) / 5)
    requests_sent = rss[-1][3]
    ours = worker_cpu / requests_sent
    alone = sum(decode) / len(decode)
    print(f"load: {requests_sent} requests of {BATCH} spans in {took:.0f} s "
          f"({requests_sent * PAIRS / took:,.0f} messages a second, {requests_sent * BATCH / took:,.0f} spans a "
          f"second); published {sum(f.published for f in window.flows):,}, delivered "
          f"{sum(f.delivered for f in window.flows):,}, dropped spans {window.dropped:,}")
    print(f"CPU per request: the trace worker {ours * 1000:.2f} ms, opentelemetry-proto's decode alone "
          f"{alone * 1000:.2f} ms ({ours / alone:.2f}x; decode of {len(measured)} requests); the worker "
          f"{worker_cpu:.1f} s CPU over {took:.0f} s ({worker_cpu / took:.0%} of a core); the exporter's process "
          f"{mine:.1f} s ({mine / took:.0%} of a core)")
    print("RSS (MiB) by time, exporter + worker: " + ", ".join(f"{t:.0f}s {r / 2**20:.0f} + {w / 2**20:.0f}"
                                                              for t, r, w, _ in rss[::3]))
    print(f"the load process: {load_cpu:.1f} s CPU ({load_cpu / took:.0%} of a core)")
    for name, values in (("with no spans", idle), ("with the load sent to the sink", sunk),
                         ("with the load sent to the exporter", loaded)):
        print(f"scrape {name}: " + ", ".join(f"p{q * 100:g} {sample_quantile(values, q) * 1000:.1f} ms"
                                             for q in (0.5, 0.9, 0.99)) +
              f", max {max(values) * 1000:.1f} ms ({len(values)} scrapes)")


if __name__ == "__main__":
    main()
