"""policies/chain.py and policies/capabilities.py: the ordered two-stage chain and the capability decision."""

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
    Target,
    default_chain,
)
from policies.capabilities import CAPABILITY_DENIED
from policies.chain import Outcome


def event(kind: Kind, method: str | None = "tools/call", context: str | None = "echo") -> Event:
    return Event(kind=kind, method=method, payload={}, context=context)


def principal(*patterns: str, name: str = "alice") -> Principal:
    return Principal(name, CapabilitySet(patterns))


TARGET = Target("demo", "echo", {"name": "echo", "inputSchema": {"type": "object"}})


@dataclass
class Recorder:
    """A policy that records what it saw and answers a fixed decision."""

    name: str
    answer: Decision | None = None
    stage: str = "admission"
    seen: list[str] = field(default_factory=list)
    targets: list[Target | None] = field(default_factory=list)

    async def check(self, ev: Event, who: Principal, target: Target | None) -> Decision | None:
        self.seen.append(ev.action)
        self.targets.append(target)
        return self.answer


# ---- CapabilityPolicy ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", [Kind.RESPONSE, Kind.ERROR])
async def test_responses_are_always_allowed(kind: Kind) -> None:
    nobody = principal()
    assert await CapabilityPolicy().check(event(kind), nobody, None) is None
    assert await default_chain().admit(event(kind, None, None), nobody) is ALLOW


async def test_covered_request_is_allowed() -> None:
    who = principal("mcp/request:tools/*")
    assert await CapabilityPolicy().check(event(Kind.REQUEST), who, None) is None
    assert (await default_chain().admit(event(Kind.REQUEST), who)).allowed


async def test_uncovered_request_is_denied_with_code_reason_and_data() -> None:
    who = principal("mcp/request:resources/*", name="bob")
    decision = await CapabilityPolicy().check(event(Kind.REQUEST, "tools/call", "rm_rf"), who, None)
    assert decision is not None
    assert decision.allowed is False
    assert decision.policy == "capabilities"
    assert decision.code == CAPABILITY_DENIED == jsonrpc.CAPABILITY_DENIED == -32093
    assert "'mcp/request:tools/call:rm_rf'" in decision.reason
    assert "'bob'" in decision.reason
    assert decision.data == {"action": "mcp/request:tools/call:rm_rf", "principal": "bob"}
    assert decision.outcome is Outcome.DENIED


def test_capability_policy_is_an_admission_policy() -> None:
    assert CapabilityPolicy.stage == "admission"


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
async def test_every_kind_is_held_to_its_action(
    kind: Kind, method: str | None, context: str | None, patterns: list[str], allowed: bool
) -> None:
    decision = await default_chain().admit(event(kind, method, context), principal(*patterns))
    assert decision.allowed is allowed
    if not allowed:
        assert decision.code == -32093


async def test_anonymous_all_allows_everything() -> None:
    assert ANONYMOUS_ALL.anonymous and ANONYMOUS_ALL.capabilities.everything
    for kind in Kind:
        assert await default_chain().admit(event(kind), ANONYMOUS_ALL) is ALLOW


async def test_dialect_does_not_change_the_decision() -> None:
    who = principal("mcp/request:tools/call:echo")
    for dialect in Dialect:
        ev = Event(kind=Kind.REQUEST, method="tools/call", payload={}, context="echo", dialect=dialect)
        assert (await default_chain().admit(ev, who)).allowed
        ev.context = "other"
        assert not (await default_chain().admit(ev, who)).allowed


# ---- PolicyChain -----------------------------------------------------------------------------


async def test_empty_chain_allows() -> None:
    assert await PolicyChain([]).admit(event(Kind.REQUEST), principal()) is ALLOW
    assert await PolicyChain([]).dispatch(event(Kind.REQUEST), principal(), TARGET) is ALLOW


