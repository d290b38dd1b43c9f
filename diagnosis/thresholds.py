"""The numbers the rules compare against, with defaults; the TOML table [diagnosis] overrides them."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any


@dataclass(frozen=True)
class Thresholds:
    unlimited_prefetch_unacked_critical: int = 1000  # prefetch-unlimited turns critical at this many unacked
    # Where a channel-wide prefetch may bind unseen (RabbitMQ 4.0-4.2), prefetch-unlimited warns from this many
    # unacked: fewer may be a hidden limit's (Celery's global QoS is 4 per worker process).
    unlimited_prefetch_unacked_unseen: int = 100
    auto_ack_backlog: int = 1000  # auto-ack-consumer warns when its queue holds this many ready
    auto_ack_delivery_rate: float = 100.0  # ... or delivers this many per second
    stream_lag_growth: int = 1000  # stream-consumer-lagging: a stream consumer's lag grew this much in the window
    prefetch_one_backlog: int = 100  # prefetch-one: ready messages behind a prefetch-1 consumer
    requeue_ratio: float = 0.5  # requeue-loop: redeliveries per delivery
    requeue_min_rate: float = 1.0  # ... and at least this many redeliveries per second, where acks get through
    # ... or, at any rate, this many redeliveries in the window with (almost) nothing acked: at most this share of
    # the deliveries (a poison message that kills its consumer each time loops at well under one a second).
    requeue_min_redeliveries: int = 5
    requeue_acked_share: float = 0.1
    unconfirmed_backlog: int = 1000  # unconfirmed-backlog: this many unconfirmed on a channel
    unconfirmed_growth: int = 100  # ... or it grew by this many since the last sample
    non_durable_backlog: int = 100  # non-durable-queue-backlog: messages in a non-durable queue
    no_consumers_backlog: int = 100  # no-consumers-backlog: ready messages with no consumer
    oldest_message_seconds: float = 300.0  # messages-waiting: the oldest message of a consumed queue waited this long
    probe_confirm_p99_seconds: float = 1.0  # probe-confirm-latency-high
    # The recent window the rate-like rules judge (unroutable, nacked, requeue-loop, deliveries, gets).
    window_seconds: float = 300.0
    # Where the source cannot tell where a channel's messages go (diagnosis/stakes.py), publisher-without-confirms
    # and heartbeat-disabled warn for one publishing this many per second over the window, and say so; where it
    # can, what is at stake decides at any rate.
    publish_rate_at_stake: float = 1.0
    # publisher-waits-each-confirm: a confirm channel never seen with more than one publish unconfirmed, in this
    # many samples taken while it published, that waits for confirms this share of its time or more; a warning
    # from the saturated share (it could publish no faster, one at a time). Many samples: an asynchronous
    # publisher whose confirms come fast may show one at a time in a few (measured: the Java client waiting for
    # each confirm showed 50%, pika 100%, the broker's share alone).
    confirm_wait_samples: int = 10
    confirm_wait_share: float = 0.3
    # ... and only where the broker itself held one of its publishes unconfirmed in this share of the samples:
    # the probes' latency times a fast rate says "waiting" of any publisher the broker never saw waiting
    # (measured: aio-pika streaming at 2,100 msg/s on 3.10, seen with none unconfirmed in 6 samples).
    confirm_wait_seen: float = 0.1
    confirm_wait_saturated: float = 0.8
    # unroutable-dropped and unroutable-returned warn at this many messages in the window; one is info.
    unroutable_at_stake: int = 2
    # queue-leaders-unbalanced: info when one running node leads more than this share of the cluster's queues
    # (quorum leaders and classic queues' home nodes), a warning when it leads them all; only from this many.
    leaders_unbalanced_share: float = 0.6
    leaders_unbalanced_min_queues: int = 10
    # consumer-stalled: a consumer's channel has held deliveries and settled none for this long (or for half the
    # consumer timeout in force, where the broker says which applies and that is sooner).
    stalled_consumer_seconds: float = 60.0
    # connection-churn: a client (or, from polls alone, the broker) opening this many connections a minute,
    # over the window.
    churn_connections_per_minute: float = 6.0
    # channel-churn: channels closing on connections that stay open, this many a minute over the window.
    churn_channels_per_minute: float = 6.0
    # get-empty-storm: basic.get answered empty this many times a second over the window (a loop without a pause;
    # measured in a public report: 8,700 a second from one pika client).
    get_empty_rate: float = 50.0
    # trace-queue-time-high: the applications' own messages waited this long before their first delivery, p99 over
    # the window (by their spans).
    trace_queue_time_seconds: float = 30.0

    @classmethod
    def from_table(cls, table: dict[str, Any], where: str = "[diagnosis]") -> Thresholds:
        """Defaults overridden by the TOML table's keys; an unknown key or a negative number is an error."""
        known = {f.name: f.type for f in fields(cls)}
        values = {}
        for key, value in table.items():
            if key not in known:
                raise ValueError(f"{where}: unknown threshold '{key}'")
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise ValueError(f"{where}: {key} must be a number, 0 or more, not {value!r}")
            values[key] = int(value) if known[key] == "int" else float(value)
        return replace(cls(), **values)
