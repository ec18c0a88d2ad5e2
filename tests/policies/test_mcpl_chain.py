"""The MCPL decisions as members of the one policy chain (dispatch stage, facts from routing)."""

from __future__ import annotations

from gateway import jsonrpc
from gateway.events import Event, Kind
from policies import CapabilitySet, PolicyChain, Principal, Target
from policies.feature_sets import POLICY, FeatureSetPolicy, TagFacts
from policies.scopes import SCOPES_POLICY, ScopedCallFacts, ScopePolicy, ScopeRules

WHO = Principal("alice", CapabilitySet(["*"]))


def event(method: str, params: dict[str, object]) -> Event:
    return Event(
        kind=Kind.REQUEST, method=method, payload={"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    )


CHAIN = PolicyChain([ScopePolicy(), FeatureSetPolicy()])


async def test_without_facts_the_mcpl_policies_stay_out_of_the_way() -> None:
    assert (await CHAIN.dispatch(event("tools/call", {"name": "x"}), WHO, Target("b"))).allowed
    assert (await CHAIN.dispatch(event("push/event", {"featureSet": "m.a"}), WHO, Target("b", facts={}))).allowed


async def test_feature_set_policy_decides_a_tagged_message() -> None:
    facts = {POLICY: TagFacts({"m.a", "m.b"}, enabled_anywhere=False, can_enable=True)}
    denied = await CHAIN.dispatch(event("push/event", {"featureSet": "m.a"}), WHO, Target("b", facts=facts))
    assert (denied.code, denied.data) == (-32001, {"featureSet": "m.a", "canEnable": True})
    unknown = await CHAIN.dispatch(event("push/event", {"featureSet": "m.z"}), WHO, Target("b", facts=facts))
    assert unknown.code == -32003
    enabled = {POLICY: TagFacts({"m.a"}, enabled_anywhere=True, can_enable=True)}
    assert (await CHAIN.dispatch(event("push/event", {"featureSet": "m.a"}), WHO, Target("b", facts=enabled))).allowed


def scoped(
    label: object, *, enabled: bool = True, host: ScopeRules = ScopeRules(), needs_enabled: bool = True
) -> dict[str, object]:
    operator = ScopeRules(blacklist=("/etc/**",))
    return {SCOPES_POLICY: ScopedCallFacts(label, (("files.edit", host, operator, enabled),), needs_enabled, True)}


async def test_scope_policy_decides_a_scoped_call() -> None:
    call = event("tools/call", {"name": "edit"})
    assert (await CHAIN.dispatch(call, WHO, Target("b", facts=scoped("/p/a")))).allowed
    operator = await CHAIN.dispatch(call, WHO, Target("b", facts=scoped("/etc/hosts", host=ScopeRules(("/etc/**",)))))
    assert operator.code == jsonrpc.CAPABILITY_DENIED and "operator" in operator.reason, "the operator's blacklist wins"
    host = await CHAIN.dispatch(
        call, WHO, Target("b", facts=scoped("/p/.env", host=ScopeRules(blacklist=("**/.env",))))
    )
    assert host.code == jsonrpc.CAPABILITY_DENIED and host.data == {"featureSet": "files.edit", "scope": "/p/.env"}
    off = await CHAIN.dispatch(call, WHO, Target("b", facts=scoped("/p/a", enabled=False)))
    assert off.code == -32001
    plain = await CHAIN.dispatch(call, WHO, Target("b", facts=scoped("/p/a", enabled=False, needs_enabled=False)))
    assert plain.allowed, "a client without MCPL meets only the blacklists"
    assert (await CHAIN.dispatch(call, WHO, Target("b", facts=scoped(5)))).code == -32602
    unknown = {SCOPES_POLICY: ScopedCallFacts("/p", (), True, False, named_unknown="files.nope")}
    assert (await CHAIN.dispatch(call, WHO, Target("b", facts=unknown))).code == -32003
