"""Where deliveries broke, as the broker's log and its event exchange told: channels and connections it closed on an
error, consumers it timed out, connections and channels opened and closed. Counters since ackscope started, by the
client whose connection it was (the name it gave its connection, its user) and by reason; and how reading each
source goes."""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from ackscope.model.events import (BROKER_LOG, CHANNEL_CLOSED, CHANNEL_ERROR, CHANNEL_OPENED, CONNECTION_CLOSED,
                                   CONNECTION_ERROR, CONNECTION_OPENED, CONSUMER_TIMEOUT, DEAD_LETTERING_STUCK,
                                   DEPRECATED_FEATURE, EVENT_EXCHANGE, MESSAGE_DROPPED, Breaks)

WHO = ("vhost", "user", "connection_name")
# (kind, family, help, whether the reason is a label, the sources that tell of it)
FAMILIES = (
    (CHANNEL_ERROR, "ackscope_broker_channel_errors", "Channels the broker closed on an error (the node's log), by "
     "reason: unknown_delivery_tag (a double ack, an ack on another channel or after a reconnect), "
     "inequivalent_arguments (a redeclare with other arguments), not_found, access_refused, resource_locked, ...",
     True, (BROKER_LOG,)),
    (CONSUMER_TIMEOUT, "ackscope_broker_consumer_timeouts", "Channels the broker closed because a consumer held a "
     "delivery past the consumer timeout (the node's log; RabbitMQ 4.3 logs no timeout of a quorum queue's "
     "consumer: it cancels the consumer silently).", False, (BROKER_LOG,)),
    (CONNECTION_ERROR, "ackscope_broker_connection_errors", "Connections the broker closed on an error (the node's "
     "log), by the AMQP error: frame_error, access_refused (a login refused), not_allowed (a vhost that does not "
     "exist), channel_error (a channel misused), handshake_timeout (the AMQP handshake never completed), ...", True,
     (BROKER_LOG,)),
    (CONNECTION_OPENED, "ackscope_broker_connections_opened", "Connections opened (the node's log: granted their "
     "vhost; else the event exchange): with connections_closed, the churn a poll cannot see.", False,
     (BROKER_LOG, EVENT_EXCHANGE)),
    (CONNECTION_CLOSED, "ackscope_broker_connections_closed", "Connections that ended, by reason (the node's log: "
     "closed by the client, dropped when the TCP connection went without a close, missed_heartbeats, error; the "
     "event exchange, read without the log, says no reason: unknown).", True, (BROKER_LOG, EVENT_EXCHANGE)),
    (CHANNEL_OPENED, "ackscope_broker_channels_opened", "Channels opened (the event exchange): a client opening a "
     "channel per message shows here.", False, (EVENT_EXCHANGE,)),
    (MESSAGE_DROPPED, "ackscope_broker_messages_dropped", "Messages the broker logged it dropped (the node's log), "
     "by reason: dead_letter_cycle (dead-lettered back into a queue it had died in, never rejected on its way; the "
     "broker logs each cycle once per queue process, so later drops of the same cycle are not counted). Not by "
     "client: the log names none.", True, (BROKER_LOG,)),
    (DEAD_LETTERING_STUCK, "ackscope_broker_dead_lettering_stuck", "Quorum queues dead-lettering at-least-once "
     "that the node logged cannot forward their dead-lettered messages (they keep them), by reason: "
     "dead_letter_exchange_missing, stuck. Logged once per queue; the queue is named in /api/breaks.", True,
     (BROKER_LOG,)),
    (DEPRECATED_FEATURE, "ackscope_broker_deprecated_features", "Deprecated features the node logged as used (the "
     "node's log, RabbitMQ 4.x), by feature (reason).", True, (BROKER_LOG,)),
    (CHANNEL_CLOSED, "ackscope_broker_channels_closed", "Channels closed, by their client or by the broker (the "
     "event exchange, which does not say which: the log's channel_errors do).", False, (EVENT_EXCHANGE,)),
)


class BreakCollector:
    def __init__(self, breaks: Breaks | None):
        self._breaks = breaks

    def collect(self):
        b = self._breaks
        if b is None or not b.sources:
            return
        for kind, name, doc, with_reason, told_by in FAMILIES:
            if not any(b.told_by(source) for source in told_by):
                continue
            family = CounterMetricFamily(name, doc, labels=WHO + (("reason",) if with_reason else ()))
            for (k, vhost, user, connection_name, cause), count in sorted(b.totals.items()):
                if k == kind:
                    family.add_metric([vhost, user, connection_name] + ([cause] if with_reason else []), count)
            yield family
        if b.told_by(BROKER_LOG):
            yield from _log(b)
        if b.told_by(EVENT_EXCHANGE):
            yield from _exchange(b)


def _log(b: Breaks):
    yield GaugeMetricFamily("ackscope_broker_log_readable", "1 when the last poll could read the broker log "
                            "given with --broker-log; 0 when it could not (missing, unreadable, standard input "
                            "ended: ackscope's own log says why).", value=int(b.log_readable))
    for name, doc, value in (
            ("lines", "Lines read from the broker log.", b.lines),
            ("unknown_lines", "Broker log lines in neither of RabbitMQ's formats (plain or JSON): passed over.",
             b.unknown_lines),
            ("not_understood_lines", "Warnings and errors in the broker log that ackscope made no event of (it does "
             "not understand them yet), counted by record; the first is in /api/breaks (log.first_not_understood) "
             "and in ackscope's own log.", b.not_understood),
            ("truncated_lines", "Broker log lines longer than 64 KiB, read up to that.", b.truncated_lines)):
        yield CounterMetricFamily(f"ackscope_broker_log_{name}", doc, value=value)


def _exchange(b: Breaks):
    yield GaugeMetricFamily("ackscope_event_exchange_consuming", "1 while ackscope's queue on the broker's event "
                            "exchange (--event-exchange) has its consumer; 0 when it cannot be read (the plugin off, "
                            "no permission, the broker down: ackscope's own log says why).",
                            value=int(b.exchange_consuming))
    yield CounterMetricFamily("ackscope_event_exchange_messages", "Messages read from the broker's event exchange.",
                              value=b.exchange_messages)
    yield CounterMetricFamily("ackscope_event_exchange_dropped", "Events read from the event exchange and dropped "
                              "because polls fell behind (ackscope holds 20,000 between two polls).",
                              value=b.exchange_dropped)
