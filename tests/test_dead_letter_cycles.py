"""The dead-letter cycle rule on small topologies: a loop a message can go round without a rejection is named before
any loss; a loop that needs a consumer's rejection, or whose routing is not known, is named by nothing."""

from __future__ import annotations

from dataclasses import replace

import pytest
from snapshot_builders import queue, snapshot

from ackscope.diagnosis.dead_letter_cycles import _topic_matches
from ackscope.diagnosis.rules import Context, evaluate
from ackscope.model.snapshot import Exchange, MessageStats


def _x(name: str, kind: str, *bindings: tuple[str, str, str]) -> Exchange:
    return Exchange("/", name, MessageStats(), tuple(bindings), type=kind)


def _work_retry(work_ttl: int | None = 2000, kind: str = "direct", retry_key: str = "retry") -> Context:
    """work dead-letters to retry.x (key retry), retry (TTL 5 s) dead-letters to work.x (key work)."""
    work = queue("work", dead_letter_exchange="retry.x", dead_letter_routing_key="retry", message_ttl_ms=work_ttl)
    retry = queue("retry", dead_letter_exchange="work.x", dead_letter_routing_key="work", message_ttl_ms=5000,
                  consumers=0, messages_ready=3)
    exchanges = [_x("retry.x", kind, ("queue", "retry", retry_key)), _x("work.x", "direct", ("queue", "work", "work"))]
    return Context(snapshot(1000.0, queues=[work, retry, queue("healthy")], exchanges=exchanges))


def _cycles(ctx: Context) -> list:
    return [f for f in evaluate(ctx) if f.rule == "dead-letter-cycle"]


def test_a_work_and_retry_queue_that_both_expire_into_each_other_are_named_before_any_loss():
    [f] = _cycles(_work_retry())
    assert f.severity == "warning" and f.object == "dead-letter cycle retry → work → retry"
    assert "expiry (its message TTL of 2 s) in work" in f.explanation and "dropped" in f.explanation
    assert f.evidence["hops"][0].startswith("retry dead-letters by expiry") and f.evidence["messages_in_the_cycle_now"] == 3
    assert "healthy" not in str(f)


def test_a_retry_loop_entered_only_by_a_consumers_rejection_is_allowed_by_the_broker_and_named_by_nothing():
    assert _cycles(_work_retry(work_ttl=None)) == []


@pytest.mark.parametrize("kind, key, named", [("fanout", "anything", True), ("topic", "re.#", False),
                                              ("topic", "#", True), ("direct", "other", False),
                                              ("headers", "retry", False)])
def test_a_hop_is_claimed_only_where_the_exchanges_routing_is_known_to_take_the_key(kind, key, named):
    assert bool(_cycles(_work_retry(kind=kind, retry_key=key))) == named


def test_dead_letters_sent_with_each_messages_own_key_make_no_claim():
    ctx = _work_retry()
    work = replace(ctx.snapshot.queues[0], dead_letter_routing_key=None)
    assert _cycles(replace(ctx, snapshot=replace(ctx.snapshot, queues=(work, *ctx.snapshot.queues[1:])))) == []


def test_a_queue_dead_lettering_to_itself_through_the_default_exchange_is_a_cycle():
    looping = queue("self", dead_letter_exchange="", dead_letter_routing_key="self", max_length=10)
    [f] = _cycles(Context(snapshot(1000.0, queues=[looping])))
    assert f.object == "dead-letter cycle self → self" and "its length limit" in f.explanation


@pytest.mark.parametrize("pattern, key, matches", [("a.*.c", "a.b.c", True), ("a.*.c", "a.c", False),
                                                   ("a.#.c", "a.c", True), ("a.#.c", "a.b.b.c", True),
                                                   ("#", "", True), ("a.#", "a", True), ("*.b", "a.b.c", False)])
def test_topic_binding_keys_match_as_the_broker_matches_them(pattern, key, matches):
    assert _topic_matches(pattern, key) is matches


def test_two_cycles_sharing_a_queue_and_a_long_chain_into_one_are_each_named_once():
    def dl(name: str, to: str) -> object:
        return queue(name, dead_letter_exchange="", dead_letter_routing_key=to, message_ttl_ms=1000)
    chain = [dl(f"c{i:03}", f"c{i + 1:03}") for i in range(300)] + [dl("c300", "a")]
    loops = [dl("a", "b"), dl("b", "a")]
    shared = [queue("a", dead_letter_exchange="fan", dead_letter_routing_key="k", message_ttl_ms=1000),
              dl("b", "a"), dl("b2", "a")]
    fan = _x("fan", "fanout", ("queue", "b", ""), ("queue", "b2", ""))
    assert [f.object for f in _cycles(Context(snapshot(1000.0, queues=chain + loops)))] == [
        "dead-letter cycle a → b → a"]
    found = sorted(f.object for f in _cycles(Context(snapshot(1000.0, queues=shared, exchanges=[fan]))))
    assert found == ["dead-letter cycle a → b → a", "dead-letter cycle a → b2 → a"]
