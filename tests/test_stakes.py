"""What a publisher without confirms (or in transactions) puts at stake decides its severity, not its rate: the
queues its messages reach, their durability and the persistent share, as the source tells them."""

from __future__ import annotations

from dataclasses import replace

from snapshot_builders import channel, connection, queue, snapshot, stats

from ackscope.diagnosis.rules import Context, evaluate
from ackscope.diagnosis.thresholds import Thresholds
from ackscope.model.snapshot import QUEUE_DURABILITY, QUEUE_PERSISTENT_COUNTS, Exchange, MessageStats

SLOW = Thresholds(publish_rate_at_stake=1.0)  # the window below is 300 s: 90 publishes are 0.3/s


def _unsafe(name: str, published: int, **kw):
    return channel(name, confirm=False, consumer_count=0, message_stats=stats(publish=published), **kw)


def _judged(start, now, rule="publisher-without-confirms"):
    return {f.object.removeprefix("channel "): f for f in evaluate(Context(now, start, thresholds=SLOW))
            if f.rule == rule}


def test_a_slow_publisher_of_persistent_messages_into_a_durable_queue_is_a_warning_whatever_its_rate():
    # Celery's producer with its defaults: 0.3 tasks a second, persistent, into the durable queue "celery".
    tasks = queue("celery", messages_ready=12, messages_persistent=12, message_stats=stats(publish=100))
    start = snapshot(700.0, channels=[_unsafe("producer", 10, routed_into=("celery",))],
                     queues=[queue("celery", message_stats=stats(publish=10))])
    now = snapshot(1000.0, channels=[_unsafe("producer", 100, routed_into=("celery",))], queues=[tasks])
    f = _judged(start, now)["producer"]
    assert f.severity == "warning"
    assert f.evidence["at_stake"] == [{"queue": "celery", "durable": True,
                                       "persistent": "12 of the 12 messages it holds"}]
    assert f.evidence["routing"] == "counted by the broker per channel and queue"
    assert "durable queue celery" in f.explanation and f.evidence["publish_rate"] == 0.3


def test_plumbing_into_queues_that_keep_nothing_is_info_at_any_rate():
    replies = queue("amq.gen-1", durable=False, exclusive=True)
    gossip = queue("celeryev.1", auto_delete=True)
    transient = queue("scratch", messages_ready=5, messages_persistent=0)  # durable, but holding transient messages
    start = snapshot(700.0, channels=[_unsafe(n, 0, routed_into=(q,)) for n, q in
                                      (("rpc", "amq.gen-1"), ("events", "celeryev.1"), ("scratch", "scratch"))])
    now = snapshot(1000.0, channels=[_unsafe(n, 3000, routed_into=(q,)) for n, q in
                                     (("rpc", "amq.gen-1"), ("events", "celeryev.1"), ("scratch", "scratch"))],
                   queues=[replies, gossip, transient])
    found = _judged(start, now)
    assert {n: f.severity for n, f in found.items()} == {"rpc": "info", "events": "info", "scratch": "info"}
    assert found["events"].evidence["queues"] == [{"queue": "celeryev.1", "durable": True, "auto_delete": True,
                                                   "persistent": "unknown: it holds no message now"}]
    assert "Nothing is at stake" in found["rpc"].explanation


def test_one_message_or_none_lately_is_info_even_into_a_durable_queue():
    start = snapshot(700.0, channels=[_unsafe("hello", 0, routed_into=("celery",)),
                                      _unsafe("quiet", 500, routed_into=("celery",))])
    now = snapshot(1000.0, channels=[_unsafe("hello", 1, routed_into=("celery",)),
                                     _unsafe("quiet", 500, routed_into=("celery",))], queues=[queue("celery")])
    found = _judged(start, now)
    assert {n: f.severity for n, f in found.items()} == {"hello": "info", "quiet": "info"}
    assert "a single message" in found["hello"].evidence["stakes"]


