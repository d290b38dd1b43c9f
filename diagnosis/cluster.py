"""Rules about the nodes and the cluster: alarms, members down, partitions, replicas, leaders."""

from __future__ import annotations

from collections.abc import Iterator

from ackscope.model.findings import Finding
from ackscope.model.snapshot import NODE_ALARMS

from .context import Context, Rule, consumers_named
from .release_changes import change


def _alarm(field: str, what: str):
    def check(ctx: Context, rule: Rule) -> Iterator[Finding]:
        for n in ctx.snapshot.nodes:
            if getattr(n, f"{field}_alarm"):
                evidence = ({"mem_used": n.mem_used, "mem_limit": n.mem_limit} if field == "mem"
                            else {"disk_free": n.disk_free, "disk_free_limit": n.disk_free_limit})
                yield rule.finding("critical", "", f"node {n.name}", None, evidence,
                                   f"node {n.name} raised its {what} alarm: every publishing connection in the "
                                   "cluster is blocked until it clears.")
    return check



def _node_down(ctx: Context, rule: Rule) -> Iterator[Finding]:
    running = [n.name for n in ctx.snapshot.nodes if n.running]
    # A member its own plugin answers for is running, whatever a peer lists (sources/reachability.py): one left not
    # running is listed so and answered nothing itself, as a stopped node does, and as one cut off from the node
    # asked and from ackscope alike does too. Critical either way: the rest of the cluster has lost what was on it.
    asked = ctx.snapshot.overview.node or "the node asked"
    for n in ctx.snapshot.nodes:
        if n.running is not False:
            continue
        # Its classic queues stay homed there, unavailable; a quorum queue led there elects a leader elsewhere
        # while a majority of its members runs, so what still names this node has none.
        stranded = sorted(f"{q.vhost}/{q.name}" for q in ctx.snapshot.queues if q.node == n.name)
        replicas = sum(1 for q in ctx.snapshot.queues if q.members and n.name in q.members)
        had = sum(1 for c in ctx.previous.connections if c.node == n.name) if ctx.previous else 0
        said = [f"{len(stranded)} queue(s) still on it are unavailable until it returns" if stranded else "",
                f"{replicas} replicated queue(s) lost a member there" if replicas else "",
                f"its {had} client connection(s) were closed: clients must reconnect to another node and consume "
                "again" if had else ""]
        yield rule.finding("critical", "", f"node {n.name}", None, {
            "listed_not_running_by": asked, "running": running, "queues_on_it": len(stranded), "examples": stranded[:5],
            "replicated_queues_with_a_member_on_it": replicas, "connections_it_had": had},
            f"cluster member {n.name} is not running as {asked} lists it (inferred: no answer of its own reached "
            f"ackscope; one cut off from {asked} and from ackscope alike looks the same)"
            + "".join(f"; {x}" for x in said if x) + ".")


