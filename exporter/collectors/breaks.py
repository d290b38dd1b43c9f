"""Where deliveries broke, as the broker's own log told: channels and connections it closed on an error, consumers
it timed out, connections opened and closed. Counters since ackscope started, by the client whose connection it
was (the name it gave its connection, its user) and by reason; and how reading the log goes."""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from ackscope.model.events import (BROKER_LOG, CHANNEL_ERROR, CONNECTION_CLOSED, CONNECTION_ERROR, CONNECTION_OPENED,
                                   CONSUMER_TIMEOUT, Breaks)

WHO = ("vhost", "user", "connection_name")
# (kind, family, help, whether the reason is a label)
FAMILIES = (
    (CHANNEL_ERROR, "ackscope_broker_channel_errors", "Channels the broker closed on an error (the node's log), by "
     "reason: unknown_delivery_tag (a double ack, an ack on another channel or after a reconnect), "
     "inequivalent_arguments (a redeclare with other arguments), not_found, access_refused, resource_locked, ...",
     True),
    (CONSUMER_TIMEOUT, "ackscope_broker_consumer_timeouts", "Channels the broker closed because a consumer held a "
     "delivery past the consumer timeout (the node's log; RabbitMQ 4.3 logs no timeout of a quorum queue's "
     "consumer: it cancels the consumer silently).", False),
    (CONNECTION_ERROR, "ackscope_broker_connection_errors", "Connections the broker closed on an error (the node's "
     "log), by the AMQP error: frame_error, ...", True),
    (CONNECTION_OPENED, "ackscope_broker_connections_opened", "Connections granted their vhost (the node's log): "
     "with connections_closed, the churn a poll cannot see.", False),
    (CONNECTION_CLOSED, "ackscope_broker_connections_closed", "Connections that ended (the node's log), by reason: "
     "closed (by the client), dropped (the TCP connection went without a close), missed_heartbeats, error.", True),
)


class BreakCollector:
    def __init__(self, breaks: Breaks | None):
        self._breaks = breaks

    def collect(self):
        b = self._breaks
        if b is None or not b.told_by(BROKER_LOG):
            return
        for kind, name, doc, with_reason in FAMILIES:
            family = CounterMetricFamily(name, doc, labels=WHO + (("reason",) if with_reason else ()))
            for (k, vhost, user, connection_name, cause), count in sorted(b.totals.items()):
                if k == kind:
                    family.add_metric([vhost, user, connection_name] + ([cause] if with_reason else []), count)
            yield family
        yield GaugeMetricFamily("ackscope_broker_log_readable", "1 when the last poll could read the broker log "
                                "given with --broker-log; 0 when it could not (missing, unreadable, standard input "
                                "ended: ackscope's own log says why).", value=int(not b.problems))
        for name, doc, value in (
                ("lines", "Lines read from the broker log.", b.lines),
                ("unknown_lines", "Broker log lines in neither of RabbitMQ's formats (plain or JSON): passed over.",
                 b.unknown_lines),
                ("truncated_lines", "Broker log lines longer than 64 KiB, read up to that.", b.truncated_lines)):
            yield CounterMetricFamily(f"ackscope_broker_log_{name}", doc, value=value)