def test_where_durability_is_not_reported_the_rate_decides_and_the_finding_says_so():
    # The Prometheus plugin alone: the queue is known by name, its durability is not.
    plugin_queue = queue("orders", durable=None, auto_delete=None, exclusive=None, messages_persistent=None)
    for published, severity in ((90, "info"), (600, "warning")):
        start = snapshot(700.0, channels=[_unsafe("p", 0, routed_into=("orders",))],
                         unreported={QUEUE_DURABILITY, QUEUE_PERSISTENT_COUNTS})
        now = snapshot(1000.0, channels=[_unsafe("p", published, routed_into=("orders",))], queues=[plugin_queue],
                       unreported={QUEUE_DURABILITY, QUEUE_PERSISTENT_COUNTS})
        f = _judged(start, now)["p"]
        assert f.severity == severity
        assert "is not known" in f.explanation and f.evidence["queues"][0]["persistent"] == "not reported by the source"


def _exchange(name: str, took: int, *to_queues: str) -> Exchange:
    return Exchange("/", name, MessageStats(publish=took), tuple(("queue", q, "") for q in to_queues))


def test_management_api_where_every_exchange_that_took_publishes_agrees_decides_without_attribution():
    gossip = queue("celeryev.1", auto_delete=True)
    start = snapshot(700.0, channels=[_unsafe("events", 0)], exchanges=[_exchange("celeryev", 0, "celeryev.1")])
    now = snapshot(1000.0, channels=[_unsafe("events", 150)], queues=[gossip],
                   exchanges=[_exchange("celeryev", 160, "celeryev.1"), _exchange("celery", 0, "celery"),
                              _exchange("", 0)])  # 160: another channel published there too
    f = _judged(start, now)["events"]
    assert f.severity == "info" and f.evidence["routing"].startswith("inferred: ")
    assert f.evidence["routing"].endswith("every queue the exchanges that took publishes lately (celeryev) reach "
                                          "keeps nothing")
    assert "at_stake" not in f.evidence and "queues" not in f.evidence  # none is named: it may never have touched one


def test_management_api_attributes_a_channel_to_the_one_exchange_that_took_as_many_publishes():
    # Celery's producer and a worker's event channel in one vhost: the API does not say which publishes where.
    gossip, tasks = queue("celeryev.1", auto_delete=True), queue("celery", messages_ready=6, messages_persistent=6)
    start = snapshot(700.0, channels=[_unsafe("producer", 0), _unsafe("events", 0)],
                     exchanges=[_exchange("celeryev", 0, "celeryev.1"), _exchange("celery", 0, "celery")])
    now = snapshot(1000.0, channels=[_unsafe("producer", 90), _unsafe("events", 150)], queues=[gossip, tasks],
                   exchanges=[_exchange("celeryev", 150, "celeryev.1"), _exchange("celery", 90, "celery")])
    found = _judged(start, now)
    assert (found["producer"].severity, found["events"].severity) == ("warning", "info")
    assert "publishes lately match the 90 exchange celery took" in found["producer"].evidence["routing"]
    # Where the counts do not tell them apart, neither is attributed: the rate decides, and the doubt is said.
    now = snapshot(1000.0, channels=[_unsafe("producer", 90), _unsafe("events", 150)], queues=[gossip, tasks],
                   exchanges=[_exchange("celeryev", 120, "celeryev.1"), _exchange("celery", 120, "celery")])
    found = _judged(start, now)
    assert (found["producer"].severity, found["events"].severity) == ("info", "info")
    assert "differ in what they keep" in found["producer"].explanation
    assert found["producer"].evidence["stakes"] == "where its messages go is not known"  # the why, said once in routing