@pytest.mark.parametrize("stage", ["admission", "dispatch"])
async def test_first_denial_wins_and_stops_the_chain(stage: str) -> None:
    deny_a = Decision(False, "a", -32000, "no by a")
    first, second, third = (
        Recorder("pass", stage=stage),
        Recorder("a", deny_a, stage=stage),
        Recorder("b", Decision(False, "b", 1, "no"), stage=stage),
    )
    chain = PolicyChain([first, second, third])
    assert await run(chain, stage) is deny_a
    assert first.seen == ["mcp/request:tools/call:echo"]
    assert second.seen == ["mcp/request:tools/call:echo"]
    assert third.seen == []  # never consulted after a denial


@pytest.mark.parametrize("stage", ["admission", "dispatch"])
async def test_an_explicit_allow_does_not_stop_the_chain(stage: str) -> None:
    # Only denials are final: a policy cannot vouch for what a later policy forbids.
    denial = Decision(False, "later", 1, "no")
    chain = PolicyChain([Recorder("yes", Decision(True, "yes"), stage=stage), Recorder("later", denial, stage=stage)])
    assert await run(chain, stage) is denial


@pytest.mark.parametrize("stage", ["admission", "dispatch"])
async def test_all_passing_gives_allow(stage: str) -> None:
    policies = [Recorder("x", stage=stage), Recorder("y", Decision(True), stage=stage)]
    chain = PolicyChain(policies)
    assert await run(chain, stage) is ALLOW
    assert all(p.seen for p in policies)
    assert chain.policies == tuple(policies)


async def run(chain: PolicyChain, stage: str) -> Decision:
    if stage == "admission":
        return await chain.admit(event(Kind.REQUEST), principal())
    return await chain.dispatch(event(Kind.REQUEST), principal(), TARGET)


# ---- stages ----------------------------------------------------------------------------------


async def test_admission_policies_do_not_run_in_dispatch_and_see_no_target() -> None:
    admission = Recorder("adm", Decision(False, "adm", 1, "no"), stage="admission")
    dispatch = Recorder("dis", stage="dispatch")
    chain = PolicyChain([admission, dispatch])
    assert await chain.dispatch(event(Kind.REQUEST), principal(), TARGET) is ALLOW
    assert admission.seen == []
    assert dispatch.targets == [TARGET]
    denial = await chain.admit(event(Kind.REQUEST), principal())
    assert denial.policy == "adm"
    assert admission.targets == [None]
    assert dispatch.seen == ["mcp/request:tools/call:echo"], "admit must not have run the dispatch policy"


async def test_dispatch_policies_do_not_run_in_admission() -> None:
    admission = Recorder("adm", stage="admission")
    dispatch = Recorder("dis", Decision(False, "dis", 1, "no"), stage="dispatch")
    chain = PolicyChain([dispatch, admission])
    assert await chain.admit(event(Kind.REQUEST), principal()) is ALLOW
    assert dispatch.seen == []
    denial = await chain.dispatch(event(Kind.REQUEST), principal(), TARGET)
    assert denial.policy == "dis"
    assert admission.seen == ["mcp/request:tools/call:echo"], "dispatch must not have run the admission policy"


async def test_each_stage_keeps_the_configured_order() -> None:
    order: list[str] = []

    @dataclass
    class Named:
        name: str
        stage: str

        async def check(self, ev: Event, who: Principal, target: Target | None) -> Decision | None:
            order.append(self.name)
            return None

    chain = PolicyChain(
        [Named("a1", "admission"), Named("d1", "dispatch"), Named("a2", "admission"), Named("d2", "dispatch")]
    )
    await chain.admit(event(Kind.REQUEST), principal())
    await chain.dispatch(event(Kind.REQUEST), principal(), TARGET)
    assert order == ["a1", "a2", "d1", "d2"]


async def test_capability_denial_stops_admission_before_later_policies() -> None:
    later = Recorder("later")
    chain = PolicyChain([CapabilityPolicy(), later])
    denial = await chain.admit(event(Kind.REQUEST, "tools/call", "x"), principal(name="carol"))
    assert denial.code == -32093
    assert denial.data == {"action": "mcp/request:tools/call:x", "principal": "carol"}
    assert later.seen == []


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


