"""The continuous delivery audit of one probe run: was every confirmed message delivered, only once, and in
publish order?

Order is judged per consumer, as RabbitMQ states it: one channel publishing into one queue, one consumer of
it sees the messages in publish order. A first delivery (not flagged redelivered) that comes after a message
published later was first delivered to the same consumer breaks that. A redelivery that does is expected: a
requeued message goes back to its place while later ones were delivered, to this consumer or another. A message
the probe published again (after its channel was lost) holds two places in the queue: it is not judged.

Pure: the caller passes the clock. Memory is bounded by the publish rate times the retention: sequence
numbers are forgotten once they are older than `retention_ns`, after which a very late duplicate of
them would go unseen.
"""

from __future__ import annotations

from collections import deque


class DeliveryAudit:
    def __init__(self, loss_deadline_ns: int, retention_ns: int | None = None):
        self.loss_deadline_ns = loss_deadline_ns
        self.retention_ns = retention_ns or 2 * loss_deadline_ns
        self._awaiting: dict[int, int] = {}  # confirmed, not yet delivered: seq -> confirmed at
        self._delivered: set[int] = set()
        self._requeued: set[int] = set()  # nacked with requeue by the probe itself: the next delivery is due
        self._lost: set[int] = set()
        self._republished: set[int] = set()  # published again: its place in the queue is not known
        self._marks: dict[str, int] = {}  # per consumer: the latest-published message it was first delivered
        self._forget: deque[tuple[int, int]] = deque()  # (when seen, seq), oldest first

    def confirmed(self, seq: int, now_ns: int) -> None:
        """The broker took responsibility for `seq`: from now on it must be delivered within the deadline."""
        self._remember(seq, now_ns)
        if seq not in self._delivered and seq not in self._lost:  # a delivery can overtake its confirm
            self._awaiting[seq] = now_ns

    def delivered(self, seq: int, now_ns: int, requeue: bool = False) -> bool:
        """A delivery of `seq`; `requeue` when the probe will nack it back to the queue. True when it
        is a duplicate: that sequence number was delivered (and not requeued by the probe) before."""
        self._remember(seq, now_ns)
        if seq in self._requeued:
            self._requeued.discard(seq)
            duplicate = False
        else:
            duplicate = seq in self._delivered
        if requeue:
            self._requeued.add(seq)
            return duplicate
        self._delivered.add(seq)
        self._awaiting.pop(seq, None)
        return duplicate

    def published_again(self, seq: int, now_ns: int) -> None:
        self._remember(seq, now_ns)
        self._republished.add(seq)

    def in_order(self, consumer: str, seq: int, redelivered: bool) -> bool:
        """Whether a delivery of `seq` to `consumer` comes in publish order: False when a message published
        later was first delivered to that consumer before it."""
        if seq in self._republished:
            return True
        mark = self._marks.get(consumer, 0)
        if not redelivered and seq > mark:
            self._marks[consumer] = seq
        return seq >= mark

    def consumer_gone(self, consumer: str) -> None:
        self._marks.pop(consumer, None)

    def expire(self, now_ns: int) -> list[tuple[int, int]]:
        """Confirmed messages still undelivered after the loss deadline, as (seq, confirmed at): lost."""
        lost = [(seq, at) for seq, at in self._awaiting.items() if now_ns - at >= self.loss_deadline_ns]
        for seq, _ in lost:
            del self._awaiting[seq]
            self._lost.add(seq)
        while self._forget and now_ns - self._forget[0][0] > self.retention_ns:
            _, seq = self._forget.popleft()
            if seq not in self._awaiting:
                self._delivered.discard(seq)
                self._requeued.discard(seq)
                self._lost.discard(seq)
                self._republished.discard(seq)
        return lost

    @property
    def awaiting(self) -> int:
        """Confirmed messages not delivered yet (within their deadline)."""
        return len(self._awaiting)

    def oldest_awaiting_ns(self) -> int | None:
        """When the oldest message still awaiting delivery was confirmed; None when none awaits."""
        return min(self._awaiting.values(), default=None)

    def _remember(self, seq: int, now_ns: int) -> None:
        self._forget.append((now_ns, seq))
