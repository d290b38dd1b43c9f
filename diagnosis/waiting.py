"""How long each queue's oldest message has waited: memory beside the pure rules, like Holding and Onset.

Where publishers stamp their messages (the `timestamp` property), the broker reports the head message's timestamp
for a classic queue: its age is the broker's figure. Elsewhere (quorum queues export none, rabbitmq-server#6813;
unstamped messages; statistics off) the queue's history gives a lower bound. The R messages ready at a poll at
time T were all published before T; a queue hands out its ready messages head first, so while fewer than R
deliveries have happened since T, at least one of them is still in it, at least now - T old. The deliveries counted
include redeliveries, which only makes the bound smaller. Messages that leave without a delivery (a TTL, a
length limit dropping the head, a purge) break the assumption: where the counts show it (fewer ready than the
deliveries explain), the history starts again."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from types import MappingProxyType

from ackscope.model.findings import INFERRED, STAMPED, OldestMessage
from ackscope.model.snapshot import Queue, Snapshot

# Polls remembered per queue: past this, the middle one goes (the bound loses resolution there, never truth).
MAX_POINTS = 64


def stamped(q: Queue, now: float) -> OldestMessage | None:
    """The head message's age from its timestamp property, where the broker reports one and it holds messages."""
    if q.head_message_timestamp is None or not q.messages_ready:
        return None
    return OldestMessage(q.vhost, q.name, max(0.0, now - q.head_message_timestamp), STAMPED)


class _History:
    """Polls at which the queue's ready messages were not yet all delivered: (taken_at, the delivery count at
    which they all will have been), that count rising from one to the next."""

    def __init__(self) -> None:
        self.points: deque[tuple[float, int]] = deque()
        self.ready = 0
        self.delivered = 0

    def update(self, t: float, ready: int, delivered: int) -> float | None:
        """The lower bound at `t`, `ready` above 0 (None until a poll before this one says anything)."""
        left_undelivered = ready < self.ready - (delivered - self.delivered)
        if delivered < self.delivered or left_undelivered:
            self.points.clear()  # a new queue of that name, or messages left without a delivery
        self.ready, self.delivered = ready, delivered
        while self.points and delivered >= self.points[0][1]:
            self.points.popleft()  # every message ready then has been delivered since
        if not self.points or delivered + ready > self.points[-1][1]:
            self.points.append((t, delivered + ready))
            if len(self.points) > MAX_POINTS:
                del self.points[len(self.points) // 2]
        return t - self.points[0][0] if self.points and self.points[0][0] < t else None


class Waiting:
    def __init__(self) -> None:
        self._histories: dict[tuple[str, str], _History] = {}

    def update(self, s: Snapshot) -> Mapping[tuple[str, str], OldestMessage]:
        """Per (vhost, queue): its oldest message's age where it is known, the stamp's before the bound."""
        oldest: dict[tuple[str, str], OldestMessage] = {}
        histories = {}
        for q in s.queues:
            if q.stream:
                continue  # a stream retains what it was sent: no backlog to age
            key = (q.vhost, q.name)
            bound = None
            # An empty queue keeps no history (most of a large broker's are empty): its next message starts one.
            if q.messages_ready and q.message_stats.deliver_get is not None:
                history = histories[key] = self._histories.get(key) or _History()
                bound = history.update(s.taken_at, q.messages_ready, q.message_stats.deliver_get)
            found = stamped(q, s.taken_at)
            if found is None and bound is not None:
                found = OldestMessage(q.vhost, q.name, bound, INFERRED)
            if found is not None:
                oldest[key] = found
        self._histories = histories  # a queue gone is forgotten
        return MappingProxyType(oldest)
