"""The cluster rules on small snapshots: a node down, a partition, a quorum queue degraded or without its
quorum, leaders piled on one node, a mirrored queue out of sync."""

from __future__ import annotations

from dataclasses import replace

from snapshot_builders import OVERVIEW, connection, consumer, node, queue, snapshot

from ackscope.diagnosis.rules import Context, evaluate
from ackscope.sources.prometheus_plugin.normalise import online_from_nodes
from ackscope.sources.reachability import REJOIN_WITHIN, Rejoining, reconciled

A, B, C = "rabbit@a", "rabbit@b", "rabbit@c"


def found(s, rule: str, previous=None):
    return [f for f in evaluate(Context(s, previous)) if f.rule == rule]


def test_a_node_not_running_is_critical_naming_it_its_stranded_queues_and_the_connections_it_had():
    qq = queue("orders", type="quorum", node=A, members=(A, B, C), online=(A, B))
    stranded = queue("local-cache", node=C, state="down")
    before = snapshot(connections=[connection("c1", node=C), connection("c2", node=A)])
    s = snapshot(nodes=[node(A), node(B), node(C, running=False)], queues=[qq, stranded])
    [f] = found(s, "node-down", before)
    assert (f.severity, f.object) == ("critical", f"node {C}")
    assert f.evidence["queues_on_it"] == 1 and f.evidence["examples"] == ["//local-cache"]
    assert f.evidence["replicated_queues_with_a_member_on_it"] == 1
    assert f.evidence["connections_it_had"] == 1
    assert found(snapshot(nodes=[node(A), node(B)]), "node-down") == []


def test_a_partition_is_critical_naming_both_sides():
    s = snapshot(nodes=[node(A, partitions=(C,)), node(B, partitions=()), node(C, partitions=(A,))])
    fs = found(s, "network-partition")
    assert sorted((f.object, tuple(f.evidence["cannot_reach"])) for f in fs) == [(f"node {A}", (C,)),
                                                                                 (f"node {C}", (A,))]
    assert all(f.severity == "critical" for f in fs)


def test_a_quorum_queue_that_lost_a_member_is_degraded_and_one_without_a_majority_has_no_quorum():
    degraded = queue("orders", type="quorum", node=A, members=(A, B, C), online=(A, B))
    lost = queue("payments", type="quorum", node=None, members=(A, B, C), online=(A,), messages_ready=7)
    whole = queue("audit", type="quorum", node=B, members=(A, B, C), online=(A, B, C))
    s = snapshot(queues=[degraded, lost, whole], consumers=[consumer("payments")])
    [d] = found(s, "quorum-queue-degraded")
    assert (d.severity, d.object, d.evidence["missing"]) == ("warning", "queue orders", [C])
    [n] = found(s, "quorum-queue-no-quorum")
    assert (n.severity, n.object, n.evidence["online"], n.evidence["missing"]) == \
        ("critical", "queue payments", [A], [B, C])
    assert n.identity  # its consumers are named, the clients that get nothing


def test_a_five_member_quorum_queue_with_three_online_still_has_its_quorum():
    five = ("n1", "n2", "n3", "n4", "n5")
    s = snapshot(queues=[queue("q5", type="quorum", members=five, online=five[:3])])
    assert [f.rule for f in evaluate(Context(s)) if f.rule.startswith("quorum")] == ["quorum-queue-degraded"]


def test_a_source_that_does_not_say_who_is_online_raises_no_quorum_finding():
    s = snapshot(queues=[queue("orders", type="quorum", members=(A, B, C), online=None)])
    assert [f for f in evaluate(Context(s)) if f.rule.startswith("quorum")] == []


def test_leaders_on_one_node_beyond_the_share_are_info_and_all_on_one_node_a_warning():
    nodes = [node(A), node(B), node(C)]
    piled = [queue(f"q{i}", node=A) for i in range(8)] + [queue("r1", node=B), queue("r2", node=C)]
    [f] = found(snapshot(nodes=nodes, queues=piled), "queue-leaders-unbalanced")
    assert (f.severity, f.object, f.evidence["leaders"]) == ("info", f"node {A}", {A: 8, B: 1, C: 1})
    [f] = found(snapshot(nodes=nodes, queues=[queue(f"q{i}", node=B) for i in range(10)]),
                "queue-leaders-unbalanced")
    assert (f.severity, f.object) == ("warning", f"node {B}")
    spread = [queue(f"q{i}", node=(A, B, C)[i % 3]) for i in range(30)]
    assert found(snapshot(nodes=nodes, queues=spread), "queue-leaders-unbalanced") == []
    assert found(snapshot(nodes=[node(A)], queues=piled), "queue-leaders-unbalanced") == []  # one node


def test_a_mirrored_queue_with_a_mirror_behind_is_unsynchronised():
    s = snapshot(queues=[queue("ha", node=A, mirrors=(B, C), synchronised_mirrors=(B,)),
                         queue("ha-ok", node=A, mirrors=(B,), synchronised_mirrors=(B,))])
    [f] = found(s, "mirrored-queue-unsynchronised")
    assert (f.severity, f.object, f.evidence["unsynchronised"]) == ("warning", "queue ha", [C])


