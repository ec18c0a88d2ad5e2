"""policies/chain.py and policies/capabilities.py: the ordered chain and the capability decision."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from gateway import jsonrpc
from gateway.events import Dialect, Event, Kind
from policies import (
    ALLOW,
    ANONYMOUS_ALL,
    CapabilityPolicy,
    CapabilitySet,
    Decision,
    PolicyChain,
    Principal,
    default_chain,
)
from policies.capabilities import CAPABILITY_DENIED


def event(kind: Kind, method: str | None = "tools/call", context: str | None = "echo") -> Event:
    return Event(kind=kind, method=method, payload={}, context=context)


def principal(*patterns: str, name: str = "alice") -> Principal:
    return Principal(name, CapabilitySet(patterns))


@dataclass
class Recorder:
    """A policy that records what it saw and answers a fixed decision."""

    name: str
    answer: Decision | None = None
    seen: list[str] = field(default_factory=list)

    def check(self, ev: Event, who: Principal) -> Decision | None:
        self.seen.append(ev.action)
        return self.answer


# ---- CapabilityPolicy ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", [Kind.RESPONSE, Kind.ERROR])
def test_responses_are_always_allowed(kind: Kind) -> None:
    nobody = principal()
    assert CapabilityPolicy().check(event(kind), nobody) is None
    assert default_chain().decide(event(kind, None, None), nobody) is ALLOW


def test_covered_request_is_allowed() -> None:
    who = principal("mcp/request:tools/*")
    assert CapabilityPolicy().check(event(Kind.REQUEST), who) is None
    assert default_chain().decide(event(Kind.REQUEST), who).allowed


def test_uncovered_request_is_denied_with_code_reason_and_data() -> None:
    who = principal("mcp/request:resources/*", name="bob")
    decision = CapabilityPolicy().check(event(Kind.REQUEST, "tools/call", "rm_rf"), who)
    assert decision is not None
    assert decision.allowed is False
    assert decision.policy == "capabilities"
    assert decision.code == CAPABILITY_DENIED == jsonrpc.CAPABILITY_DENIED == -32093
    assert "'mcp/request:tools/call:rm_rf'" in decision.reason
    assert "'bob'" in decision.reason
    assert decision.data == {"action": "mcp/request:tools/call:rm_rf", "principal": "bob"}


@pytest.mark.parametrize(
    ("kind", "method", "context", "patterns", "allowed"),
    [
        (Kind.NOTIFICATION, "notifications/cancelled", None, ["mcp/request:notifications/*"], True),
        (Kind.NOTIFICATION, "notifications/cancelled", None, ["mcp/request:tools/*"], False),
        (Kind.PROPOSAL, "tools/call", "x", ["mcp/proposal:*"], True),
        (Kind.PROPOSAL, "tools/call", "x", ["mcp/request:*"], False),
        (Kind.CHAT, None, None, ["chat"], True),
        (Kind.CHAT, None, None, ["mcp/*"], False),
        (Kind.PRESENCE, "presence", None, ["mcp/*", "chat"], False),
        (Kind.SYSTEM, "welcome", None, ["system/*"], True),
        (Kind.REQUEST, "tools/call", "echo", ["mcp/request:tools/call"], True),
        (Kind.REQUEST, "tools/call", "echo", ["mcp/request:tools/call:other"], False),
    ],
)
def test_every_kind_is_held_to_its_action(
    kind: Kind, method: str | None, context: str | None, patterns: list[str], allowed: bool
) -> None:
    decision = default_chain().decide(event(kind, method, context), principal(*patterns))
    assert decision.allowed is allowed
    if not allowed:
        assert decision.code == -32093


def test_anonymous_all_allows_everything() -> None:
    assert ANONYMOUS_ALL.anonymous and ANONYMOUS_ALL.capabilities.everything
    for kind in Kind:
        assert default_chain().decide(event(kind), ANONYMOUS_ALL) is ALLOW


def test_dialect_does_not_change_the_decision() -> None:
    who = principal("mcp/request:tools/call:echo")
    for dialect in Dialect:
        ev = Event(kind=Kind.REQUEST, method="tools/call", payload={}, context="echo", dialect=dialect)
        assert default_chain().decide(ev, who).allowed
        ev.context = "other"
        assert not default_chain().decide(ev, who).allowed


# ---- PolicyChain -----------------------------------------------------------------------------


def test_empty_chain_allows() -> None:
    assert PolicyChain([]).decide(event(Kind.REQUEST), principal()) is ALLOW


def test_first_denial_wins_and_stops_the_chain() -> None:
    deny_a = Decision(False, "a", -32000, "no by a")
    first, second, third = Recorder("pass"), Recorder("a", deny_a), Recorder("b", Decision(False, "b", 1, "no"))
    chain = PolicyChain([first, second, third])
    assert chain.decide(event(Kind.REQUEST), principal()) is deny_a
    assert first.seen == ["mcp/request:tools/call:echo"]
    assert second.seen == ["mcp/request:tools/call:echo"]
    assert third.seen == []  # never consulted after a denial


def test_an_explicit_allow_does_not_stop_the_chain() -> None:
    # Only denials are final: a policy cannot vouch for what a later policy forbids.
    denial = Decision(False, "later", 1, "no")
    chain = PolicyChain([Recorder("yes", Decision(True, "yes")), Recorder("later", denial)])
    assert chain.decide(event(Kind.REQUEST), principal()) is denial


def test_all_passing_gives_allow() -> None:
    policies = [Recorder("x"), Recorder("y", Decision(True))]
    chain = PolicyChain(policies)
    assert chain.decide(event(Kind.REQUEST), principal()) is ALLOW
    assert all(p.seen for p in policies)
    assert chain.policies == tuple(policies)


def test_visible_filters_list_items_by_their_would_be_action() -> None:
    chain = default_chain()
    who = principal("mcp/request:tools/call:echo", "mcp/request:prompts/*")
    assert chain.visible("mcp/request:tools/call:echo", who)
    assert not chain.visible("mcp/request:tools/call:secret", who)
    assert chain.visible("mcp/request:prompts/get:greet", who)
    assert chain.visible("anything", ANONYMOUS_ALL)


def test_decision_defaults() -> None:
    assert ALLOW == Decision(True, "", 0, "", None)
    with pytest.raises(AttributeError):
        ALLOW.allowed = False  # type: ignore[misc]