def _partition(ctx: Context, rule: Rule) -> Iterator[Finding]:
    members = [n.name for n in ctx.snapshot.nodes]
    down = {n.name for n in ctx.snapshot.nodes if n.running is False}
    khepri = ctx.release is not None and ctx.release >= (4, 2)
    for n in ctx.snapshot.nodes:
        # Named members only: a plugin's count alone lags a rejoin by a poll or two (measured on 4.3.6 after a
        # pause), while no member is listed as not running; it is evidence beside the names.
        if not n.partitions:
            continue
        cannot = list(n.partitions)
        # A member the node asked cannot reach, whose own plugin answers without counting its unreachable peers
        # (RabbitMQ before 3.13): it cannot reach the side of the node asked at least, and whether it reaches the
        # other members cut from that side too, nothing read says. Its side is itself and some of those: a majority
        # only where all of them with it would be one.
        others = [m for m in members if m != n.name and m not in cannot and m not in down]
        unsure = bool(others) and n.partitions_inferred and n.unreachable_peers is None \
            and n.name != ctx.snapshot.overview.node
        # A member not running (listed so, answering nothing) is on no side.
        side = None if unsure else [m for m in members if m not in cannot and m not in down]
        majority = (len(side) > len(members) / 2 if side is not None else
                    False if 1 + len(others) <= len(members) / 2 else None)
        if unsure:
            means = (f"whether it still reaches {', '.join(others)} is not known (its plugin counts no unreachable "
                     "peers before RabbitMQ 3.13), " + ("but its side holds no majority whichever it reaches"
                                                        if majority is False else
                                                        "so neither is whether its side holds a majority"))
        elif khepri:
            means = ("this side holds a majority of the cluster: it can still change definitions (queues, exchanges, "
                     "bindings, users, policies), and each quorum queue goes on where a majority of its members is"
                     if majority else
                     "this side holds no majority of the cluster: under Khepri it cannot change definitions (declaring "
                     "or deleting queues, exchanges, bindings, users, policies fails or hangs), and a quorum queue "
                     "whose majority of members is on the other side has no leader here")
            means += " (Khepri inferred from the release: the metadata store of a cluster formed on 4.2 or later)"
        else:
            # What each side does next is cluster_partition_handling's (ignore, pause_minority, autoheal), which no
            # source reads: naming what a mode would do is a guess.
            means = ("under Mnesia what each side does next is its partition handling mode's "
                     "(cluster_partition_handling), which this read does not show")
        who = ("at least " if unsure else "") + ", ".join(cannot) + (
            " (inferred: they answer themselves while it lists them as not running)" if n.partitions_inferred else "")
        yield rule.finding("critical", "", f"node {n.name}", None,
                           {"cannot_reach": cannot, "inferred": n.partitions_inferred,
                            **({"what_else_it_cannot_reach": f"not known: whether it reaches {', '.join(others)} "
                                "(its plugin counts no unreachable peers before RabbitMQ 3.13)"} if unsure else {}),
                            "unreachable_peers": n.unreachable_peers,
                            "its_side": f"itself and some of {', '.join(others)} (not known)" if side is None else side,
                            "majority": "not known" if majority is None else majority,
                            "metadata_store": ("khepri" if khepri else "mnesia") + " (inferred from the release)"},
                           f"node {n.name} is cut off from part of its cluster: it cannot reach {who}; {means}.")


