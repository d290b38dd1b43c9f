"""ackscope_queue_oldest_message_age_seconds: how long each queue's oldest message has waited, for the queues with
series of their own; `source` says where it comes from: `timestamp` (the head message's timestamp property, as
its publisher set it) or `inferred` (a lower bound from the queue's history, diagnosis/waiting.py). A stuck, quiet
queue shows here where its depth does not."""

from __future__ import annotations

from ackscope.model.findings import Diagnosis

from ..cardinality import Shaped
from .families import gauge


class OldestMessageCollector:
    def __init__(self, shaped: Shaped, diagnosis: Diagnosis):
        kept = {(q.vhost, q.name) for q in shaped.queues}
        self._oldest = [o for o in diagnosis.oldest if (o.vhost, o.queue) in kept]

    def collect(self):
        yield gauge("ackscope_queue_oldest_message_age_seconds", "How long the queue's oldest message has waited: "
                    "source timestamp from the head message's timestamp property (classic queues whose publishers "
                    "set it), inferred a lower bound from the queue's ready and delivered counts since. No series: "
                    "empty, or not known yet.", ("vhost", "queue", "source"), self._oldest,
                    lambda o: (o.vhost, o.queue, o.source), lambda o: o.age_seconds)
