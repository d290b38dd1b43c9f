"""The applications' unprocessed messages placed by the broker's view: still waiting in their queue, or gone.

The spans say a message was published and no delivery of it came within the deadline; only the broker can say
whether it is still there. A flow's unprocessed messages are split only where every part of the claim is known:
- every publish of the flow names the same queue (a publish to the default exchange: a consumer span's queue says
  where the delivered came from, not where the undelivered went), and one vhost alone has a queue of that name
  (the spans name no vhost);
- the sampling keeps pairs whole (no delivery came without its publish: TraceWindow.unprocessed_known);
- some delivery of the flow was traced: a flow whose consumers send no spans has every message "unprocessed".
Then the queue's messages (ready and unacknowledged) are the ones that may still be waiting; the rest are gone.
Everything else stays unplaced: said, not guessed.
"""

from __future__ import annotations

from dataclasses import replace

from ackscope.model.snapshot import Snapshot
from ackscope.model.traces import GONE, UNPLACED, WAITING, Flow, TraceWindow


def placed(window: TraceWindow, snapshot: Snapshot | None) -> TraceWindow:
    """`window` with each flow's unprocessed messages split into WAITING and GONE where the snapshot's queue
    allows it (see the module's docstring), UNPLACED elsewhere. Without a snapshot (the broker's API did not
    answer) nothing is split."""
    if snapshot is None or not window.unprocessed_known:
        return window
    vhosts_of: dict[str, list] = {}
    for q in snapshot.queues:
        vhosts_of.setdefault(q.name, []).append(q)
    return replace(window, flows=tuple(_placed(f, vhosts_of) for f in window.flows))


def _placed(flow: Flow, queues: dict[str, list]) -> Flow:
    unprocessed = flow.unprocessed.get(UNPLACED, 0)
    found = queues.get(flow.queue or "", [])
    if not unprocessed or len(found) != 1 or flow.delivered == 0:
        return flow
    q = found[0]
    if q.messages_ready is None or q.messages_unacked is None:
        return flow  # listed without its counts (a queue just declared, or down)
    waiting = min(unprocessed, q.messages_ready + q.messages_unacked)
    split = {state: n for state, n in ((WAITING, waiting), (GONE, unprocessed - waiting)) if n}
    return replace(flow, unprocessed=split)
