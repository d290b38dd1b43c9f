"""Render a snapshot once per poll into the bytes every scrape then serves unchanged.

Only ackscope_snapshot_age_seconds depends on the moment of the scrape; it is written in front of the
pre-rendered body at serve time (as a separate gzip member when the body is compressed, which any
gzip reader, Prometheus' included, joins back into one stream). Bodies are kept gzipped only; the JSON
documents are rendered when first asked for.
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import json
import threading
import time
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ackscope.model.events import BROKER_LOG, Breaks, cause
from ackscope.model.findings import Diagnosis
from ackscope.model.probes import ProbeStats
from ackscope.model.snapshot import Snapshot, fullest_consuming
from ackscope.model.traces import GONE, UNPLACED, WAITING, TraceWindow, quantile_bounds, said

from .cardinality import Limits, shape
from .collectors.breaks import BreakCollector
from .collectors.channels import ChannelCollector
from .collectors.connections import ConnectionCollector
from .collectors.consumers import ConsumerCollector
from .collectors.federation import FederationCollector
from .collectors.findings import FindingCollector
from .collectors.links import LinkCollector
from .collectors.nodes import NodeCollector
from .collectors.oldest import OldestMessageCollector
from .collectors.overview import OverviewCollector
from .collectors.probes import ProbeCollector
from .collectors.queues import QueueCollector
from .collectors.self_metrics import SelfCollector
from .collectors.shovels import ShovelCollector
from .collectors.streams import StreamCollector
from .collectors.traces import TraceCollector
from .collectors.upgrades import UpgradeCollector
from .status import PollStatus
from .text_format import LabelSets, families, text

# Level 1: at 5,000 queues and 5,000 channels (13 MB of text) 25 ms and 628 kB a poll, against level 5's 45 ms and
# 558 kB; a tenth more bytes per scrape for half the CPU of a poll's largest single step after the render.
_GZIP_LEVEL = 1


def compressed(chunks: Iterable[bytes]) -> bytes:
    """One gzip member of the chunks at our level, compressed as they come: the whole text is never held
    uncompressed (23 MB at 50,000 queues; with the last poll's copy and the join's it was a fifth of the
    exporter's peak)."""
    compressor = zlib.compressobj(_GZIP_LEVEL, zlib.DEFLATED, 31)  # wbits 31: the gzip format
    out = [compressor.compress(chunk) for chunk in chunks]
    out.append(compressor.flush())
    return b"".join(out)


class Document:
    """A JSON document rendered at most once, when first asked for, and kept gzipped: the snapshot's is megabytes
    on a large broker (25 MB at 50,000 queues), which a poll nobody reads need not build."""

    def __init__(self, render: Callable[[], bytes]):
        self._render: Callable[[], bytes] | None = render
        self._gz = b""
        self._lock = threading.Lock()

    def gz(self) -> bytes:
        with self._lock:
            if self._render is not None:
                self._gz = compressed([self._render()])
                self._render = None
            return self._gz


@dataclass(frozen=True)
class Exposition:
    metrics_gz: bytes
    snapshot: Document
    snapshot_taken_at: float | None
    findings: Document
    breaks: Document
    overview: Document
    traces: Document

    def age_text(self, now: float | None = None) -> bytes:
        """The scrape-time family: seconds since the snapshot behind /api/snapshot was taken."""
        head = (b"# HELP ackscope_snapshot_age_seconds Seconds since the last good snapshot of the broker.\n"
                b"# TYPE ackscope_snapshot_age_seconds gauge\n")
        if self.snapshot_taken_at is None:
            return head
        age = max(0.0, (now or time.time()) - self.snapshot_taken_at)
        return head + f"ackscope_snapshot_age_seconds {age:.3f}\n".encode()

    def metrics_body(self, gzipped: bool, now: float | None = None) -> bytes:
        if gzipped:
            return compressed([self.age_text(now)]) + self.metrics_gz
        # Prometheus asks for gzip; a person with curl gets the text unpacked for them (zlib lets go of the GIL).
        return self.age_text(now) + gzip.decompress(self.metrics_gz)


def render(snapshot: Snapshot | None, status: PollStatus, limits: Limits,
           diagnosis: Diagnosis = Diagnosis(), label_sets: LabelSets | None = None,
           breaks: Breaks | None = None, previous: Snapshot | None = None,
           traces: TraceWindow | None = None) -> Exposition:
    """The exposition for the latest poll. Broker series come only from a snapshot the last poll produced:
    after a failed poll /metrics says so (ackscope_up 0) instead of repeating stale numbers, while
    /api/snapshot keeps the last good snapshot, marked stale, for the UI. `label_sets`: the last render's,
    kept by the caller from poll to poll. `breaks`: what the broker's log told, counted whether or not the
    broker's API answered. `previous`: the good snapshot before `snapshot`, for the landing page's rates.
    `traces`: what the applications' spans told, rendered whether or not the broker's API answered."""
    shaped = shape(snapshot, limits) if snapshot is not None and status.up else None
    collectors = [SelfCollector(status, shaped), BreakCollector(breaks), TraceCollector(traces)]
    if shaped is not None:
        collectors += [OverviewCollector(snapshot), NodeCollector(snapshot), ConnectionCollector(snapshot),
                       ChannelCollector(shaped), ConsumerCollector(shaped), LinkCollector(snapshot),
                       QueueCollector(shaped), OldestMessageCollector(shaped, diagnosis), StreamCollector(snapshot),
                       ShovelCollector(snapshot), FederationCollector(snapshot), FindingCollector(diagnosis),
                       UpgradeCollector(diagnosis)]
    return Exposition(
        metrics_gz=compressed(families(collectors, label_sets)),
        snapshot=Document(lambda: snapshot_json(snapshot, status)),
        snapshot_taken_at=snapshot.taken_at if snapshot is not None else None,
        findings=Document(lambda: findings_json(diagnosis, snapshot, status)),
        breaks=Document(lambda: breaks_json(breaks)),
        overview=Document(lambda: overview_json(snapshot, previous, diagnosis, status)),
        traces=Document(lambda: traces_json(traces)),
    )


def probe_metrics(stats: ProbeStats, gzipped: bool = False) -> bytes:
    """The probes' families, rendered per scrape: a few hundred series take well under a millisecond. A
    gzip stream may hold several members, so this may follow the pre-rendered body as one more."""
    body = text([ProbeCollector(stats)])
    return compressed([body]) if gzipped else body


def _status(status: PollStatus) -> dict:
    """What every /api/ document says of the last poll: whether it succeeded, and why not."""
    return {"up": status.up, "stale": not status.up, "last_error": status.last_error}


def _channel(c) -> dict:
    """A channel's record with the prefetch limit RabbitMQ applies to it, which the UI should not recompute."""
    return dict(_record(c), prefetch_limit=c.prefetch_limit)


def findings_json(diagnosis: Diagnosis, snapshot: Snapshot | None, status: PollStatus) -> bytes:
    """/api/findings: the findings of the last good snapshot, worst first, marked stale when the last poll
    failed (and why); the rules its source could not give what they need; and what each later release would change."""
    return json.dumps({**_status(status), "taken_at": None if snapshot is None else snapshot.taken_at,
                       "findings": [f.to_json() for f in diagnosis.findings],
                       "not_evaluated": [n.to_json() for n in diagnosis.not_evaluated],
                       "upgrades": [o.to_json() for o in diagnosis.upgrades]},
                      separators=(",", ":")).encode()


# The consuming channels /api/overview holds: the dashboard's landing page shows the 15 fullest.
OVERVIEW_CHANNELS = 15


def overview_json(snapshot: Snapshot | None, previous: Snapshot | None, diagnosis: Diagnosis,
                  status: PollStatus) -> bytes:
    """/api/overview: what the dashboard's landing page shows and no more (a few kB where /api/snapshot and
    /api/findings are megabytes at 5,000 queues): /api/snapshot's status, /api/findings without the upgrade
    outlooks, and a snapshot cut to the OVERVIEW_CHANNELS fullest consuming channels with their consumers (and
    how many consume in all) and the queues that have redelivered, beside the same queues in the snapshot before
    for their rates."""
    document = {**_status(status), "last_success_at": status.last_success_at, "source": status.source,
                "findings": [f.to_json() for f in diagnosis.findings],
                "not_evaluated": [n.to_json() for n in diagnosis.not_evaluated], "snapshot": None, "previous": None}
    if snapshot is not None:
        channels, consuming = fullest_consuming(snapshot, OVERVIEW_CHANNELS)
        names = {ch.name for ch in channels}
        redelivered = [q for q in snapshot.queues if q.message_stats.redeliver]
        keys = {(q.vhost, q.name) for q in redelivered}
        document["snapshot"] = {
            "taken_at": snapshot.taken_at, "unread": [_record(u) for u in snapshot.unread],
            "channels": [_channel(c) for c in channels],
            "consumers": [_record(c) for c in snapshot.consumers if c.channel in names],
            "consuming_channels": consuming, "queues": [_record(q) for q in redelivered]}
        if previous is not None:
            document["previous"] = {"taken_at": previous.taken_at, "queues": [
                _record(q) for q in previous.queues if (q.vhost, q.name) in keys]}
    return json.dumps(document, separators=(",", ":")).encode()


def breaks_json(breaks: Breaks | None) -> bytes:
    """/api/breaks: the window's events (the timeline of breaks), oldest first, with the sources that told them
    and what could not be read."""
    if breaks is None:
        return b'{"sources":[],"events":[],"problems":[]}'
    document = {"at": breaks.at, "sources": list(breaks.sources), "problems": list(breaks.problems),
                "events": [dict(e._asdict(), cause=cause(e)) for e in breaks.events]}
    if breaks.told_by(BROKER_LOG):  # what the log reader could not read or did not understand, with the first of each
        document["log"] = {"lines": breaks.lines, "unknown_lines": breaks.unknown_lines,
                           "first_unknown": breaks.first_unknown, "not_understood_lines": breaks.not_understood,
                           "first_not_understood": breaks.first_not_understood}
    return json.dumps(document, separators=(",", ":")).encode()


def traces_json(window: TraceWindow | None) -> bytes:
    """/api/traces: each destination and publishing service, worst first (gone, then waiting, then the slowest
    p99 queue time), with its figures since the exporter started and its unprocessed messages now; and what the
    endpoint took in. Percentiles are the histogram's bucket bounds, in words."""
    if window is None:
        return b'{"taken_at":null,"flows":[],"intake":null}'
    flows = []
    for f in window.flows:
        p99 = quantile_bounds(f.queue_time.buckets, 0.99)
        flows.append({
            "destination": f.destination, "service": f.service, "exchange": f.exchange, "queue": f.queue,
            "published": f.published, "publish_errors": f.publish_errors, "delivered": f.delivered,
            "queue_time_p50": said(quantile_bounds(f.queue_time.buckets, 0.5)) if f.queue_time.count else None,
            "queue_time_p99": said(p99) if f.queue_time.count else None, "queue_time_p99_upper": p99[1],
            "processing_p99": said(quantile_bounds(f.processing.buckets, 0.99)) if f.processing.count else None,
            "duplicates": f.duplicates, "redelivered": f.redelivered, "settled": dict(f.settled),
            "skewed": sum(f.skewed.values()), "waiting": f.unprocessed.get(WAITING, 0),
            "gone": f.unprocessed.get(GONE, 0), "unplaced": f.unprocessed.get(UNPLACED, 0),
            "oldest_unprocessed_s": round(f.oldest_unprocessed_s, 1), "consumers": list(f.consumers)})
    flows.sort(key=lambda f: (-f["gone"], -f["waiting"], -(f["queue_time_p99_upper"] if f["delivered"] else 0),
                              f["destination"], f["service"]))
    for f in flows:
        f["queue_time_p99_upper"] = None if f["queue_time_p99_upper"] == float("inf") else f["queue_time_p99_upper"]
    intake = {"spans": dict(window.spans), "not_understood": window.not_understood,
              "first_not_understood": window.first_not_understood, "dropped": window.dropped,
              "repeated": window.repeated, "rejected_requests": window.rejected_requests,
              "orphans": dict(window.orphans), "unrooted": window.unrooted,
              "unprocessed_known": window.unprocessed_known, "deadline_s": window.deadline_s}
    return json.dumps({"taken_at": window.taken_at, "flows": flows, "intake": intake},
                      separators=(",", ":")).encode()


# Records per json.dumps call: one call holds the GIL throughout (0.3 s for 50,000 queues), and a scrape
# waiting for it would be that late; slices of this many take about a millisecond each.
_SLICE = 200


def snapshot_json(snapshot: Snapshot | None, status: PollStatus) -> bytes:
    """/api/snapshot: the last good snapshot with the poller's status, `stale` when the last poll failed."""
    head = json.dumps({**_status(status), "last_success_at": status.last_success_at, "source": status.source},
                      separators=(",", ":"))
    if snapshot is None:
        return (head[:-1] + ',"snapshot":null}').encode()
    parts = [head[:-1], ',"snapshot":{']
    for n, (key, value) in enumerate(_plain(snapshot).items()):
        parts.append(("," if n else "") + json.dumps(key) + ":")
        if isinstance(value, list) and len(value) > _SLICE:
            parts.append("[" + ",".join(json.dumps(value[i:i + _SLICE], separators=(",", ":"))[1:-1]
                                        for i in range(0, len(value), _SLICE)) + "]")
        else:
            parts.append(json.dumps(value, separators=(",", ":")))
    parts.append("}}")
    return "".join(parts).encode()


@functools.cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


def _record(obj) -> dict:
    """A snapshot record as a dict. The records are flat but for their MessageStats (and the overview's Churn), so
    this is a plain field copy: dataclasses.asdict's deep recursion took 0.4 s per poll at 5,000 queues."""
    record = {name: getattr(obj, name) for name in _field_names(type(obj))}
    for nested in ("message_stats", "churn"):
        inner = record.get(nested)
        if inner is not None:
            record[nested] = {name: getattr(inner, name) for name in _field_names(type(inner))}
    return record


def _plain(snapshot: Snapshot) -> dict:
    document = {
        "taken_at": snapshot.taken_at,
        "overview": _record(snapshot.overview),
        "vhosts": list(snapshot.vhosts),
        "notes": list(snapshot.notes),
        "unreported": sorted(snapshot.unreported),
        "unread": [_record(u) for u in snapshot.unread],
        "nodes": [_record(n) for n in snapshot.nodes],
        "connections": [dict(_record(c), blocked=c.blocked, identity=c.identity) for c in snapshot.connections],
        # Derived facts the UI needs and should not recompute.
        "channels": [_channel(c) for c in snapshot.channels],
        "consumers": [_record(c) for c in snapshot.consumers],
        "queues": [_record(q) for q in snapshot.queues],
        "dead_lettered": [_record(d) for d in snapshot.dead_lettered],
        "links": [dict(_record(k), unsettled=k.unsettled) for k in snapshot.links],
        "stream_consumers": [_record(c) for c in snapshot.stream_consumers],
        "stream_publishers": [_record(p) for p in snapshot.stream_publishers],
        "stored_offsets": [_record(o) for o in snapshot.stored_offsets],
        "shovels": [_record(v) for v in snapshot.shovels],
        "federation_links": [_record(k) for k in snapshot.federation_links],
        "settings": _record(snapshot.settings) if snapshot.settings is not None else None,
    }
    return document
