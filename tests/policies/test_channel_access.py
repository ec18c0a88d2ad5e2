"""policies/channel_access.py: channel publish / observe gated by feature sets and scope patterns."""

from __future__ import annotations

from gateway.events import Event, Kind
from policies import CapabilitySet, PolicyChain, Principal, Target
from policies.chain import Decision, Outcome
from policies.channel_access import POLICY, ChannelFacts, ChannelGate, ChannelPolicy
from policies.scopes import ScopeRules

HOST = Principal("alice", CapabilitySet(["*"]))
PUBLISH = Event(
    kind=Kind.REQUEST,
    method="channels/publish",
    payload={"jsonrpc": "2.0", "id": 1, "method": "channels/publish", "params": {"channelId": "chat.discord:#x"}},
)
CHAIN = PolicyChain([ChannelPolicy()])
OPEN = ChannelGate("chat.publish", ScopeRules(), ScopeRules())


async def decide(
    gating: tuple[str, ...] = ("chat.publish",),
    enabled: tuple[ChannelGate, ...] = (OPEN,),
    host_label: str = "chat.discord:#random",
    own_id: str = "discord:#random",
) -> Decision:
    facts = ChannelFacts("channels.publish", gating, enabled, host_label, own_id, channel_id="chat.discord:#random")
    return await CHAIN.dispatch(PUBLISH, HOST, Target("chat", facts={POLICY: facts}))


async def test_a_backend_that_gates_nothing_is_open() -> None:
    assert (await decide(gating=(), enabled=())).allowed
    assert (await CHAIN.dispatch(PUBLISH, HOST, Target("chat"))).allowed, "no facts: not this policy's business"


async def test_no_enabled_gating_set_refuses_with_the_sets_named() -> None:
    decision = await decide(gating=("chat.publish", "chat.all"), enabled=())
    assert (decision.allowed, decision.code, decision.outcome) == (False, -32017, Outcome.DENIED)
    assert decision.reason == "no feature set using channels.publish is enabled (chat.publish, chat.all)"
    assert decision.data == {"channelId": "chat.discord:#random", "reason": decision.reason}


async def test_enabled_and_not_blacklisted_is_permitted() -> None:
    assert (await decide()).allowed


async def test_host_patterns_see_the_exposed_id_and_operator_patterns_the_backends_own() -> None:
    # A host pattern on the backend's own id does not match what the host sees, and vice versa.
    host_own = ChannelGate("chat.publish", ScopeRules(blacklist=("discord:#random",)), ScopeRules())
    assert (await decide(enabled=(host_own,))).allowed
    operator_exposed = ChannelGate("chat.publish", ScopeRules(), ScopeRules(blacklist=("chat.discord:#random",)))
    assert (await decide(enabled=(operator_exposed,))).allowed
    host = ChannelGate("chat.publish", ScopeRules(blacklist=("chat.discord:#rand*",)), ScopeRules())
    refused = await decide(enabled=(host,))
    assert not refused.allowed and "by the host" in refused.reason
    operator = ChannelGate("chat.publish", ScopeRules(), ScopeRules(blacklist=("discord:#*",)))
    refused = await decide(enabled=(operator,))
    assert not refused.allowed and "by the operator" in refused.reason


async def test_the_operators_refusal_is_the_reason_given_when_both_refuse() -> None:
    both = ChannelGate(
        "chat.publish", ScopeRules(blacklist=("chat.discord:#random",)), ScopeRules(blacklist=("discord:#random",))
    )
    refused = await decide(enabled=(both,))
    assert not refused.allowed and "by the operator" in refused.reason


async def test_one_enabled_set_that_permits_is_enough() -> None:
    blocked = ChannelGate("chat.strict", ScopeRules(), ScopeRules(blacklist=("discord:#*",)))
    assert (await decide(gating=("chat.strict", "chat.publish"), enabled=(blocked, OPEN))).allowed
    assert not (await decide(gating=("chat.strict", "chat.publish"), enabled=(blocked,))).allowed
