"""policies/hook_inference.py: no inference/request from a backend inside a context hook (MCPL §10.7)."""

from __future__ import annotations

from gateway.events import Event, Kind
from policies import CapabilitySet, PolicyChain, Principal, Target
from policies.chain import Outcome
from policies.hook_inference import POLICY, HookCallsFacts, InferenceInHookPolicy

BACKEND = Principal("backend:mem", CapabilitySet(["*"]))
INFER = Event(
    kind=Kind.REQUEST,
    method="inference/request",
    payload={"jsonrpc": "2.0", "id": 1, "method": "inference/request", "params": {"featureSet": "memory.a"}},
)
CHAIN = PolicyChain([InferenceInHookPolicy()])


async def test_a_backend_with_a_hook_call_in_flight_may_not_ask_for_inference() -> None:
    decision = await CHAIN.dispatch(INFER, BACKEND, Target("mem", facts={POLICY: HookCallsFacts(2)}))
    assert (decision.allowed, decision.code, decision.outcome, decision.policy) == (
        False,
        -32600,
        Outcome.DENIED,
        POLICY,
    )
    assert "§10.7" in decision.reason


async def test_outside_a_hook_or_without_facts_it_stays_out_of_the_way() -> None:
    assert (await CHAIN.dispatch(INFER, BACKEND, Target("mem", facts={POLICY: HookCallsFacts(0)}))).allowed
    assert (await CHAIN.dispatch(INFER, BACKEND, Target("mem"))).allowed
