"""Workloads that reproduce, on a broker you point them at, each failure mode a
client can cause, for demos, staging drills and ackscope's own tests. Every connection names itself
`ackscope-scenario <name>`; every queue is `ackscope.scenario.<name>…`, expires 10 minutes after its last
use, and holds at most 100,000 messages. Rates are a few messages per second.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import pika
import pika.exceptions
from pika.adapters.select_connection import IOLoop

from ackscope.core.secret import Secret

log = logging.getLogger("ackscope.scenario")

PREFIX = "ackscope.scenario."
PERSISTENT = pika.BasicProperties(delivery_mode=2)
TRANSIENT = pika.BasicProperties(delivery_mode=1)


class Run:
    """What a scenario's thread gets: connections that name the scenario, queues in its namespace, and a
    stop signal every loop must watch."""

    def __init__(self, name: str, url: Secret, stop: threading.Event):
        self.name, self.url, self.stop = name, url, stop
        self.connections: list[pika.BlockingConnection] = []
        self.failure: BaseException | None = None

    def parameters(self, heartbeat: int | None = None) -> pika.URLParameters:
        params = pika.URLParameters(self.url.reveal())
        params.client_properties = {"connection_name": f"ackscope-scenario {self.name}"}
        if heartbeat is not None:
            params.heartbeat = heartbeat
        return params

    def connect(self, heartbeat: int | None = None) -> pika.BlockingConnection:
        conn = pika.BlockingConnection(self.parameters(heartbeat))
        self.connections.append(conn)
        return conn

    def queue(self, channel, suffix: str = "", durable: bool = True, auto_delete: bool = False, **arguments) -> str:
        name = PREFIX + self.name + suffix
        channel.queue_declare(name, durable=durable, auto_delete=auto_delete,
                              arguments={"x-expires": 600_000, "x-max-length": 100_000, **arguments})
        return name

    def idle(self, conn: pika.BlockingConnection, every: float = 0.2,
             tick: Callable[[], None] | None = None) -> None:
        """Serve the connection (deliveries, heartbeats) until stopped, calling `tick` every `every` s (by
        the clock: deliveries wake the loop early, and must not speed the scenario up)."""
        next_tick = time.monotonic() + every
        while not self.stop.is_set():
            conn.process_data_events(time_limit=max(0.0, next_tick - time.monotonic()))
            if time.monotonic() >= next_tick:
                next_tick = time.monotonic() + every
                if tick is not None:
                    tick()


def _publish(ch, queue: str, count: int, props=PERSISTENT, exchange: str = "", mandatory: bool = False) -> None:
    for i in range(count):
        ch.basic_publish(exchange, queue, f"scenario message {i}".encode(), props, mandatory=mandatory)


def prefetch_unlimited(run: Run) -> None:
    conn = run.connect()
    ch = conn.channel()
    q = run.queue(ch)
    _publish(ch, q, 50)
    ch.basic_consume(q, lambda *a: None)  # manual ack, no basic.qos, never acks
    run.idle(conn)


def auto_ack_consumer(run: Run) -> None:
    conn = run.connect()
    ch = conn.channel()
    q = run.queue(ch)
    ch.basic_consume(q, lambda *a: None, auto_ack=True)
    run.idle(conn, tick=lambda: _publish(ch, q, 4))


def _settling_consumer(messages: int, prefetch: int, every: float, settle: Callable[[object, list[int]], None]):
    """A queue of `messages` consumed with `prefetch` and manual acks; every `every` seconds, `settle`
    decides what happens to the deliveries the consumer holds."""
    def scenario(run: Run) -> None:
        conn = run.connect()
        ch = conn.channel()
        q = run.queue(ch)
        _publish(ch, q, messages)
        ch.basic_qos(prefetch_count=prefetch)
        held: list[int] = []
        ch.basic_consume(q, lambda c, m, p, b: held.append(m.delivery_tag))
        run.idle(conn, every=every, tick=lambda: settle(ch, held))
    return scenario


def _keep(_ch, _held: list[int]) -> None:
    """Never ack: the consumer sits at its prefetch."""


def _ack_one(ch, held: list[int]) -> None:
    if held:
        ch.basic_ack(held.pop())


def _requeue_all(ch, held: list[int]) -> None:
    while held:
        ch.basic_nack(held.pop(), requeue=True)


def delivery_limit_reached(run: Run) -> None:
    """A quorum queue with RabbitMQ 4's default delivery limit of 20 (set explicitly, so that 3.x applies it too)
    and no dead-letter exchange, a consumer that rejects every delivery with requeue (basic.reject raises the
    delivery count on every release; from 4.3 basic.nack does not), and five new messages every two seconds."""
    conn = run.connect()
    ch = conn.channel()
    q = run.queue(ch, **{"x-queue-type": "quorum", "x-delivery-limit": 20})
    ch.basic_qos(prefetch_count=5)
    ch.basic_consume(q, lambda c, m, p, b: c.basic_reject(m.delivery_tag, requeue=True))
    run.idle(conn, every=2.0, tick=lambda: _publish(ch, q, 5))


def overflow_dropped(run: Run) -> None:
    """A queue limited to 10 messages (overflow drop-head, the default) without a dead-letter exchange or a
    consumer, two persistent messages a second into it from a publisher that waits for each confirm: each is
    confirmed, and the oldest are dropped (issue 55's K6: the publisher was told they were safe)."""
    conn = run.connect()
    ch = conn.channel()
    q = run.queue(ch, **{"x-max-length": 10})
    ch.confirm_delivery()  # basic_publish returns once the broker confirmed the message
    _publish(ch, q, 10)
    run.idle(conn, every=0.5, tick=lambda: _publish(ch, q, 1))


def double_ack(run: Run) -> None:
    """Every two seconds, on a channel of its own: publish one message, basic.get it and ack its delivery tag twice
    (an ack in a finally block beside the handler's). The broker closes the channel on the second ack
    (PRECONDITION_FAILED - unknown delivery tag), which only its log says; the connection stays open."""
    conn = run.connect()
    q = run.queue(conn.channel())
    last: list = []  # the round's channel, closed by the broker meanwhile unless its get found nothing

    def round_trip():
        for ch in last:
            if ch.is_open:
                try:
                    ch.close()
                except pika.exceptions.ChannelClosedByBroker:
                    pass  # the broker's close for the double ack crossed ours (seen on 4.0 under load)
        ch = conn.channel()
        last[:] = [ch]
        ch.basic_publish("", q, b"job", PERSISTENT)
        method, _props, _body = ch.basic_get(q)
        if method is not None:
            ch.basic_ack(method.delivery_tag)
            ch.basic_ack(method.delivery_tag)  # the broker closes the channel on this one; pika raises nothing
    run.idle(conn, every=2.0, tick=round_trip)


def channel_per_job(run: Run) -> None:
    """A worker that takes each job on a channel of its own, numbered upwards (as the Java client numbers them), works
    2 s with the channel open, acks and closes the channel itself; the connection stays. Polls see a channel of it at
    a time, a new number each time (channel-churn); the broker's log says nothing went wrong."""
    conn = run.connect()
    q = run.queue(conn.channel())  # channel 1, kept
    numbers = _upwards()
    job: list = []  # the channel of the job in hand, and its delivery tag

    def step():
        if job:
            ch, tag = job.pop()
            if tag is not None:
                ch.basic_ack(tag)
            ch.close()
        ch = conn.channel(channel_number=next(numbers))
        ch.basic_publish("", q, b"job", PERSISTENT)
        method, _props, _body = ch.basic_get(q)
        job.append((ch, method.delivery_tag if method is not None else None))
    run.idle(conn, every=2.0, tick=step)


def _upwards():
    """Channel numbers from 2 to 100, then from 2 again (within any broker's channel_max); 1 is the worker's own."""
    while True:
        yield from range(2, 101)


def get_empty_storm(run: Run) -> None:
    """A client polling an empty queue with basic.get, 100 times a second (a loop that does not pause when a get comes
    back empty): each get a round trip the broker serves for nothing."""
    conn = run.connect()
    ch = conn.channel()
    q = run.queue(ch)

    def poll_ten():
        for _ in range(10):
            ch.basic_get(q, auto_ack=False)
    run.idle(conn, every=0.1, tick=poll_ten)


def temporary_queue_holding(run: Run) -> None:
    """An auto-delete queue of 100 persistent messages, its consumer acking one every two seconds: they go with the
    queue when the consumer does."""
    conn = run.connect()
    ch = conn.channel()
    q = run.queue(ch, auto_delete=True)
    _publish(ch, q, 100)
    ch.basic_qos(prefetch_count=1)
    held: list[int] = []
    ch.basic_consume(q, lambda c, m, p, b: held.append(m.delivery_tag))
    run.idle(conn, every=2.0, tick=lambda: _ack_one(ch, held))


def queue_deleted_holding(run: Run) -> None:
    """Every 30 s, a durable queue declared and given 20 persistent messages (confirmed), then deleted 20 s later
    with them: an operator's or a client's delete, the messages confirmed and gone."""
    conn = run.connect()
    ch = conn.channel()
    ch.confirm_delivery()
    state = {"since": time.monotonic(), "queue": None}

    def cycle():
        age = time.monotonic() - state["since"]
        if state["queue"] is None and age >= 0:
            state["queue"] = run.queue(ch)
            _publish(ch, state["queue"], 20)
        elif state["queue"] is not None and age >= 20:
            ch.queue_delete(state["queue"])
            state.update(queue=None, since=time.monotonic() + 10)
    run.idle(conn, every=1.0, tick=cycle)


def auto_ack_consumer_gone(run: Run) -> None:
    """An auto-ack consumer that lives 10 s at a time, fed 5 messages a second by a publisher on its own connection:
    what it received and had not processed when its connection closed is gone, and the broker counted it done."""
    pub_conn = run.connect()
    pub = pub_conn.channel()
    q = run.queue(pub)
    state: dict = {"conn": None, "since": 0.0}

    def tick():
        _publish(pub, q, 1)
        now = time.monotonic()
        if state["conn"] is not None and now - state["since"] >= 10:
            state["conn"].close()  # the consumer goes, with what it held
            run.connections.remove(state["conn"])
            state["conn"] = None
        elif state["conn"] is None and now - state["since"] >= 12:
            conn = run.connect()
            conn.channel().basic_consume(q, lambda *a: None, auto_ack=True)
            state.update(conn=conn, since=now)
        if state["conn"] is not None:
            state["conn"].process_data_events(time_limit=0)
    run.idle(pub_conn, every=0.2, tick=tick)


def connection_per_message(run: Run) -> None:
    """A publisher that opens a connection for each message, one every two seconds (30 a minute), publishes it and
    closes the connection again; a long-lived consumer on the same connection name acks them. Which client churns,
    the broker's log names (at info level, where it logs connections opened)."""
    conn = run.connect()
    ch = conn.channel()
    q = run.queue(ch)
    ch.basic_qos(prefetch_count=10)
    ch.basic_consume(q, lambda c, m, p, b: c.basic_ack(m.delivery_tag))

    def publish_on_a_new_connection():
        once = pika.BlockingConnection(run.parameters())
        try:
            once.channel().basic_publish("", q, b"one message, one connection", PERSISTENT)
        finally:
            once.close()
    run.idle(conn, every=2.0, tick=publish_on_a_new_connection)


def dead_letter_cycle(run: Run) -> None:
    """Two queues dead-lettering into each other through the default exchange, each with a message TTL (a work queue
    and its retry queue): a confirmed persistent message every two seconds into the work queue expires there, then in
    the retry queue, and the broker drops it as it would come back into the work queue (no consumer rejected it on
    the way round). The broker's log says so once per cycle and queue process; the cycle itself shows in the
    queues' settings. The retry queue is the scenario's own name: the drop is logged leaving it."""
    conn = run.connect()
    ch = conn.channel()
    retry, work = PREFIX + run.name, PREFIX + run.name + ".work"
    run.queue(ch, ".work", **{"x-message-ttl": 500, "x-dead-letter-exchange": "",
                              "x-dead-letter-routing-key": retry})
    run.queue(ch, **{"x-message-ttl": 500, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": work})
    ch.confirm_delivery()
    run.idle(conn, every=2.0, tick=lambda: _publish(ch, work, 1))


def _publishing_to_itself(mode: str, every: float = 0.2):
    """A publisher of one message per `every` s into a queue it also consumes and acks; `mode` is how it
    publishes: "plain" (no confirms), "tx" (a transaction per message) or "confirm" (waiting for each)."""
    def scenario(run: Run) -> None:
        conn = run.connect()
        ch = conn.channel()
        q = run.queue(ch)
        ch.basic_consume(q, lambda c, m, p, b: c.basic_ack(m.delivery_tag))
        if mode == "tx":
            ch.tx_select()
        elif mode == "confirm":
            ch.confirm_delivery()

        def publish_one():
            _publish(ch, q, 1)
            if mode == "tx":
                ch.tx_commit()
        run.idle(conn, every=every, tick=publish_one)
    return scenario


def publisher_nacked(run: Run) -> None:
    conn = run.connect()
    ch = conn.channel()
    q = run.queue(ch, **{"x-max-length": 5, "x-overflow": "reject-publish"})
    ch.confirm_delivery()

    def publish_into_full_queue():
        try:
            _publish(ch, q, 1)
        except pika.exceptions.NackError:
            pass  # the broker refused it, as the scenario intends
    run.idle(conn, every=0.2, tick=publish_into_full_queue)


def unconfirmed_backlog(run: Run) -> None:
    # pika's blocking channel waits for every confirm; this publisher must not, so it runs its own I/O loop.
    ioloop = IOLoop()
    queue = PREFIX + run.name
    body = b"unconfirmed".ljust(256)

    def burst(conn, ch) -> None:
        if run.stop.is_set():
            conn.close()
            return
        for _ in range(500):
            ch.basic_publish("", queue, body, PERSISTENT)
        ioloop.call_later(1.0, lambda: burst(conn, ch))

    def opened(conn) -> None:
        conn.channel(on_open_callback=lambda ch: ch.queue_declare(
            queue, durable=True, arguments={"x-expires": 600_000, "x-max-length": 100_000},
            callback=lambda _f: ch.confirm_delivery(lambda _frame: None, callback=lambda _f: burst(conn, ch))))

    def failed(_conn, error) -> None:
        run.failure = error
        ioloop.stop()

    pika.SelectConnection(run.parameters(), on_open_callback=opened, on_open_error_callback=failed,
                          on_close_callback=lambda _c, _r: ioloop.stop(), custom_ioloop=ioloop)
    ioloop.start()
    if run.failure is not None:
        raise run.failure


def _unroutable(mandatory: bool):
    def scenario(run: Run) -> None:
        conn = run.connect()
        ch = conn.channel()
        exchange = PREFIX + run.name
        ch.exchange_declare(exchange, "direct", auto_delete=False, durable=False)
        run.idle(conn, tick=lambda: _publish(ch, "nobody-binds-this", 1, exchange=exchange, mandatory=mandatory))
    return scenario


def _backlog(count: int, durable: bool = True, props=PERSISTENT):
    """A queue of the scenario's holding `count` messages that nobody consumes."""
    def scenario(run: Run) -> None:
        conn = run.connect()
        ch = conn.channel()
        _publish(ch, run.queue(ch, durable=durable), count, props=props)
        run.idle(conn)
    return scenario


def dead_lettering_stuck(run: Run) -> None:
    """A quorum queue dead-lettering at-least-once (overflow reject-publish, which that strategy needs) to an
    exchange that does not exist, and a consumer that rejects every delivery without requeue: each message is
    dead-lettered, and kept, unconfirmed. Five new messages every two seconds."""
    conn = run.connect()
    ch = conn.channel()
    q = run.queue(ch, **{"x-queue-type": "quorum", "x-dead-letter-exchange": f"{PREFIX}missing-dlx",
                         "x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish"})
    ch.basic_qos(prefetch_count=5)
    ch.basic_consume(q, lambda c, m, p, b: c.basic_reject(m.delivery_tag, requeue=False))
    run.idle(conn, every=2.0, tick=lambda: _publish(ch, q, 5))


def messages_waiting(run: Run) -> None:
    """Twenty persistent messages stamped an hour ago (a publisher that sets the timestamp property, as a queue fed
    by a shovel from a backlog would hold them), behind a prefetch-1 consumer that never acks: consumed, stuck."""
    conn = run.connect()
    ch = conn.channel()
    q = run.queue(ch)
    an_hour_ago = pika.BasicProperties(delivery_mode=2, timestamp=int(time.time()) - 3600)
    _publish(ch, q, 20, props=an_hour_ago)
    ch.basic_qos(prefetch_count=1)
    ch.basic_consume(q, lambda *a: None)
    run.idle(conn)


def queue_polled(run: Run) -> None:
    """A queue of 150 drained by basic.get with ack, two gets a second (as `amqp-get` in a loop does), and
    refilled as fast: polling that never catches up."""
    conn = run.connect()
    ch = conn.channel()
    q = run.queue(ch)
    _publish(ch, q, 150)

    def tick():
        method, _props, _body = ch.basic_get(q, auto_ack=False)
        if method is not None:
            ch.basic_ack(method.delivery_tag)
            _publish(ch, q, 1)
    run.idle(conn, every=0.5, tick=tick)


def heartbeat_disabled(run: Run) -> None:
    """A consumer on a connection without heartbeat: if the network fails silently, what it holds stays
    locked to it (an idle heartbeat-0 connection is only info)."""
    conn = run.connect(heartbeat=0)
    ch = conn.channel()
    q = run.queue(ch)
    ch.basic_qos(prefetch_count=10)
    ch.basic_consume(q, lambda c, m, p, b: c.basic_ack(m.delivery_tag))
    # An idle connection may go unlisted by the management API until it does something: a passive
    # declare a second keeps it visible without moving any messages.
    run.idle(conn, every=1.0, tick=lambda: ch.queue_declare(q, passive=True))


def healthy(run: Run) -> None:
    """What good looks like: confirms, prefetch 50, manual acks, a durable queue, persistent messages."""
    pub_conn, con_conn = run.connect(), run.connect()
    pub, con = pub_conn.channel(), con_conn.channel()
    q = run.queue(pub)
    pub.confirm_delivery()
    con.basic_qos(prefetch_count=50)
    con.basic_consume(q, lambda c, m, p, b: c.basic_ack(m.delivery_tag))

    def tick():
        _publish(pub, q, 2)
        con_conn.process_data_events(time_limit=0)
    run.idle(pub_conn, tick=tick)


@dataclass(frozen=True)
class Scenario:
    name: str
    rule: str  # the rule it makes fire ("" for the healthy workload)
    description: str
    run: Callable[[Run], None]


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("prefetch-unlimited", "prefetch-unlimited", "a manual-ack consumer without basic.qos that never "
             "acks: it hoards every message", prefetch_unlimited),
    Scenario("auto-ack-consumer", "auto-ack-consumer", "a consumer with automatic acknowledgement",
             auto_ack_consumer),
    # Slow, not stalled: it acks, one a second, and its prefetch refills at once.
    Scenario("prefetch-saturated", "prefetch-saturated", "a prefetch-10 consumer acking one delivery a second, with "
             "a backlog of 1,000 behind it", _settling_consumer(1000, 10, 1.0, _ack_one)),
    Scenario("consumer-stalled", "consumer-stalled", "a prefetch-5 consumer that takes 5 deliveries and never acks "
             "them (a hung callback)", _settling_consumer(20, 5, 0.2, _keep)),
    # Two acks a second: throughput bound by the round trip and the work.
    Scenario("prefetch-one", "prefetch-one", "a prefetch-1 consumer acking twice a second on a queue of 300",
             _settling_consumer(300, 1, 0.5, _ack_one)),
    # At most 5 nacks every 20 ms: bounded, but a loop.
    Scenario("requeue-loop", "requeue-loop", "a consumer that nacks every delivery with requeue=true",
             _settling_consumer(5, 5, 0.02, _requeue_all)),
    Scenario("delivery-limit-reached", "delivery-limit-reached", "a consumer that rejects every delivery with "
             "requeue, on a quorum queue with a delivery limit of 20 and no dead-letter exchange: each message is "
             "dropped after 20 deliveries", delivery_limit_reached),
    Scenario("overflow-dropped", "messages-dropped", "a queue of at most 10 messages without a dead-letter "
             "exchange, fed twice a second by a publisher using confirms, with nobody consuming: the oldest are "
             "dropped after they were confirmed", overflow_dropped),
    Scenario("dead-letter-cycle", "dead-letter-cycle-dropped", "a work queue and a retry queue dead-lettering into "
             "each other by expiry, a confirmed message every two seconds: the broker drops each at the second hop "
             "(its log tells it; the cycle itself shows in the queues' settings)", dead_letter_cycle),
    Scenario("publisher-without-confirms", "publisher-without-confirms", "a publisher without confirms or "
             "transactions", _publishing_to_itself("plain")),
    Scenario("transactional-publisher", "transactional-publisher", "a publisher committing a transaction per "
             "message", _publishing_to_itself("tx")),
    Scenario("publisher-nacked", "publisher-nacked", "a confirm-mode publisher into a full reject-publish queue",
             publisher_nacked),
    Scenario("unconfirmed-backlog", "unconfirmed-backlog", "a confirm-mode publisher that bursts 500 persistent "
             "messages a second and never waits for confirms (a backlog shows when the disk or the queue lags)",
             unconfirmed_backlog),
    Scenario("unroutable-dropped", "unroutable-dropped", "a publisher to an exchange with no bindings, without "
             "mandatory", _unroutable(False)),
    Scenario("unroutable-returned", "unroutable-returned", "a publisher to an exchange with no bindings, with "
             "mandatory", _unroutable(True)),
    Scenario("transient-in-durable-queue", "transient-in-durable-queue", "transient messages in a durable queue",
             _backlog(20, props=TRANSIENT)),
    Scenario("non-durable-queue-backlog", "non-durable-queue-backlog", "150 messages in a non-durable queue",
             _backlog(150, durable=False, props=TRANSIENT)),
    Scenario("no-consumers-backlog", "no-consumers-backlog", "150 messages in a queue nobody consumes",
             _backlog(150)),
    Scenario("dead-lettering-stuck", "dead-lettering-stuck", "a quorum queue dead-lettering at-least-once to an "
             "exchange that does not exist, its consumer rejecting everything", dead_lettering_stuck),
    Scenario("messages-waiting", "messages-waiting", "20 messages stamped an hour ago behind a consumer that "
             "holds one and never acks", messages_waiting),
    Scenario("queue-polled", "queue-polled", "150 messages in a queue read only with basic.get, twice a second",
             queue_polled),
    Scenario("double-ack", "closed-on-error", "a client that acks each delivery twice, one every two seconds: the "
             "broker closes its channel each time (its log tells why)", double_ack),
    Scenario("channel-per-job", "channel-churn", "a worker taking each job on a new channel, numbered upwards, for its "
             "2 s of work, then acking and closing the channel itself: the connection stays", channel_per_job),
    Scenario("get-empty-storm", "get-empty-storm", "a client polling an empty queue with basic.get, 100 times a second",
             get_empty_storm),
    Scenario("temporary-queue-holding", "temporary-queue-holding", "an auto-delete queue of 100 persistent messages, "
             "its consumer acking one every two seconds", temporary_queue_holding),
    Scenario("queue-deleted-holding", "queue-deleted-holding", "every 30 s a durable queue given 20 confirmed "
             "persistent messages and deleted 20 s later with them", queue_deleted_holding),
    Scenario("auto-ack-consumer-gone", "auto-ack-consumer-gone", "an auto-ack consumer that leaves every 10 s, fed 5 "
             "messages a second: what it had received and not processed goes with it", auto_ack_consumer_gone),
    Scenario("connection-per-message", "connection-churn", "a publisher opening a connection for each message, 30 a "
             "minute (the broker's log at info level names it)", connection_per_message),
    Scenario("heartbeat-disabled", "heartbeat-disabled", "a consumer whose connection negotiated heartbeat 0",
             heartbeat_disabled),
    Scenario("blocked-publisher", "connection-blocked", "a confirm-mode publisher; blocked once a memory or disk "
             "alarm is raised (set one with rabbitmqctl set_vm_memory_high_watermark)",
             _publishing_to_itself("confirm", every=0.5)),
    Scenario("healthy", "", "confirms, prefetch 50, manual acks, a durable queue, persistent messages: no "
             "warning should fire", healthy),
)
BY_NAME = {s.name: s for s in SCENARIOS}


class Running:
    """Scenarios, each in a thread of its own; stop() closes every connection they opened."""

    def __init__(self, scenarios: list[Scenario], url: Secret):
        self.stop_event = threading.Event()
        self.runs = [Run(s.name, url, self.stop_event) for s in scenarios]
        self.errors: dict[str, str] = {}
        self.threads = [threading.Thread(target=self._guard, args=(s, r), name=f"scenario-{s.name}", daemon=True)
                        for s, r in zip(scenarios, self.runs)]

    def _guard(self, scenario: Scenario, run: Run) -> None:
        try:
            scenario.run(run)
        except Exception as e:  # the scenario ends; the others go on, and the reason is said once
            if not self.stop_event.is_set():
                self.errors[scenario.name] = f"{type(e).__name__}: {e}"
                log.error("scenario %s stopped: %s: %s", scenario.name, type(e).__name__, e)

    def start(self) -> Running:
        for t in self.threads:
            t.start()
        return self

    def stop(self) -> None:
        self.stop_event.set()
        for t in self.threads:
            t.join(timeout=10)
        for run in self.runs:
            for conn in run.connections:
                try:
                    if conn.is_open:
                        conn.close()
                except Exception:  # already gone with the broker: nothing left to close
                    pass
