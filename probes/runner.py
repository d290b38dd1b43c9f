"""The probes' AMQP side: one publishing and one consuming connection (pika, asynchronous), a channel
per target on each, all driven by one I/O loop in one thread.

Publishers and consumers use separate connections, as RabbitMQ advises: when an alarm blocks publishing,
the consumers keep draining. A lost connection is re-established with capped exponential backoff and
jitter; what was unconfirmed when it was lost is published again (and counted), so the audit then shows
duplicates, never losses. Given several entries (a cluster's nodes), a lost connection is re-established on
the next one, at once; the backoff grows only once every entry has failed.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid
from collections.abc import Callable
from collections.abc import Sequence
from dataclasses import dataclass

import pika
import pika.exceptions
from pika.adapters.select_connection import IOLoop

from ackscope.core.amqp import Endpoint, describe_close
from ackscope.core.secret import Secret
from ackscope.model.probes import CONNECTION_PREFIX

from .audit import DeliveryAudit
from .confirms import ConfirmTracker, Outstanding
from .events import Event, EventLog, now_us
from .message import CONTENT_TYPE, ProbeMessage
from .statistics import ProbeStatistics
from .targets import EXCHANGE, Target
from .wire import TimedConnection, WireClock

log = logging.getLogger("ackscope.probes")

BACKOFF_MIN, BACKOFF_MAX = 1.0, 30.0
MAX_IN_FLIGHT = 5_000  # unconfirmed publishes per target; beyond it the publisher waits (bounded memory)
HOUSEKEEPING_S = 1.0
BURST_SLICE = 2  # publishes made per turn of the I/O loop in a burst (chosen by measurement: docs/benchmarks.md)
NACK_RUN_S = 5.0  # every publish nacked this long, none acked: the publishing channel is replaced


@dataclass(frozen=True)
class ProbeSettings:
    confirm_timeout: float = 30.0
    loss_deadline: float = 120.0


@dataclass
class _Consumer:
    """One of a target's consumers: its consumer tag (pika's, unique to the run) and what it holds unacked."""

    tag: str
    unacked: int = 0


class _TargetProbe:
    """One target's publisher and consumer state; every method runs on the I/O loop's thread."""

    def __init__(self, runner: ProbeRunner, target: Target):
        self.r, self.t = runner, target
        self.confirms = ConfirmTracker()
        self.audit = DeliveryAudit(int(runner.settings.loss_deadline * 1e9))
        self.next_seq = 1
        self.pub_channel = None
        self.consumers: dict[object, _Consumer] = {}  # by channel, each consuming
        self.consumers_opened = 0
        self.republish: list[Outstanding] = []
        self.returned: set[int] = set()  # returned before their ack: routed nowhere, so nothing to deliver
        self.requeued_at: dict[int, int] = {}
        self.sent_at: dict[int, int] = {}  # seq -> when its publish left, until its first delivery
        self.pub_wire: WireClock | None = None
        # A stream target's next offset to read: after the last delivered, so a consumer that attaches again
        # neither misses nor repeats; from the stream's first (its retention: an hour, a few MB) at the start.
        self.next_offset: int | None = None
        self.publisher_opened = False
        self.last_error: str | None = None
        self._tick = None
        self.nacked_since: int | None = None  # monotonic ns of the first nack since the last ack
        self.renewing = None  # the publishing channel closed on purpose, to be opened again at once
        self.renewals_said = False

    # -- events ---------------------------------------------------------------------------------------
    def event(self, kind: str, seq: int, ts_us: int | None = None, **fields) -> None:
        if self.r.events is not None:
            self.r.events.append(Event(self.r.run_id, self.t.name, self.t.queue_type, self.t.persistent, seq, kind,
                                       ts_us or now_us(), **fields))

    def count(self, name: str, n: int = 1) -> None:
        self.r.stats.count(self.t, name, n)

    def update_up(self) -> None:
        up = self.pub_channel is not None and len(self.consumers) == self.t.consumers
        self.r.stats.set_up(self.t, up)

    def fail(self, role: str, reason: str) -> None:
        if reason != self.last_error:
            log.error("probe %s (%s): %s", self.t.name, role, reason)
            self.last_error = reason

    # -- declaring --------------------------------------------------------------------------------------
    def declare(self, channel, then: Callable[[], None]) -> None:
        """The exchange, the queue and its binding, then `then` (on either connection: both must cope with
        the queue having gone)."""
        t = self.t

        def next_step(step: Callable[[], object]) -> Callable[[object], None]:
            # A reply can come as the channel closes (its node failing over): the step would raise inside
            # pika's reader and abort the whole connection. The channel's close callback takes over instead.
            return lambda _frame: step() if channel.is_open else None

        channel.exchange_declare(
            EXCHANGE, exchange_type="direct", durable=True,
            callback=next_step(lambda: channel.queue_declare(
                t.queue, durable=True, arguments=t.arguments(),
                callback=next_step(lambda: channel.queue_bind(t.queue, EXCHANGE, routing_key=t.queue,
                                                              callback=next_step(then))))))

    # -- publisher --------------------------------------------------------------------------------------
    def open_publisher(self, connection) -> None:
        connection.channel(on_open_callback=self._publisher_opened)

    def _publisher_opened(self, channel) -> None:
        channel.add_on_close_callback(lambda ch, reason: self._publisher_closed(ch, reason))
        channel.add_on_return_callback(self._on_return)
        self.declare(channel, lambda: channel.confirm_delivery(
            ack_nack_callback=self._on_confirm, callback=lambda _f: self._publisher_ready(channel)))

    def _publisher_ready(self, channel) -> None:
        if not channel.is_open:  # closed as confirm.select was answered: its close callback takes over
            return
        self.pub_channel = channel
        self.pub_wire = channel.connection.wire
        if self.publisher_opened:
            self.count("reconnects")
        self.publisher_opened = True
        self.last_error = None
        self.update_up()
        pending, self.republish = self.republish, []
        for entry in pending:
            self._publish(entry.seq, republish=True)
        self._schedule_tick()

    def _publisher_closed(self, channel, reason) -> None:
        if self.pub_channel is channel or self.pub_channel is None:
            self.pub_channel = None
            # The broker's numbering of this channel is gone: publish these again on the next one.
            self.republish.extend(self.confirms.drain())
            self.returned.clear()
            self.update_up()
        if self.renewing is channel:
            self.renewing = None
            self.r.later(0, lambda: self.r.reopen(self, "publisher", channel.connection))
            return
        # Only a channel-level error is this target's own; a lost connection is said once, by the runner.
        if isinstance(reason, pika.exceptions.ChannelClosedByBroker) and not self.r.stopping:
            self.fail("publisher", describe_close(reason))
            self.r.later(BACKOFF_MAX, lambda: self.r.reopen(self, "publisher", channel.connection))

    def _schedule_tick(self) -> None:
        if self._tick is not None:  # a channel reopened before the old chain noticed: one chain only
            self.r.ioloop.remove_timeout(self._tick)
        self._tick = self.r.later(1.0 / self.t.rate, self._on_tick)

    def _on_tick(self) -> None:
        self._tick = None
        if self.pub_channel is None:
            return
        self.publish_some(1)
        self._schedule_tick()

    def publish_some(self, n: int) -> None:
        if self.pub_channel is None or not self.pub_channel.is_open:  # a burst's slices outlive a closing channel
            return
        if self.r.blocked:  # an alarm: publishing now would only pile up in the broker's socket buffer
            self.count("held_back", n)
            return
        room = MAX_IN_FLIGHT - len(self.confirms)
        for _ in range(min(n, max(room, 0))):
            seq = self.next_seq
            self.next_seq += 1
            self._publish(seq)

    def _publish(self, seq: int, republish: bool = False) -> None:
        t = self.t
        published_ns = time.monotonic_ns()
        body = ProbeMessage(self.r.run_id, t.name, seq, published_ns).encode(t.message_size)
        props = pika.BasicProperties(delivery_mode=2 if t.persistent else 1, content_type=CONTENT_TYPE,
                                     message_id=f"{self.r.run_id}:{seq}")
        tag = self.confirms.published(seq, published_ns)
        self.pub_channel.basic_publish(EXCHANGE, t.queue, body, props, mandatory=True)
        self.pub_wire.when_sent(lambda at_ns: self._left(tag, seq, at_ns, republish))
        self.count("published")
        if republish:
            self.count("republished")
            self.audit.published_again(seq, time.monotonic_ns())

    def _left(self, tag: int, seq: int, at_ns: int, republish: bool) -> None:
        """The publish's last byte went to the kernel: its confirm and delivery clocks start now, and its
        event says so (called from within that write: the wall clock is the write's)."""
        self.confirms.sent(tag, at_ns)
        self.sent_at[seq] = at_ns
        self.event("republished" if republish else "published", seq)

    def _on_confirm(self, frame) -> None:
        method = frame.method
        now = self.pub_wire.read_ns  # when the ack frame was read, not when pika came round to dispatch it
        settled = self.confirms.settle(method.delivery_tag, method.multiple, now)
        if not settled:
            return
        acked = isinstance(method, pika.spec.Basic.Ack)
        self._follow_nack_run(acked)
        self.r.stats.observe(self.t, "confirm_batch_size", len(settled))
        seen_us = now_us()  # one frame, one instant: the pipeline tells frames apart by it
        for s in settled:
            if acked:
                self.r.stats.observe(self.t, "confirm_latency_seconds", s.latency_s)
                self.r.stats.observe_entry(self.t, self.r.entry_of("publisher"), s.latency_s)
                self.event("confirmed", s.seq, seen_us, latency_s=s.latency_s, batch_size=len(settled))
                if s.seq in self.returned:
                    self.returned.discard(s.seq)
                else:
                    self.audit.confirmed(s.seq, now)
            else:
                self.event("nacked", s.seq, seen_us, batch_size=len(settled))
        self.count("confirmed" if acked else "nacked", len(settled))

    def _follow_nack_run(self, acked: bool) -> None:
        """A channel whose every publish is nacked for NACK_RUN_S is replaced: the channel, not the messages, is
        then the trouble. Seen on RabbitMQ 3.10: a channel opened while a quorum queue elects a new leader (the
        probes' node, where the leader was, has just died) takes the dead leader from the queue record and nacks
        every publish to that queue from then on, for as long as it lives (rabbitmq-server#9241 fixed it in 3.11
        and 3.12). A new channel reads the record again. The nacks stay counted; the replacement is said once per
        run of nacks, and counted as a reconnect."""
        now = time.monotonic_ns()
        if acked:
            if self.renewals_said:
                log.info("probe %s: publishes are confirmed again", self.t.name)
                self.renewals_said = False
            self.nacked_since = None
            return
        if self.nacked_since is None:
            self.nacked_since = now
            return
        channel = self.pub_channel
        if now - self.nacked_since < NACK_RUN_S * 1e9 or channel is None or not channel.is_open:
            return
        (log.debug if self.renewals_said else log.warning)(
            "probe %s: the broker has nacked every publish for %.0fs; publishing on a new channel",
            self.t.name, (now - self.nacked_since) / 1e9)
        self.renewals_said = True
        self.nacked_since = None
        self.renewing = channel
        channel.close()

    def _on_return(self, _channel, _method, _props, body) -> None:
        msg = ProbeMessage.decode(body)
        if msg is None or msg.run_id != self.r.run_id:
            return
        self.returned.add(msg.seq)
        self.count("returned")
        self.event("returned", msg.seq)

    # -- consumer ---------------------------------------------------------------------------------------
    def open_consumer(self, connection, channels: int | None = None) -> None:
        """The target's consumers, each on a channel of its own (`channels` of them; all by default)."""
        for _ in range(self.t.consumers if channels is None else channels):
            connection.channel(on_open_callback=self._consumer_opened)

    def _consumer_opened(self, channel) -> None:
        channel.add_on_close_callback(lambda ch, reason: self._consumer_closed(ch, reason))
        channel.add_on_cancel_callback(lambda _f: self._consumer_cancelled(channel))
        self.declare(channel, lambda: channel.basic_qos(
            prefetch_count=self.t.prefetch, callback=lambda _f: self._consume(channel)))

    def _consume(self, channel) -> None:
        if not channel.is_open:  # closed as basic.qos was answered: its close callback takes over
            return
        # From "next", whatever was published before the consumer attached (a node just started takes seconds to
        # place a new stream) would never come: counted lost. Earlier runs' messages it reads are set aside.
        args = ({"x-stream-offset": "first" if self.next_offset is None else self.next_offset}
                if self.t.queue_type == "stream" else None)
        tag = channel.basic_consume(self.t.queue, self._on_delivery, auto_ack=False, arguments=args)
        self.consumers[channel] = _Consumer(tag)
        self.consumers_opened += 1
        if self.consumers_opened > self.t.consumers:
            self.count("reconnects")
        self.update_up()

    def _consumer_cancelled(self, channel) -> None:
        # The broker cancelled us (basic.cancel: the queue was deleted, its node failed, or a mirrored queue
        # failed over; a quorum queue's leader change does not cancel, docs/clusters.md). Declare it, consume again.
        self.count("consumer_cancels")
        self.fail("consumer", f"the broker cancelled the consumer of {self.t.queue} (queue deleted, its node "
                              "down, or failed over); declaring it again and consuming again")
        self.r.later(1.0, lambda: self.declare(channel, lambda: self._consume(channel))
                     if channel.is_open else None)

    def _consumer_closed(self, channel, reason) -> None:
        gone = self.consumers.pop(channel, None)
        if gone is not None:
            self.audit.consumer_gone(gone.tag)
            self.update_up()
        if isinstance(reason, pika.exceptions.ChannelClosedByBroker) and not self.r.stopping:
            self.fail("consumer", describe_close(reason))
            self.r.later(BACKOFF_MAX, lambda: self.r.reopen(self, "consumer", channel.connection, 1))

    def _on_delivery(self, channel, method, props, body) -> None:
        now = channel.connection.wire.read_ns
        self.r.read_acks()
        offset = (props.headers or {}).get("x-stream-offset")  # a stream's delivery says where it was read
        if isinstance(offset, int):
            self.next_offset = offset + 1
        msg = ProbeMessage.decode(body)
        if msg is None or msg.run_id != self.r.run_id or msg.target != self.t.name:
            channel.basic_ack(method.delivery_tag)  # another run's leftovers: not ours to audit
            return
        seq = msg.seq
        self.count("delivered")
        if method.redelivered:
            self.count("redelivered")
        requeue = (not method.redelivered and self.t.requeue_share > 0
                   and self.r.random.random() < self.t.requeue_share)
        duplicate = self.audit.delivered(seq, now, requeue=requeue)
        if duplicate:
            self.count("duplicates")
        requeued_at = self.requeued_at.pop(seq, None)
        # From when the publish left (the message's own stamp, taken as it was made, when this process no
        # longer knows: a second delivery of it).
        latency_s = (now - self.sent_at.pop(seq, msg.published_ns)) / 1e9
        if requeued_at is not None:
            self.r.stats.observe(self.t, "redelivery_latency_seconds", (now - requeued_at) / 1e9)
        else:
            self.r.stats.observe(self.t, "delivery_latency_seconds", latency_s)
        self.event("delivered", seq, latency_s=latency_s, redelivered=method.redelivered,
                   consumer=method.consumer_tag)
        if not self.audit.in_order(method.consumer_tag, seq, method.redelivered):
            self.count("out_of_order_redelivered" if method.redelivered else "out_of_order_first")
        if requeue:
            channel.basic_nack(method.delivery_tag, requeue=True)
            channel.connection.wire.when_sent(lambda at_ns: self.requeued_at.__setitem__(seq, at_ns))
            self.count("requeued")
            self.event("requeued", seq)
            return
        if channel in self.consumers:
            self.consumers[channel].unacked += 1
        if self.t.processing_delay:
            self.r.later(self.t.processing_delay, lambda: self._ack(channel, method.delivery_tag, seq))
        else:
            self._ack(channel, method.delivery_tag, seq)

    def _ack(self, channel, tag: int, seq: int) -> None:
        if channel not in self.consumers or not channel.is_open:
            return  # the channel died meanwhile: the broker requeues the delivery itself
        channel.basic_ack(tag)
        self.consumers[channel].unacked -= 1
        self.event("acked", seq)

    # -- housekeeping -------------------------------------------------------------------------------------
    def housekeeping(self) -> None:
        now = time.monotonic_ns()
        for entry in self.confirms.expire(now, int(self.r.settings.confirm_timeout * 1e9)):
            self.count("confirm_timeouts")
            self.event("confirm_timeout", entry.seq)
        lost = self.audit.expire(now)
        if lost:
            self.count("lost", len(lost))
            log.error("probe %s: %d confirmed message(s) not delivered within %gs (first seq %d)", self.t.name,
                      len(lost), self.r.settings.loss_deadline, lost[0][0])
        horizon = now - int(self.r.settings.loss_deadline * 1e9)
        for seq in [s for s, at in self.requeued_at.items() if at < horizon]:
            del self.requeued_at[seq]
        while self.sent_at and next(iter(self.sent_at.values())) < horizon:  # in the order they left
            del self.sent_at[next(iter(self.sent_at))]
        self.r.stats.set_gauge(self.t, "consumer_unacked", sum(c.unacked for c in self.consumers.values()))
        self.r.stats.set_gauge(self.t, "consumers", len(self.consumers))
        self.r.stats.set_gauge(self.t, "awaiting_delivery", self.audit.awaiting)
        oldest = self.audit.oldest_awaiting_ns()
        self.r.stats.set_gauge(self.t, "oldest_awaiting_seconds", 0.0 if oldest is None else (now - oldest) / 1e9)


class ProbeRunner:
    """All targets against one broker, in one background thread; start() returns at once."""

    def __init__(self, entries: Sequence[Endpoint], targets: tuple[Target, ...], stats: ProbeStatistics,
                 settings: ProbeSettings = ProbeSettings(), events: EventLog | None = None):
        if not entries:
            raise ValueError("the probes need at least one AMQP URL")
        self.entries = tuple(entries)
        self.targets = targets
        self.stats = stats
        self.settings = settings
        self.events = events
        self.run_id = uuid.uuid4().hex[:12]
        self.random = random.Random()
        self.blocked = False
        self.stopping = False
        self.probes = [_TargetProbe(self, t) for t in targets]
        self.ioloop = IOLoop()
        self._connections: dict[str, TimedConnection | None] = {"publisher": None, "consumer": None}
        self._backoff = {"publisher": BACKOFF_MIN, "consumer": BACKOFF_MIN}
        # What was said when the probes lost the broker, until both connections are open again: an outage is
        # one line when it starts and one when it ends, whichever connection fails first and however its
        # reason changes meanwhile (the counts are in ackscope_probe_connection_failures_total).
        self._outage: str | None = None
        self._at = {"publisher": 0, "consumer": 0}  # each role's entry: the one it is on, or tries next
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------------------
    def start(self) -> None:
        if self.events is not None:
            self.events.start()
        self._thread = threading.Thread(target=self._run, name="ackscope-probes", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.stopping = True

        def close_all():
            for conn in self._connections.values():
                if conn is not None and conn.is_open:
                    conn.close()
            self.ioloop.call_later(1.0, self.ioloop.stop)
        self.ioloop.add_callback_threadsafe(close_all)
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self.events is not None:
            self.events.stop()

    def _run(self) -> None:
        for role in self._connections:
            self._connect(role)
        self.later(HOUSEKEEPING_S, self._housekeeping)
        for p in self.probes:
            if p.t.burst_size:
                self.later(p.t.burst_interval, lambda p=p: self._burst(p))
        try:
            self.ioloop.start()
        except Exception as e:  # a bug must not pass silently: say it, and show the probes down
            log.error("probe loop crashed: %s: %s", type(e).__name__, e)
            log.debug("probe loop crash", exc_info=True)
            for p in self.probes:
                self.stats.set_up(p.t, False)

    def later(self, delay: float, fn: Callable[[], object]):
        return self.ioloop.call_later(delay, fn)

    # -- connections -------------------------------------------------------------------------------------
    def _connect(self, role: str) -> None:
        if self.stopping:
            return
        entry = self.entries[self._at[role]]
        params = pika.URLParameters(entry.url.reveal())
        if entry.ssl_options is not None:
            params.ssl_options = entry.ssl_options
        params.client_properties = {"connection_name": f"{CONNECTION_PREFIX} {role}"}
        self._connections[role] = TimedConnection(
            params, on_open_callback=lambda c: self._opened(role, c),
            on_open_error_callback=lambda c, e: self._lost(role, e),
            on_close_callback=lambda c, e: self._lost(role, e), custom_ioloop=self.ioloop)

    def entry_of(self, role: str) -> str:
        """The node (host:port) the role's connection is on, or tries next."""
        return self.entries[self._at[role]].node

    def _opened(self, role: str, connection) -> None:
        self._backoff[role] = BACKOFF_MIN
        self.stats.set_entry(role, self.entry_of(role))
        if self._outage is not None and all(c is not None and c.is_open for c in self._connections.values()):
            log.info("probe connections are back (publisher on %s, consumer on %s)", self.entry_of("publisher"),
                     self.entry_of("consumer"))
            self._outage = None
        if role == "publisher":
            connection.add_on_connection_blocked_callback(self._on_blocked)
            connection.add_on_connection_unblocked_callback(self._on_unblocked)
        for p in self.probes:
            p.open_publisher(connection) if role == "publisher" else p.open_consumer(connection)

    def _lost(self, role: str, reason) -> None:
        self._connections[role] = None
        self.stats.set_entry(role, None)
        if role == "publisher" and self.blocked:
            self._on_unblocked()
        if self.stopping:
            return
        self.stats.connection_failed(role)
        message, failed = describe_close(reason), self.entries[self._at[role]]
        self._at[role] = (self._at[role] + 1) % len(self.entries)
        elsewhere = self._at[role] != 0  # another node to try, at once
        then = f"trying {self.entries[self._at[role]].display}" if elsewhere else "retrying with backoff"
        said = f"probe {role} connection to {failed.display}: {message}; {then}"
        if self._outage is None:
            log.error("%s", said)
            self._outage = said
        else:
            log.debug("%s", said)
        if elsewhere:
            self.later(0, lambda: self._connect(role))
            return
        delay = self._backoff[role] * random.uniform(0.5, 1.0)  # jitter: many probes must not retry in step
        self._backoff[role] = min(self._backoff[role] * 2, BACKOFF_MAX)
        self.later(delay, lambda: self._connect(role))

    def reopen(self, probe: _TargetProbe, role: str, connection, channels: int = 1) -> None:
        """Open a target's channel (or `channels` consumer channels) again on the connection it lost it on. If
        that connection has gone since, reconnecting has opened every target's channels already."""
        conn = self._connections[role]
        if conn is connection and conn.is_open and not self.stopping:
            probe.open_publisher(conn) if role == "publisher" else probe.open_consumer(conn, channels)

    def _on_blocked(self, _connection, _frame) -> None:
        self.blocked = True
        self.stats.set_blocked(True)
        log.warning("the broker blocks the probe's publishing connection (a resource alarm): publishing paused")

    def _on_unblocked(self, _connection=None, _frame=None) -> None:
        self.blocked = False
        self.stats.set_blocked(False)
        log.info("the broker no longer blocks the probe's publishing connection")

    def read_acks(self) -> None:
        """Read what has arrived on the publisher's connection, now. The kernel stamps what waits unread with
        the newest arrival, so an ack read only after the consumer's long turn would be timed by the ack that
        came last (issue 14 measured +2 to +4 ms at p99 in bursts without this)."""
        conn = self._connections["publisher"]
        if conn is not None and conn.is_open:
            conn.read_now()

    # -- timers --------------------------------------------------------------------------------------------
    def _burst(self, probe: _TargetProbe) -> None:
        self._burst_slice(probe, probe.t.burst_size)
        self.later(probe.t.burst_interval, lambda: self._burst(probe))

    def _burst_slice(self, probe: _TargetProbe, left: int) -> None:
        """A burst goes out BURST_SLICE publishes per turn of the loop: each slice is written before the
        next is made, and the acks that arrived meanwhile are read first, so the burst loads the broker, not
        the probe's own buffers."""
        self.read_acks()
        probe.publish_some(min(left, BURST_SLICE))
        if left > BURST_SLICE:
            self.later(0, lambda: self._burst_slice(probe, left - BURST_SLICE))

    def _housekeeping(self) -> None:
        for p in self.probes:
            p.housekeeping()
        self.later(HOUSEKEEPING_S, self._housekeeping)