# ---- Decision.outcome: a typed kind that is also the audit label -----------------------------


def test_outcome_members_are_their_audit_labels() -> None:
    assert [str(o) for o in Outcome] == [
        "allowed",
        "denied",
        "rate_limited",
        "invalid",
        "pinned",
        "spoofed",
        "reserved",
        "overloaded",
        "answered",
    ]
    assert Outcome.RATE_LIMITED == "rate_limited" and f"{Outcome.PINNED}" == "pinned"
    assert ALLOW.outcome is Outcome.ALLOWED


def test_a_label_given_as_a_string_becomes_typed() -> None:
    decision = Decision(False, "p", 1, "no", outcome="rate_limited")  # type: ignore[arg-type]
    assert decision.outcome is Outcome.RATE_LIMITED
    assert decision == Decision(False, "p", 1, "no", outcome=Outcome.RATE_LIMITED)


def test_an_unknown_label_fails_at_the_policy() -> None:
    with pytest.raises(ValueError, match="not_a_label"):
        Decision(False, "p", 1, "no", outcome="not_a_label")  # type: ignore[arg-type]


class _Asked:
    """A member that records every question and never objects."""

    def __init__(self, name: str, stage: str, **attributes: object) -> None:
        self.name, self.stage, self.asked = name, stage, 0
        for key, value in attributes.items():
            setattr(self, key, value)

    async def check(self, event: Event, principal: Principal, target: Target | None) -> Decision | None:
        self.asked += 1
        return None


async def test_the_chain_skips_members_that_cannot_have_an_opinion() -> None:
    mcpx_only = _Asked("mcpx", "admission", dialects=frozenset({Dialect.MCPX}))
    everyone = _Asked("all", "admission")
    fed = _Asked("fed", "dispatch", facts_key="fed")
    chain = PolicyChain([mcpx_only, everyone, fed])  # type: ignore[list-item]
    principal = Principal("p", CapabilitySet(["*"]))
    mcp = event(Kind.REQUEST)
    mcpx = Event(kind=Kind.REQUEST, method="tools/call", payload={}, context="echo", dialect=Dialect.MCPX)
    await chain.admit(mcp, principal)
    await chain.admit(mcpx, principal)
    assert (mcpx_only.asked, everyone.asked) == (1, 2)
    await chain.dispatch(mcp, principal, Target("b"))
    await chain.dispatch(mcp, principal, Target("b", facts={"other": 1}))
    assert fed.asked == 0, "fed only through facts it was not given"
    await chain.dispatch(mcp, principal, Target("b", facts={"fed": object()}))
    assert fed.asked == 1


async def test_the_chain_skips_a_member_while_it_says_it_is_idle() -> None:
    state = {"idle": True}
    gated = _Asked("gated", "dispatch", idle=lambda: state["idle"])
    chain = PolicyChain([gated])  # type: ignore[list-item]
    principal = Principal("p", CapabilitySet(["*"]))
    await chain.dispatch(event(Kind.REQUEST), principal, Target("b"))
    assert gated.asked == 0, "idle: nothing to decide, not awaited"
    state["idle"] = False
    await chain.dispatch(event(Kind.REQUEST), principal, Target("b"))
    assert gated.asked == 1


async def test_the_chain_asks_a_member_about_its_methods_only() -> None:
    admin = _Asked("admin", "admission", methods=frozenset({"mgp/access/grant"}))
    chain = PolicyChain([admin])  # type: ignore[list-item]
    principal = Principal("p", CapabilitySet(["*"]))
    await chain.admit(event(Kind.REQUEST), principal)
    assert admin.asked == 0
    grant = Event(kind=Kind.REQUEST, method="mgp/access/grant", payload={}, context=None)
    await chain.admit(grant, principal)
    assert admin.asked == 1


