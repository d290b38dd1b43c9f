"""The cluster rules on small snapshots: a node down, a partition, a quorum queue degraded or without its
quorum, leaders piled on one node, a mirrored queue out of sync."""

from __future__ import annotations

from dataclasses import replace

from snapshot_builders import OVERVIEW, connection, consumer, node, queue, snapshot

from ackscope.diagnosis.rules import Context, evaluate
from ackscope.sources.prometheus_plugin.normalise import online_from_nodes
from ackscope.sources.reachability import REJOIN_WITHIN, Rejoining, plugins_to_ask, reconciled

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


def test_a_member_listed_down_and_not_heard_is_silent_whether_or_not_the_read_reached_its_plugin():
    # As seen on 4.3.6: n2 paused hung the plugin read past the deadline, its own plugin's or n1's (n1's API and
    # plugin wait on the paused peer too); resumed, n2 answered the next poll counting n1 unreachable. Taken as cut
    # off, a clean-clone run named a partition that never was.
    rejoining, members = Rejoining(), _members(True, False)
    assert rejoining.heard(members, {}, now=100.0) == {}  # the read, cut short, heard no plugin
    back = rejoining.heard(members, {"rabbit@n1": 1, "rabbit@n2": 1}, now=101.0)
    assert [n.running for n in reconciled(members, "rabbit@n1", back)] == [True, False]  # down, not cut off
    # Still apart REJOIN_WITHIN after it was last not heard: cut off, named.
    apart = rejoining.heard(members, {"rabbit@n1": 1, "rabbit@n2": 1}, now=100.0 + REJOIN_WITHIN)
    assert [len(n.partitions) for n in reconciled(members, "rabbit@n1", apart)] == [1, 1]
    # A read that failed after n2's plugin answered heard n2: cut off at once, not taken as rejoining.
    heard = Rejoining()
    assert heard.heard(members, dict.fromkeys({"rabbit@n2"}), now=100.0) == {"rabbit@n2": None}
    apart = heard.heard(members, {"rabbit@n1": 1, "rabbit@n2": 1}, now=101.0)
    assert [len(n.partitions) for n in reconciled(members, "rabbit@n1", apart)] == [1, 1]


def test_a_poll_without_the_node_list_forgets_no_silence():
    # The node asked may not list its members in time while one is paused: that poll has no nodes at all.
    rejoining, members = Rejoining(), _members(True, False)
    rejoining.heard(members, {"rabbit@n1": 0}, now=100.0)
    assert rejoining.heard((), {"rabbit@n1": 0}, now=102.0) == {"rabbit@n1": 0}
    assert rejoining.heard(members, {"rabbit@n1": 1, "rabbit@n2": 1}, now=104.0) == {"rabbit@n1": 1}


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


# -- a read that starts during a partition (ackscope diagnose on call): it never saw the cluster whole -------------
N1, N2, N3 = "rabbit@n1", "rabbit@n2", "rabbit@n3"
U1, U2, U3 = "http://127.0.0.1:15692", "http://127.0.0.1:15693", "http://127.0.0.1:15694"


def test_the_given_plugins_are_the_members_asked_whatever_the_listeners_of_the_node_asked_list():
    # After a split node 1 lists only its own listener; the URLs given are all asked, each known by the node its
    # answer named. Only the plugin of a member node 1 reaches must answer.
    assert plugins_to_ask({N1: U1}, {}, (U1, U2, U3), {}) == {U1: (U1, False), U2: (U2, False), U3: (U3, False)}
    assert plugins_to_ask({N1: U1}, {}, (U1, U2, U3), {U1: N1, U2: N2, U3: N3}) == {
        U1: (N1, True), U2: (N2, False), U3: (N3, False)}
    # Without URLs given: where the listeners say, and the members they listed before (down, or cut off).
    assert plugins_to_ask({N1: U1}, {N3: U3}, (), {}) == {U1: (N1, True), U3: (N3, False)}