def test_a_reply_publisher_beside_durable_publishers_on_the_default_exchange_is_never_blamed_for_their_queues():
    """Measured: a publisher of replies into an auto-delete queue was a warning naming bars.ledger, bars.orders
    and celery, durable queues it never published to, because the default exchange reached all of them lately.
    The counts tie it to its reply queue (info); where they tie it to nothing, no queue is named and the rate
    decides."""
    replies = queue("amq.gen-replies", auto_delete=True, message_stats=stats(publish=400))
    ledger = queue("bars.ledger", messages_ready=5, messages_persistent=5, message_stats=stats(publish=900))
    orders = queue("bars.orders", messages_ready=5, messages_persistent=5, message_stats=stats(publish=600))
    start = snapshot(700.0, channels=[_unsafe("replier", 0), _unsafe("ledger", 0), _unsafe("orders", 0)],
                     queues=[replace(q, message_stats=stats(publish=0)) for q in (replies, ledger, orders)],
                     exchanges=[_exchange("", 0)])
    now = snapshot(1000.0, channels=[_unsafe("replier", 400), _unsafe("ledger", 900), _unsafe("orders", 600)],
                   queues=[replies, ledger, orders], exchanges=[_exchange("", 1900)])
    found = _judged(start, now)
    assert {n: f.severity for n, f in found.items()} == {"replier": "info", "ledger": "warning", "orders": "warning"}
    assert found["replier"].evidence["queues"] == [{"queue": "amq.gen-replies", "durable": True,
                                                    "auto_delete": True, "persistent": "unknown: it holds no message now"}]
    assert "queue amq.gen-replies took through the default exchange" in found["replier"].evidence["routing"]
    assert [q["queue"] for q in found["ledger"].evidence["at_stake"]] == ["bars.ledger"]
    # Another replier into the same queue: the counts tie the first to no queue, nothing is named and the rate
    # (1.3/s) decides. The orders publisher's queue counted one publish more than it (the lists are read moments
    # apart): still its queue.
    now = snapshot(1000.0, channels=[_unsafe("replier", 400), _unsafe("ledger", 900), _unsafe("orders", 600)],
                   queues=[replace(replies, message_stats=stats(publish=520)), ledger,
                           replace(orders, message_stats=stats(publish=601))], exchanges=[_exchange("", 2021)])
    found = _judged(start, now)
    f = found["replier"]
    assert f.severity == "warning" and "at_stake" not in f.evidence and "queues" not in f.evidence
    assert f.evidence["stakes"] == "where its messages go is not known"
    assert "match the 601 queue bars.orders took" in found["orders"].evidence["routing"]
    assert [q["queue"] for q in found["orders"].evidence["at_stake"]] == ["bars.orders"]
    assert "differ in what they keep" in f.evidence["routing"] and "differ in what they keep" in f.explanation


def test_the_default_exchange_reaches_the_queues_that_took_publishes_and_exchange_bindings_are_followed():
    durable = queue("orders", message_stats=stats(publish=300))
    start = snapshot(700.0, channels=[_unsafe("plain", 0), _unsafe("fan", 0)],
                     queues=[queue("orders", message_stats=stats(publish=0))],
                     exchanges=[_exchange("", 0), _exchange("audit", 0)])
    chained = Exchange("/", "audit", MessageStats(publish=40), (("exchange", "audit.copy", ""),))
    now = snapshot(1000.0, channels=[_unsafe("plain", 300), _unsafe("fan", 40)], queues=[durable],
                   exchanges=[_exchange("", 300), chained, _exchange("audit.copy", 0, "orders")])
    found = _judged(start, now)
    assert (found["plain"].severity, found["fan"].severity) == ("warning", "warning")
    assert found["fan"].evidence["at_stake"][0]["queue"] == "orders"


def test_a_transactional_publisher_of_plumbing_is_info_and_of_durable_messages_a_warning():
    tx = dict(confirm=False, transactional=True, consumer_count=0)
    start = snapshot(700.0, channels=[channel("to-durable", routed_into=("orders",), **tx),
                                      channel("to-replies", routed_into=("amq.gen-1",), **tx)])
    now = snapshot(1000.0, channels=[channel("to-durable", routed_into=("orders",), message_stats=stats(publish=9),
                                             **tx),
                                     channel("to-replies", routed_into=("amq.gen-1",),
                                             message_stats=stats(publish=9), **tx)],
                   queues=[queue("orders"), queue("amq.gen-1", exclusive=True, durable=False)])
    found = _judged(start, now, "transactional-publisher")
    assert {n: f.severity for n, f in found.items()} == {"to-durable": "warning", "to-replies": "info"}


