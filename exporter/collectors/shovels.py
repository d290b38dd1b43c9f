"""Per-shovel series: what each shovel is (its ack mode, source and destination, URIs without their password),
its state as the broker says, and, where the broker counts them (4.1 and later), what it forwarded and holds."""

from __future__ import annotations

from ackscope.model.snapshot import Shovel, Snapshot

from .families import counter, gauge

LABELS = ("vhost", "shovel")
INFO_LABELS = (*LABELS, "type", "ack_mode", "source", "source_uri", "destination", "destination_uri", "node")


def endpoint(queue: str | None, exchange: str | None) -> str:
    """A shovel's source or destination as a label value: "queue orders", "exchange audit" ("" where unknown)."""
    if queue:
        return f"queue {queue}"
    return f"exchange {exchange}" if exchange is not None else ""


def _labels(v: Shovel) -> tuple[str, ...]:
    return v.vhost or "", v.name


def _info(v: Shovel) -> tuple[str, ...]:
    return (*_labels(v), v.type, v.ack_mode or "", endpoint(v.source_queue, v.source_exchange), v.source_uri,
            endpoint(v.destination_queue, v.destination_exchange), v.destination_uri, v.node or "")


class ShovelCollector:
    def __init__(self, snapshot: Snapshot):
        self._shovels = snapshot.shovels

    def collect(self):
        shovels = self._shovels
        yield gauge("ackscope_shovel_info", "A shovel as the broker defines it: ack_mode on-confirm, on-publish or "
                    "no-ack (\"\" for a static shovel, whose definition the API does not give), source and "
                    "destination, URIs without their password. Always 1.", INFO_LABELS, shovels, _info, lambda v: 1)
        yield gauge("ackscope_shovel_state", "1 for the shovel's state as the broker says: running, flow or blocked "
                    "(its destination's flow control, RabbitMQ 4.x), starting, terminated.", (*LABELS, "state"),
                    [v for v in shovels if v.state], lambda v: (*_labels(v), v.state or ""), lambda v: 1)
        yield counter("ackscope_shovel_forwarded_total", "Messages the shovel forwarded since it started (RabbitMQ "
                      "4.1 and later).", LABELS, shovels, _labels, lambda v: v.forwarded)
        yield gauge("ackscope_shovel_pending_messages", "Messages the shovel received and has not forwarded yet "
                    "(RabbitMQ 4.1 and later).", LABELS, shovels, _labels, lambda v: v.pending)