def _quorum(ctx: Context, rule: Rule, *, lost: bool) -> Iterator[Finding]:
    for q in ctx.snapshot.queues:
        if q.type != "quorum" or not q.members or q.online is None:
            continue
        online = [m for m in q.online if m in q.members]
        missing = [m for m in q.members if m not in online]
        if not missing or (len(online) <= len(q.members) // 2) != lost:
            continue
        evidence = {"members": list(q.members), "online": online, "missing": missing, "leader": q.node,
                    "messages_ready": q.messages_ready}
        if lost:
            yield rule.finding("critical", q.vhost, f"queue {q.name}", consumers_named(ctx, q), evidence,
                               f"only {len(online)} of the quorum queue's {len(q.members)} members are online, "
                               "not a majority: it has no leader, publishes to it are not confirmed (publishers "
                               "wait or time out) and its consumers get nothing until members return.")
        else:
            yield rule.finding("warning", q.vhost, f"queue {q.name}", consumers_named(ctx, q), evidence,
                               f"{len(online)} of the quorum queue's {len(q.members)} members are online "
                               f"(missing: {', '.join(missing)}): it still confirms and delivers, but one more "
                               "failure " + ("costs its quorum." if len(online) - 1 <= len(q.members) // 2
                                             else "leaves it with fewer replicas.")
                               )


def _leaders_unbalanced(ctx: Context, rule: Rule) -> Iterator[Finding]:
    running = [n.name for n in ctx.snapshot.nodes if n.running]
    led = [q.node for q in ctx.snapshot.queues if q.node in running]
    if len(running) < 2 or len(led) < ctx.thresholds.leaders_unbalanced_min_queues:
        return
    counts = {n: led.count(n) for n in running}
    node = max(running, key=lambda n: (counts[n], n))
    share = counts[node] / len(led)
    if share <= ctx.thresholds.leaders_unbalanced_share:
        return
    yield rule.finding("warning" if share == 1 else "info", "", f"node {node}", None,
                       {"leaders": counts, "share": round(share, 3)},
                       f"node {node} leads {counts[node]} of the cluster's {len(led)} queues ({share:.0%}; "
                       f"quorum leaders and classic queues' homes): its CPU, disk and network carry most of "
                       "the traffic, and its failure moves most of the leaders at once.")


def _unsynchronised(ctx: Context, rule: Rule) -> Iterator[Finding]:
    for q in ctx.snapshot.queues:
        if not q.mirrors or q.synchronised_mirrors is None:
            continue
        behind = [m for m in q.mirrors if m not in q.synchronised_mirrors]
        if behind:
            yield rule.finding("warning", q.vhost, f"queue {q.name}", consumers_named(ctx, q),
                               {"leader": q.node, "mirrors": list(q.mirrors), "unsynchronised": behind},
                               f"the classic mirrored queue's mirrors on {', '.join(behind)} are not synchronised: "
                               "if its leader fails now, a mirror that is promoted loses the messages it lacks "
                               "(ha-promote-on-failure), or the queue waits for the leader.")



def _without_mirroring(release: tuple[int, int] | None) -> str | None:
    removed = change("classic-queue-mirroring-removed").release
    return (f"classic queue mirroring is removed in RabbitMQ {removed[0]}.{removed[1]}"
            if release and release >= removed else None)


RULES: tuple[Rule, ...] = (
    Rule("memory-alarm", "A node's memory alarm: every publisher in the cluster is blocked.", "Drain or purge "
         "queues, add consumers, raise vm_memory_high_watermark only with memory to spare; see RabbitMQ guide "
         "'Memory and Disk Alarms'.", _alarm("mem", "memory"), needs=(NODE_ALARMS,)),
    Rule("disk-alarm", "A node's disk alarm: every publisher in the cluster is blocked.", "Free disk space or "
         "drain queues; see RabbitMQ guide 'Memory and Disk Alarms'.", _alarm("disk_free", "free disk space"),
         needs=(NODE_ALARMS,)),
    Rule("node-down", "A cluster member that is not running: listed so by the node asked, with no answer of its own "
         "(its Prometheus plugin, where known: the listeners, or --prometheus-url); a member cut off from the "
         "cluster and from ackscope alike looks the same, and is said so. What lived there (queue leaders and "
         "homes, replicas, client connections).", "Restart the node or find why it stopped (its log, the host); clients "
         "must reconnect to another node and consume again; see RabbitMQ guide 'Clustering'.", _node_down),
    Rule("network-partition", "A node cut off from part of its cluster, naming the nodes it cannot reach and its "
         "side: as the release lists a partition (3.x, Mnesia), or, where it lists none (4.x, Khepri: `partitions` "
         "is always empty), inferred from which nodes answer themselves while another lists them as not running and "
         "say so too (their own view, or their Prometheus plugin's count of unreachable peers; every URL of "
         "--prometheus-url is asked, so a read that starts after the split sees it too). Under Khepri the side "
         "without a majority cannot change definitions; under Mnesia the partition handling mode, not read, "
         "decides what each side does.",
         "Restore the network between them; choose a partition handling strategy (pause_minority) and restart "
         "the losing side; see RabbitMQ guide 'Clustering and Network Partitions'.", _partition),
    Rule("quorum-queue-degraded", "A quorum queue with fewer members online than configured, still a majority.",
         "Bring the missing members' nodes back; if a node is gone for good, replace the member "
         "(rabbitmq-queues delete_member / add_member, or grow); see RabbitMQ guide 'Quorum Queues'.",
         lambda ctx, rule: _quorum(ctx, rule, lost=False)),
    Rule("quorum-queue-no-quorum", "A quorum queue with no majority of its members online: publishes to it are "
         "not confirmed and its consumers get nothing.", "Bring members' nodes back until a majority runs; "
         "publishers should time out their confirms and not drop what is unconfirmed; see RabbitMQ guide "
         "'Quorum Queues', 'Availability'.", lambda ctx, rule: _quorum(ctx, rule, lost=True)),
    Rule("queue-leaders-unbalanced", "One node leads most of the cluster's queues (quorum leaders and classic "
         "queues' homes): info above the threshold share, a warning when it leads them all.",
         "Rebalance (rabbitmq-queues rebalance quorum) and declare queues with a leader locator "
         "(queue-leader-locator: balanced); see RabbitMQ guide 'Quorum Queues'.", _leaders_unbalanced),
    Rule("mirrored-queue-unsynchronised", "A classic mirrored queue (RabbitMQ 3.x) with mirrors that are not "
         "synchronised.", "Synchronise (rabbitmqctl sync_queue) or set ha-sync-mode: automatic; better, move to "
         "quorum queues: mirroring is removed in RabbitMQ 4.", _unsynchronised,
         inapplicable=_without_mirroring),
)