def test_the_plugin_source_takes_a_members_online_from_the_nodes_running_at_each_poll():
    listed = queue("orders", type="quorum", node=A, members=(A, B, C), online=(A, B, C))  # a minute-old list
    plain = queue("cache", node=A)
    got = list(online_from_nodes([listed, plain], [node(A), node(B), node(C, running=False)]))
    assert got[0].online == (A, B) and got[1] == plain
    assert list(online_from_nodes([listed], [])) == [listed]  # no nodes listed: nothing to judge by


# -- partitions, from what the nodes say themselves (sources/reachability.py) ------------------------------------
def _members(*running: bool, partitions=()) -> tuple:
    return tuple(node(f"rabbit@n{i + 1}", running=r, partitions=partitions) for i, r in enumerate(running))


def test_a_two_against_one_split_under_khepri_is_named_on_both_sides_and_nobody_is_down():
    # As measured on 4.3.6: n1 lists n3 not running and no partition; every plugin answers with its count.
    nodes = reconciled(_members(True, True, False), "rabbit@n1", {"rabbit@n1": 1, "rabbit@n2": 1, "rabbit@n3": 2})
    assert all(n.running for n in nodes)
    assert {n.name: n.partitions for n in nodes} == {"rabbit@n1": ("rabbit@n3",), "rabbit@n2": ("rabbit@n3",),
                                                     "rabbit@n3": ("rabbit@n1", "rabbit@n2")}
    assert all(n.partitions_inferred for n in nodes)


def test_a_full_split_leaves_each_node_alone_and_a_node_that_does_not_answer_is_still_down():
    alone = reconciled(_members(True, False, False), "rabbit@n1", {"rabbit@n1": 2, "rabbit@n2": 2, "rabbit@n3": 2})
    assert [len(n.partitions) for n in alone] == [2, 2, 2]
    down = reconciled(_members(True, True, False), "rabbit@n1", {"rabbit@n1": 0, "rabbit@n2": 0})
    assert [n.running for n in down] == [True, True, False] and not any(n.partitions for n in down)


def test_a_member_that_answers_again_after_a_silence_is_rejoining_for_a_while_then_cut_off_if_still_apart():
    # As measured on 4.3.6 after n2 was paused past net_ticktime: resumed, it answers and counts n1 unreachable
    # while n1 still lists it as not running, for the seconds until they reconnect.
    rejoining, members = Rejoining(), _members(True, False)
    assert rejoining.heard(members, {"rabbit@n1": 0}, now=100.0) == {"rabbit@n1": 0}  # paused: silent
    back = rejoining.heard(members, {"rabbit@n1": 1, "rabbit@n2": 1}, now=105.0)
    assert back == {"rabbit@n1": 1}
    assert [n.running for n in reconciled(members, "rabbit@n1", back)] == [True, False]  # down, not partitioned
    apart = rejoining.heard(members, {"rabbit@n1": 1, "rabbit@n2": 1}, now=100.0 + REJOIN_WITHIN)
    assert [len(n.partitions) for n in reconciled(members, "rabbit@n1", apart)] == [1, 1]
    # Whole again, the member's silence is forgotten: a split later is named at once.
    assert rejoining.heard(_members(True, True), {"rabbit@n1": 0, "rabbit@n2": 0}, now=140.0) == {
        "rabbit@n1": 0, "rabbit@n2": 0}
    assert rejoining.heard(members, {"rabbit@n1": 1, "rabbit@n2": 1}, now=141.0) == {"rabbit@n1": 1, "rabbit@n2": 1}


def test_3_10_lists_its_partitions_itself_and_they_are_kept():
    nodes = reconciled(_members(True, True, partitions=("rabbit@n2",)), "rabbit@n1", {"rabbit@n1": None})
    assert nodes[0].partitions == ("rabbit@n2",) and not nodes[0].partitions_inferred


def test_under_khepri_the_minority_side_is_told_it_cannot_change_definitions_and_no_node_is_called_down():
    nodes = reconciled(_members(True, True, False), "rabbit@n1", {"rabbit@n1": 1, "rabbit@n2": 1, "rabbit@n3": 2})
    on_4 = replace(OVERVIEW, rabbitmq_version="4.3.6")
    found = {f.object: f for f in evaluate(Context(snapshot(overview=on_4, nodes=nodes)))
             if f.rule in ("network-partition", "node-down")}
    assert set(found) == {"node rabbit@n1", "node rabbit@n2", "node rabbit@n3"}
    assert all(f.rule == "network-partition" for f in found.values())
    minority = found["node rabbit@n3"]
    assert minority.evidence["majority"] is False and "cannot change definitions" in minority.explanation
    assert "inferred" in minority.explanation and found["node rabbit@n1"].evidence["majority"] is True


def test_a_node_resuming_after_a_pause_answers_before_it_is_seen_again_and_is_no_partition():
    # n2 answers itself and sees n1 running; n1 still lists it not running for a moment.
    nodes = reconciled(_members(True, False), "rabbit@n1", {"rabbit@n1": 0, "rabbit@n2": 0},
                       {"rabbit@n2": ()})
    assert [n.running for n in nodes] == [True, True] and not any(n.partitions for n in nodes)
