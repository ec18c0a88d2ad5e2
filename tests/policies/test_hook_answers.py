"""policies/hook_answers.py: a hook answer is used only under a feature set the session enabled."""

from __future__ import annotations

from typing import Any

from gateway.events import Dialect, Event, Kind
from policies import CapabilitySet, PolicyChain, Principal, Target
from policies.chain import Decision, Outcome
from policies.hook_answers import POLICY, HookAnswerFacts, HookAnswerPolicy

BACKEND = Principal("backend:mem", CapabilitySet(["*"]))
CHAIN = PolicyChain([HookAnswerPolicy()])
FACTS = {POLICY: HookAnswerFacts(enabled={"memory.retrieval"}, declared={"memory.retrieval", "memory.consolidation"})}


def answer(result: Any) -> Event:
    return Event(
        kind=Kind.RESPONSE,
        method="context/beforeInference",
        payload={"jsonrpc": "2.0", "id": None, "result": result},
        dialect=Dialect.MCPL,
    )


async def decide(result: Any) -> Decision:
    return await CHAIN.dispatch(answer(result), BACKEND, Target("mem", facts=FACTS))


async def test_an_answer_tagged_with_an_enabled_set_is_used() -> None:
    assert (await decide({"featureSet": "memory.retrieval", "contextInjections": []})).allowed


async def test_answers_without_an_enabled_tag_are_dropped_and_say_why() -> None:
    cases = {
        "disabled": {"featureSet": "memory.consolidation"},
        "unknown": {"featureSet": "memory.nope"},
        "untagged": {"contextInjections": []},
    }
    for why, result in cases.items():
        decision = await decide(result)
        assert (decision.allowed, decision.outcome, decision.policy) == (False, Outcome.DENIED, POLICY)
        assert decision.reason == f"hook answer {why} feature set"
        assert decision.data == {"why": why, "featureSet": result.get("featureSet")}


async def test_a_tag_that_is_not_a_string_or_a_result_that_is_not_an_object_is_untagged() -> None:
    assert (await decide({"featureSet": ["memory.retrieval"]})).data == {"why": "untagged", "featureSet": None}
    assert (await decide("text")).data == {"why": "untagged", "featureSet": None}


async def test_without_facts_it_stays_out_of_the_way() -> None:
    assert (await CHAIN.dispatch(answer({}), BACKEND, Target("mem"))).allowed