def _on_4_3(nodes) -> dict[str, list]:
    s = snapshot(overview=replace(OVERVIEW, rabbitmq_version="4.3.6", node=N1), nodes=nodes)
    by_node: dict[str, list] = {}
    for f in evaluate(Context(s)):
        if f.rule in ("network-partition", "node-down"):
            by_node.setdefault(f.object.removeprefix("node "), []).append(f)
    return by_node


def test_a_full_split_seen_first_during_it_names_each_node_partitioned_and_none_down():
    # As measured on 4.3.6: node 1 lists both peers not running and no partition; each plugin given answers,
    # counting 2 unreachable peers.
    nodes = reconciled(_members(True, False, False), N1, {N1: 2, N2: 2, N3: 2})
    found = _on_4_3(nodes)
    assert {name: [f.rule for f in fs] for name, fs in found.items()} == {
        N1: ["network-partition"], N2: ["network-partition"], N3: ["network-partition"]}
    for name, (f,) in found.items():
        assert f.evidence["cannot_reach"] == sorted({N1, N2, N3} - {name}) and f.evidence["majority"] is False
        assert "cannot change definitions" in f.explanation and "Khepri" in f.explanation


def test_a_member_whose_plugin_does_not_answer_is_down_as_the_node_asked_lists_it_and_said_to_be_an_inference():
    # n3's plugin does not answer and its peers count it unreachable: stopped, or cut off from them and from
    # ackscope alike. The two look the same from here; the rest of the cluster has lost what was on it either way.
    nodes = reconciled(_members(True, True, False), N1, {N1: 1, N2: 1})
    found = _on_4_3(nodes)
    assert list(found) == [N3] and [f.rule for f in found[N3]] == ["node-down"]
    [down] = found[N3]
    assert down.severity == "critical" and down.evidence["listed_not_running_by"] == N1
    assert f"not running as {N1} lists it (inferred: no answer of its own reached ackscope" in down.explanation
    assert "cut off from rabbit@n1 and from ackscope alike looks the same" in down.explanation


def test_under_mnesia_the_partition_handling_mode_not_read_is_said_unknown_and_no_mode_is_named():
    s = snapshot(nodes=[node(A, partitions=(C,)), node(B, partitions=()), node(C, partitions=(A,))])
    for f in found(s, "network-partition"):
        assert "cluster_partition_handling" in f.explanation and "does not show" in f.explanation
        assert "pause_minority" not in f.explanation and "autoheal" not in f.explanation
        assert "Khepri" not in f.explanation


def test_a_member_cut_off_whose_plugin_counts_no_peers_reaches_node_1_at_least_and_its_side_is_not_known():
    # 3.10, a full split: node 1 lists both not running; n2 and n3 answer, counting nothing (before 3.13). That n2 and
    # n3 cannot reach node 1 is known; whether they reach each other (a majority together) is not.
    nodes = reconciled(_members(True, False, False), N1, {N1: None, N2: None, N3: None})
    s = snapshot(overview=replace(OVERVIEW, node=N1), nodes=nodes)
    by = {f.object.removeprefix("node "): f for f in evaluate(Context(s)) if f.rule == "network-partition"}
    assert by[N1].evidence["cannot_reach"] == [N2, N3] and by[N1].evidence["majority"] is False
    for name in (N2, N3):
        ev = by[name].evidence
        assert ev["cannot_reach"] == [N1] and ev["majority"] == "not known" and "not known" in ev["its_side"]
        assert ev["what_else_it_cannot_reach"].startswith("not known")
        assert f"cannot reach at least {N1}" in by[name].explanation
    assert not [f for f in evaluate(Context(s)) if f.rule == "node-down"]
    # Two against one on 3.10: the one cut off has no other member it could share a side with: alone, known.
    nodes = reconciled(_members(True, True, False), N1, {N1: None, N2: None, N3: None})
    s = snapshot(overview=replace(OVERVIEW, node=N1), nodes=nodes)
    [lone] = [f for f in evaluate(Context(s)) if f.rule == "network-partition" and f.object == f"node {N3}"]
    assert (lone.evidence["cannot_reach"], lone.evidence["majority"]) == ([N1, N2], False)
    assert "what_else_it_cannot_reach" not in lone.evidence
