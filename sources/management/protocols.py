"""What AMQP 1.0 and stream clients hold, read beside the lists both sources read from the management API: each
AMQP 1.0 connection's sessions (its links, their credit, what they leave unsettled) and, where the broker has
streams, the stream plugin's consumers, publishers and stored offsets. All of them answer with management
statistics off. A part that fails costs only itself: the rules that need it say "not evaluated"."""

from __future__ import annotations

import time
from concurrent.futures import Executor, wait
from dataclasses import replace
from urllib.parse import quote

from ackscope.model import snapshot as facts
from ackscope.model.snapshot import Snapshot
from ackscope.model.source import FetchError, as_fetch_error

from . import links as links_normalise
from . import streams as streams_normalise
from .client import ManagementClient
from .session_reads import SessionReads

MISSED_WITHOUT = {"sessions": frozenset({facts.AMQP10_LINKS}), "streams": frozenset({facts.STREAM_CLIENTS})}
_LAG_ONLY = "a stream's consumers are known by the Prometheus plugin's largest offset lag per stream, where it is read"
UNLISTED = {404: f"the stream plugin's management (rabbitmq_stream_management) is not enabled: {_LAG_ONLY}",
            400: "with management statistics off the stream plugin lists no stream consumers or publishers: "
                 + _LAG_ONLY}


# The sessions endpoint came with RabbitMQ 4.1 (its management plugin's rabbit_mgmt_wm_connection_sessions, 2024-11).
NO_SESSIONS = ("RabbitMQ {version} has no sessions endpoint (it came in 4.1): AMQP 1.0 links, their credit and "
               "what they leave unsettled are not known")
# With statistics off RabbitMQ lists connections by name only, without their protocol (measured on 4.0.5), or
# none at all (4.3.6): which speak AMQP 1.0, and so their sessions, cannot be found.
NO_CONNECTIONS = ("RabbitMQ {version} lists no connections with their protocol with management statistics off: "
                  "AMQP 1.0 sessions and links cannot be found")


def read(s: Snapshot, client: ManagementClient, deadline: float, pool: Executor, reads: SessionReads
         ) -> tuple[Snapshot, list[FetchError]]:
    """`s` with its AMQP 1.0 links and stream clients, and what could not be read; bounded by `deadline`. The
    connections `reads` says are idle since their last answer are not asked: their links are carried. Where the
    release cannot say (no sessions endpoint; no connections listed), the links are unreported, and why is
    noted."""
    version, release = s.overview.rabbitmq_version, s.overview.release or (0, 0)
    unknown = (NO_SESSIONS if (4, 0) <= release < (4, 1) else
               NO_CONNECTIONS if release >= (4, 0) and s.overview.statistics_disabled and not any(
                   c.protocol for c in s.connections) else
               None)
    # Before RabbitMQ 4 AMQP 1.0 is a plugin whose clients work through channels, and there is no sessions endpoint:
    # asking each of its connections would be a 404 every poll.
    before_4 = s.overview.release is not None and s.overview.release < (4, 0)
    asked = [] if unknown or before_4 else [c for c in s.connections if c.amqp10]
    s, errors = _read(s, asked, client, deadline, pool, reads)
    if unknown:
        s = replace(s, notes=(*s.notes, unknown.format(version=version)),
                    unreported=s.unreported | {facts.AMQP10_LINKS})
    return s, errors


def _read(s: Snapshot, amqp10: list, client: ManagementClient, deadline: float, pool: Executor,
          reads: SessionReads) -> tuple[Snapshot, list[FetchError]]:
    http = client.http
    asked, carried = reads.plan(amqp10, s.taken_at)
    jobs = {("sessions", c.name): (lambda c=c: reads.answered(c, links_normalise.links(c, http.json(
        "sessions", f"/api/connections/{quote(c.name, safe='')}/sessions", {}, deadline)), s.taken_at))
        for c in asked}
    streams = sorted({(q.vhost, q.name) for q in s.queues if q.stream})
    if streams:
        by_name = {c.name: c for c in s.connections}
        jobs[("streams", "consumers")] = lambda: streams_normalise.consumers(
            http.json("streams", "/api/stream/consumers", {}, deadline), by_name)
        jobs[("streams", "publishers")] = lambda: streams_normalise.publishers(
            http.json("streams", "/api/stream/publishers", {}, deadline), by_name)
        for vhost, name in streams:
            jobs[("streams", (vhost, name))] = lambda vhost=vhost, name=name: streams_normalise.stored_offsets(
                vhost, name, http.json("streams", f"/api/stream/{quote(vhost, safe='')}/{quote(name, safe='')}/"
                                       "tracking", {}, deadline))
    futures = {pool.submit(job): key for key, job in jobs.items()}
    done, _ = wait(futures, timeout=max(0.0, deadline - time.monotonic()))
    got: dict = {}
    failed: dict[str, FetchError] = {}
    for future, (part, what) in futures.items():
        if future not in done:
            failed.setdefault(part, FetchError(part, "deadline", "no complete answer within the poll deadline"))
        elif future.exception() is None:
            got[(part, what)] = future.result()
        elif isinstance(future.exception(), (links_normalise.MalformedSessions, streams_normalise.MalformedStreams)):
            failed.setdefault(part, FetchError(part, "malformed", str(future.exception())))
        elif what != "consumers" and getattr(future.exception(), "status", None) == 404:
            continue  # the connection closed, or the stream was deleted, since it was listed: nothing left to read
        else:
            failed.setdefault(part, as_fetch_error(part, future.exception()))
    notes, unreported = list(s.notes), set(s.unreported)
    stream_error = failed.get("streams")
    # The plugin is off (404), or statistics are (400, measured on 4.0.5 and 4.3.6): nothing failed, it is unknown.
    if stream_error is not None and stream_error.status in UNLISTED:
        del failed["streams"]
        notes.append(UNLISTED[stream_error.status])
        unreported.add(facts.STREAM_CLIENTS)
    out = replace(s, notes=tuple(notes), unreported=frozenset(unreported),
                  links=() if "sessions" in failed else (*carried, *(
                      k for (part, _), found in got.items() if part == "sessions" for k in found)),
                  **({} if "streams" in failed or facts.STREAM_CLIENTS in unreported else dict(
                      stream_consumers=tuple(got.get(("streams", "consumers"), ())),
                      stream_publishers=tuple(got.get(("streams", "publishers"), ())),
                      stored_offsets=tuple(o for (p, what), found in got.items()
                                           if p == "streams" and isinstance(what, tuple) for o in found))))
    return out, sorted(failed.values(), key=lambda e: e.endpoint)