async def test_an_idle_admission_member_is_skipped_too() -> None:
    state = {"idle": True}
    gated = _Asked("gated", "admission", idle=lambda: state["idle"])
    chain = PolicyChain([gated])  # type: ignore[list-item]
    principal = Principal("p", CapabilitySet(["*"]))
    await chain.admit(event(Kind.REQUEST), principal)
    assert gated.asked == 0
    state["idle"] = False
    await chain.admit(event(Kind.REQUEST), principal)
    assert gated.asked == 1


@pytest.mark.parametrize("facts", [None, {}, {"fed": 1}])
async def test_dispatch_keeps_the_order_with_or_without_facts(facts: dict[str, int] | None) -> None:
    first = Recorder("first", Decision(False, "first", 1, "no"), stage="dispatch")
    fed = Recorder("fed", Decision(False, "fed", 2, "no"), stage="dispatch")
    fed.facts_key = "fed"  # type: ignore[attr-defined]
    chain = PolicyChain([fed, first])  # type: ignore[list-item]
    decision = await chain.dispatch(event(Kind.REQUEST), principal("*"), Target("b", facts=facts))
    assert decision.policy == ("fed" if facts else "first"), "the first member with an opinion decides"


def test_a_target_is_immutable_and_positional() -> None:
    target = Target("b", "echo")
    assert (target.backend, target.name, target.item, target.facts) == ("b", "echo", None, None)
    with pytest.raises(AttributeError):
        target.backend = "c"  # type: ignore[misc]


# ---- check_now: members asked without a coroutine (admit_now, dispatch_now) --------------------


@dataclass
class _Sync:
    name: str
    stage: str
    answer: Decision | None = None
    asked: list[str] = field(default_factory=list)

    async def check(self, event: Event, principal: Principal, target: Target | None) -> Decision | None:
        raise AssertionError("the chain must call check_now")

    def check_now(self, event: Event, principal: Principal, target: Target | None) -> Decision | None:
        self.asked.append(self.name)
        return self.answer


@dataclass
class _Async:
    name: str
    stage: str
    answer: Decision | None = None
    asked: list[str] = field(default_factory=list)

    async def check(self, event: Event, principal: Principal, target: Target | None) -> Decision | None:
        self.asked.append(self.name)
        return self.answer


_NO = Decision(False, "no", 1, "no", outcome=Outcome.DENIED)


@pytest.mark.parametrize("stage", ["admission", "dispatch"])
async def test_sync_members_answer_without_a_coroutine(stage: str) -> None:
    first, second = _Sync("a", stage), _Sync("b", stage, _NO)
    chain = PolicyChain([first, second])  # type: ignore[list-item]
    ev, who = event(Kind.REQUEST), principal("*")
    now = chain.admit_now(ev, who) if stage == "admission" else chain.dispatch_now(ev, who, Target("b1", "echo"))
    assert now is _NO
    assert first.asked == ["a"] and second.asked == ["b"]
    awaited = await (chain.admit(ev, who) if stage == "admission" else chain.dispatch(ev, who, Target("b1", "echo")))
    assert awaited is _NO


@pytest.mark.parametrize("stage", ["admission", "dispatch"])
async def test_an_async_member_finishes_the_walk_in_a_coroutine(stage: str) -> None:
    asked: list[str] = []
    members = [_Sync("a", stage, None, asked), _Async("b", stage, None, asked), _Sync("c", stage, _NO, asked)]
    chain = PolicyChain(members)  # type: ignore[arg-type]
    ev, who = event(Kind.REQUEST), principal("*")
    now = chain.admit_now(ev, who) if stage == "admission" else chain.dispatch_now(ev, who, Target("b1", "echo"))
    assert not isinstance(now, Decision)
    assert asked == ["a"]  # the rest waits for the coroutine
    assert await now is _NO
    assert asked == ["a", "b", "c"]  # each member asked once, in order


async def test_capability_policy_check_now_agrees_with_check() -> None:
    policy = CapabilityPolicy()
    for who in (principal("*"), principal("mcp/request:tools/call:other")):
        ev = event(Kind.REQUEST)
        assert policy.check_now(ev, who) == await policy.check(ev, who)
