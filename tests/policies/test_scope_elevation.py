"""policies/scope_elevation.py: a backend's scope/elevate answered by the patterns, or left to the host."""

from __future__ import annotations

from gateway.events import Event, Kind
from policies import CapabilitySet, PolicyChain, Principal, Target
from policies.chain import Decision, Outcome
from policies.scope_elevation import POLICY, ElevationFacts, ScopeElevationPolicy, approved_by_rules
from policies.scopes import ScopeRules

BACKEND = Principal("backend:files", CapabilitySet(["*"]))
ELEVATE = Event(
    kind=Kind.REQUEST,
    method="scope/elevate",
    payload={"jsonrpc": "2.0", "id": 1, "method": "scope/elevate", "params": {"featureSet": "files.edit"}},
)
CHAIN = PolicyChain([ScopeElevationPolicy()])
HOST = ScopeRules(whitelist=("/project/**",), blacklist=("**/.env",))
OPERATOR = ScopeRules(whitelist=("/srv/shared/**",), blacklist=("/etc/**",))


async def ask(
    label: str, host: ScopeRules = HOST, operator: ScopeRules = OPERATOR, approved: tuple[str, ...] = ()
) -> Decision:
    facts = {POLICY: ElevationFacts(label, host, operator, approved)}
    return await CHAIN.dispatch(ELEVATE, BACKEND, Target("files", facts=facts))


async def test_without_facts_it_stays_out_of_the_way() -> None:
    assert (await CHAIN.dispatch(ELEVATE, BACKEND, Target("files"))).allowed


async def test_an_unlisted_label_goes_to_the_host() -> None:
    decision = await ask("/home/x")
    assert decision.allowed, "no pattern decides: the request passes on to the host"


async def test_operator_blacklist_refuses_even_a_host_whitelisted_or_approved_label() -> None:
    decision = await ask("/etc/hosts", host=ScopeRules(whitelist=("/etc/**",)), approved=("/etc/hosts",))
    assert not decision.allowed and not approved_by_rules(decision)
    assert decision.outcome is Outcome.DENIED and decision.policy == POLICY
    assert decision.data == {"approved": False, "by": "operator", "pattern": "/etc/**"}
    assert decision.reason == "'/etc/hosts' is blacklisted by the operator ('/etc/**')"


async def test_host_blacklist_refuses() -> None:
    decision = await ask("/project/.env")
    assert not approved_by_rules(decision)
    assert decision.data is not None and decision.data["by"] == "host" and "**/.env" in decision.reason


async def test_whitelists_approve_without_asking_the_host() -> None:
    host = await ask("/project/src/main.ts")
    assert not host.allowed, "answered at the gateway: the host is not asked"
    assert approved_by_rules(host) and host.outcome is Outcome.ANSWERED
    assert host.data == {"approved": True, "by": "host", "pattern": "/project/**"}
    operator = await ask("/srv/shared/a")
    assert approved_by_rules(operator) and operator.data is not None and operator.data["by"] == "operator"


async def test_an_exact_earlier_approval_is_remembered_and_nothing_more() -> None:
    cached = await ask("/home/x", approved=("/home/x",))
    assert approved_by_rules(cached) and cached.data is not None and cached.data["by"] == "cache"
    assert (await ask("/home/y", approved=("/home/x",))).allowed, "another label is asked again"