def test_heartbeat_disabled_follows_the_client_its_idle_connection_belongs_to():
    # A Celery worker: an idle producer connection without heartbeat, and a consuming one from the same host,
    # library and user; another host's idle connection stays info.
    idle = connection("idle", connection_name="", heartbeat_seconds=0, client="py-amqp 5.4.2")
    consuming = connection("consuming", connection_name="", heartbeat_seconds=120, client="py-amqp 5.4.2")
    elsewhere = connection("elsewhere", connection_name="", heartbeat_seconds=0, client="py-amqp 5.4.2",
                           peer_host="10.0.0.9")
    s = snapshot(connections=[idle, consuming, elsewhere],
                 channels=[channel("c1", connection="idle", consumer_count=0),
                           channel("c2", connection="consuming", consumer_count=1),
                           channel("c3", connection="elsewhere", consumer_count=0)])
    found = {f.object: f for f in evaluate(Context(s, s)) if f.rule == "heartbeat-disabled"}
    assert {o: f.severity for o, f in found.items()} == {"connection idle": "warning",
                                                         "connection elsewhere": "info"}
    assert found["connection idle"].evidence["consumes"] is True
    assert found["connection idle"].evidence["client_connections"].startswith("2 (inferred")


def test_replies_through_the_default_exchange_are_not_tied_to_a_durable_queue_a_named_exchange_fills():
    # An RPC server answers through the default exchange into exclusive reply queues, while a named exchange
    # fills a durable queue in the same vhost: the server's replies are plumbing.
    orders = queue("orders", message_stats=stats(publish=500))
    replies = queue("amq.gen-1", durable=False, exclusive=True, message_stats=stats(publish=300))
    start = snapshot(700.0, channels=[_unsafe("rpc", 0)], queues=[queue("orders"), queue("amq.gen-1")],
                     exchanges=[_exchange("", 0), _exchange("orders", 0, "orders")])
    now = snapshot(1000.0, channels=[_unsafe("rpc", 300)], queues=[orders, replies],
                   exchanges=[_exchange("", 300), _exchange("orders", 500, "orders")])
    f = _judged(start, now)["rpc"]
    assert f.severity == "info" and f.evidence["queues"][0]["queue"] == "amq.gen-1"


def test_two_publishers_alike_are_tied_to_no_queue_though_one_queue_took_as_many():
    """Measured live: pika publishing into Celery's queue `celery` and pika replying into an exclusive queue, each
    once a second from the same moment. The replies' queue took as many as each published, and both were tied to
    it: the publisher into `celery` was info, "reaches only queues that keep nothing"."""
    replies = queue("amq.gen-replies", exclusive=True, message_stats=stats(publish=25))
    tasks = queue("celery", messages_ready=5, messages_persistent=5, message_stats=stats(publish=33))
    start = snapshot(700.0, channels=[_unsafe(n, 0) for n in ("plain", "replier", "producer")],
                     queues=[replace(q, message_stats=stats(publish=0)) for q in (replies, tasks)],
                     exchanges=[_exchange("", 0)])
    now = snapshot(1000.0, channels=[_unsafe("plain", 25), _unsafe("replier", 25), _unsafe("producer", 8)],
                   queues=[replies, tasks], exchanges=[_exchange("", 58)])
    found = _judged(start, now)
    for name in ("plain", "replier"):
        assert found[name].evidence["stakes"] == "where its messages go is not known", found[name].evidence
        assert "at_stake" not in found[name].evidence and "queues" not in found[name].evidence
