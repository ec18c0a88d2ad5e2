"""policies/mgp_permissions.py: the kernel's answer to permissions_required (§3), the interactive store,
and the gate that refuses tools whose permissions were not granted."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given, strategies as st

from gateway.events import Event, Kind
from policies import CapabilitySet, PolicyChain, Principal, Target
from policies.chain import Outcome, Visibility
from policies.mgp_permissions import (
    MGP_PERMISSION_DENIED,
    POLICY,
    TOOL_BLOCKED,
    Grant,
    MgpPermissionPolicy,
    PendingFull,
    PendingPermissions,
    PermissionAnswer,
    PermissionDecider,
    PermissionFacts,
    granted_names,
    iso,
    missing,
    parse_grants,
    parse_iso,
    wire_grants,
)

T0 = 1_780_000_000.0  # 2026-05-28T20:26:40Z


class FakeClock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_iso_round_trip() -> None:
    assert iso(T0) == "2026-05-28T20:26:40Z"
    assert parse_iso("2026-05-28T20:26:40Z") == T0
    assert parse_iso("2026-05-28T22:26:40+02:00") == T0
    assert parse_iso("2026-05-28T20:26:40") == T0, "a naive time is UTC"


# ---- the decider ---------------------------------------------------------------------------------

PERMS = ["filesystem.read", "filesystem.write", "shell.execute", "com.example.custom"]


def test_auto_approve_grants_everything_with_an_expiry() -> None:
    answer = PermissionDecider("auto_approve", grant_ttl_s=60, clock=FakeClock()).decide(PERMS)
    assert answer.pending == ()
    assert wire_grants(answer.grants) == {p: {"decision": "approved", "expires_at": iso(T0 + 60)} for p in PERMS}


def test_deny_all_denies_everything_even_what_the_list_approves() -> None:
    answer = PermissionDecider("deny_all", approved=["**"], clock=FakeClock()).decide(PERMS)
    assert wire_grants(answer.grants) == {p: {"decision": "denied"} for p in PERMS}


@pytest.mark.parametrize(
    ("approved", "expected"),
    [
        ([], set()),
        (["filesystem.read"], {"filesystem.read"}),
        (["filesystem.*"], {"filesystem.read", "filesystem.write"}),
        (["*.read"], {"filesystem.read"}),
        (["*"], set()),  # one segment only: every name here has a dot
        (["**"], set(PERMS)),
        (["com.**"], {"com.example.custom"}),
        (["com.*"], set()),  # '*' does not cross a dot
        (["shell.execute", "com.example.*"], {"shell.execute", "com.example.custom"}),
        (["filesystem.rea?"], {"filesystem.read"}),
    ],
)
def test_config_only_grants_what_the_globs_match(approved: list[str], expected: set[str]) -> None:
    answer = PermissionDecider("config_only", approved=approved, clock=FakeClock()).decide(PERMS)
    assert {p for p, g in answer.grants.items() if g.decision == "approved"} == expected
    assert {p for p, g in answer.grants.items() if g.decision == "denied"} == set(PERMS) - expected
    assert answer.pending == ()


def test_interactive_grants_the_pre_approved_and_leaves_the_rest_pending() -> None:
    answer = PermissionDecider("interactive", approved=["filesystem.read"], clock=FakeClock()).decide(PERMS)
    assert list(answer.grants) == ["filesystem.read"]
    assert answer.pending == ("filesystem.write", "shell.execute", "com.example.custom")


def test_duplicates_are_decided_once_in_order() -> None:
    answer = PermissionDecider("auto_approve", clock=FakeClock()).decide(["b", "a", "b"])
    assert list(answer.grants) == ["b", "a"]


def test_the_decider_refuses_bad_settings() -> None:
    with pytest.raises(ValueError, match="unknown permission policy"):
        PermissionDecider("yolo")
    with pytest.raises(ValueError, match="positive"):
        PermissionDecider("config_only", grant_ttl_s=0)


def test_grant_params_have_the_kernel_shape() -> None:
    answer = PermissionDecider("config_only", approved=["memory.*"], grant_ttl_s=10, clock=FakeClock()).decide(
        ["memory.read", "camera"]
    )
    assert answer.params("perm-1") == {
        "request_id": "perm-1",
        "grants": {
            "memory.read": {"decision": "approved", "expires_at": iso(T0 + 10)},
            "camera": {"decision": "denied"},
        },
        "approved_by": "switchboard",
        "expires_at": iso(T0 + 10),
    }
    assert PermissionAnswer({"camera": Grant("denied")}).params("p")["expires_at"] is None


@given(
    perms=st.lists(st.from_regex(r"[a-z]{1,4}(\.[a-z]{1,4}){0,2}", fullmatch=True), max_size=8),
    policy=st.sampled_from(["auto_approve", "deny_all", "config_only", "interactive"]),
    approved=st.lists(st.sampled_from(["a.*", "**", "b.c", "*", "a.**.c"]), max_size=3),
)
def test_every_permission_gets_exactly_one_answer(perms: list[str], policy: str, approved: list[str]) -> None:
    answer = PermissionDecider(policy, approved=approved, clock=FakeClock()).decide(perms)
    assert set(answer.grants) | set(answer.pending) == set(perms)
    assert not set(answer.grants) & set(answer.pending)
    if policy != "interactive":
        assert answer.pending == ()
    if policy == "deny_all":
        assert granted_names(answer.grants, T0) == frozenset()


# ---- grants: both wire forms, expiry -------------------------------------------------------------


def test_parse_grants_reads_both_forms() -> None:
    grants = parse_grants(
        {
            "shell.execute": "approved",
            "filesystem.read": {"decision": "approved", "scope": {"paths": ["/tmp/**"]}, "expires_at": iso(T0 + 5)},
            "camera": {"decision": "denied"},
            "network.outbound": "deferred",
        },
        default_expires_at=T0 + 100,
    )
    assert grants["shell.execute"] == Grant("approved", T0 + 100)
    assert grants["filesystem.read"] == Grant("approved", T0 + 5, {"paths": ["/tmp/**"]})
    assert grants["camera"] == Grant("denied")
    assert grants["network.outbound"] == Grant("deferred")
    assert granted_names(grants, T0) == {"shell.execute", "filesystem.read"}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ([], "must be an object"),
        ({"a": "yes"}, "decision must be"),
        ({"a": {"decision": "APPROVED"}}, "decision must be"),
        ({"a": {"decision": "approved", "expires_at": 5}}, "date-time"),
        ({"a": {"decision": "approved", "scope": []}}, "scope"),
        ({"": "approved"}, "not a permission name"),
    ],
)
def test_parse_grants_refuses_malformed(raw: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_grants(raw)


def test_a_grant_is_valid_strictly_before_it_expires() -> None:
    grant = Grant("approved", T0 + 60)
    assert grant.valid(T0) and grant.valid(T0 + 59.999)
    assert not grant.valid(T0 + 60)
    assert Grant("approved").valid(T0 + 10**9), "no expiry"
    assert not Grant("denied").valid(T0) and not Grant("deferred").valid(T0)


# ---- missing ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("security", "granted", "expected"),
    [
        (None, set(), []),
        ({}, set(), []),
        ({"risk_level": "safe"}, set(), []),
        ({"permissions_required": []}, set(), []),
        ({"permissions_required": ["a", "b"]}, {"a", "b", "c"}, []),
        ({"permissions_required": ["a", "b", "a"]}, {"b"}, ["a"]),
        ({"permissions_required": ["shell.execute", "filesystem.write"]}, set(), ["shell.execute", "filesystem.write"]),
        ({"permissions_required": "shell.execute"}, set(), ["shell.execute"]),  # a lone name still counts
        ({"permissions_required": ["a", 3, None]}, set(), ["a"]),
    ],
)
def test_missing(security: dict[str, Any] | None, granted: set[str], expected: list[str]) -> None:
    assert missing(security, granted) == expected


@given(required=st.lists(st.sampled_from("abcdef"), max_size=6), granted=st.sets(st.sampled_from("abcdef")))
def test_missing_is_exactly_the_required_not_granted(required: list[str], granted: set[str]) -> None:
    lacking = missing({"permissions_required": required}, granted)
    assert set(lacking) == set(required) - granted
    assert len(lacking) == len(set(lacking))


# ---- the dispatch policy ------------------------------------------------------------------------

CALL = Event(
    kind=Kind.REQUEST,
    method="tools/call",
    payload={"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "run", "arguments": {}}},
)
ALICE = Principal("alice", CapabilitySet(["*"]))
SECURITY = {"risk_level": "dangerous", "permissions_required": ["shell.execute", "filesystem.write"]}


async def dispatch(grants: dict[str, Grant], clock: FakeClock, security: dict[str, Any] | None = SECURITY) -> Any:
    chain = PolicyChain([MgpPermissionPolicy(clock)])
    facts = {POLICY: PermissionFacts(security, grants)}
    return await chain.dispatch(CALL, ALICE, Target("term", "run", facts=facts))


async def test_without_facts_the_gate_stays_out_of_the_way() -> None:
    chain = PolicyChain([MgpPermissionPolicy(FakeClock())])
    assert (await chain.dispatch(CALL, ALICE, Target("term", "run"))).allowed


async def test_all_granted_passes() -> None:
    grants = {"shell.execute": Grant("approved", T0 + 60), "filesystem.write": Grant("approved")}
    assert (await dispatch(grants, FakeClock())).allowed
    assert (await dispatch({}, FakeClock(), security={"risk_level": "safe"})).allowed


async def test_a_missing_permission_blocks_with_the_rejection_shape() -> None:
    decision = await dispatch({"shell.execute": Grant("approved"), "filesystem.write": Grant("denied")}, FakeClock())
    assert not decision.allowed
    assert decision.outcome is Outcome.DENIED and decision.policy == POLICY
    assert decision.code == MGP_PERMISSION_DENIED == 1000
    assert decision.data["missing"] == ["filesystem.write"]
    assert decision.data["event_type"] == TOOL_BLOCKED
    assert decision.data["_mgp"] == {"category": "security", "retryable": False}
    rejection = decision.data["rejection"]
    assert rejection["status"] == "denied" and rejection["code"] == "TOOL_BLOCKED"
    assert set(rejection) == {"status", "code", "reason", "retryable", "remediation_hint"}
    assert "filesystem.write" in rejection["reason"] and "'run'" in rejection["reason"]


async def test_an_expired_grant_blocks_from_its_expiry_on() -> None:
    clock = FakeClock()
    grants = {"shell.execute": Grant("approved", T0 + 60), "filesystem.write": Grant("approved", T0 + 120)}
    assert (await dispatch(grants, clock)).allowed
    clock.now = T0 + 60
    decision = await dispatch(grants, clock)
    assert not decision.allowed and decision.data["missing"] == ["shell.execute"]
    clock.now = T0 + 121
    assert (await dispatch(grants, clock)).data["missing"] == ["shell.execute", "filesystem.write"]


# ---- pending requests (interactive) -------------------------------------------------------------


def ids() -> Any:
    counter = iter(range(1, 10**6))
    return lambda: f"perm-{next(counter)}"


def store(clock: FakeClock, **kw: Any) -> PendingPermissions:
    return PendingPermissions(clock=clock, new_id=ids(), **kw)


def test_open_and_list() -> None:
    clock = FakeClock()
    pending = store(clock, timeout_s=30)
    first = pending.open("term", ["shell.execute", "shell.execute", "camera"])
    clock.now += 1
    pending.open("files", ["filesystem.write"], message="please")
    assert pending.list() == [
        {
            "request_id": "perm-1",
            "server_id": "term",
            "permissions": ["shell.execute", "camera"],
            "policy": "interactive",
            "message": "Waiting for operator approval of term's permissions",
            "created_at": iso(T0),
            "expires_at": iso(T0 + 30),
        },
        {
            "request_id": "perm-2",
            "server_id": "files",
            "permissions": ["filesystem.write"],
            "policy": "interactive",
            "message": "please",
            "created_at": iso(T0 + 1),
            "expires_at": iso(T0 + 31),
        },
    ]
    assert first.await_params() == {
        "request_id": "perm-1",
        "permissions": ["shell.execute", "camera"],
        "policy": "interactive",
        "message": "Waiting for operator approval of term's permissions",
    }


async def test_an_answer_resolves_the_waiter() -> None:
    clock = FakeClock()
    pending = store(clock, grant_ttl_s=100)
    request = pending.open("term", ["shell.execute", "camera", "filesystem.read"])
    waiter = asyncio.create_task(pending.wait(request))
    await asyncio.sleep(0)
    answer = pending.answer(request.request_id, {"shell.execute": "approved", "camera": {"decision": "denied"}}, "ops")
    got = await asyncio.wait_for(waiter, 1)
    assert got is answer
    assert got.grants == {
        "shell.execute": Grant("approved", T0 + 100),
        "camera": Grant("denied"),
        "filesystem.read": Grant("denied"),  # left out of the answer: denied
    }
    assert request.answered_by == "ops"
    assert pending.list() == [] and len(pending) == 0
    with pytest.raises(KeyError):  # answered once only
        pending.answer(request.request_id, {"shell.execute": "approved"})
    assert await pending.wait(request) is answer, "a late waiter gets the same answer"


def test_an_answer_for_an_unrequested_permission_is_refused_and_the_request_stays() -> None:
    pending = store(FakeClock())
    request = pending.open("term", ["shell.execute"])
    with pytest.raises(ValueError, match="not requested: camera"):
        pending.answer(request.request_id, {"shell.execute": "approved", "camera": "approved"})
    with pytest.raises(ValueError, match="decision must be"):
        pending.answer(request.request_id, {"shell.execute": "sure"})
    assert [r["request_id"] for r in pending.list()] == [request.request_id]
    with pytest.raises(KeyError):
        pending.answer("perm-unknown", {})


async def test_an_unanswered_request_expires_denied_on_the_fake_clock() -> None:
    clock = FakeClock()
    pending = store(clock, timeout_s=30)
    request = pending.open("term", ["shell.execute"])
    clock.now += 29.9
    assert len(pending.list()) == 1
    clock.now += 0.1
    assert pending.list() == []
    answer = await asyncio.wait_for(pending.wait(request), 1)
    assert answer.grants == {"shell.execute": Grant("denied")} and request.answered_by == "timeout"
    with pytest.raises(KeyError):
        pending.answer(request.request_id, {"shell.execute": "approved"})


async def test_a_waiter_is_released_by_the_sweep() -> None:
    clock = FakeClock()
    pending = store(clock, timeout_s=3600)
    request = pending.open("term", ["camera"])
    waiter = asyncio.create_task(pending.wait(request))
    await asyncio.sleep(0)
    clock.now += 3600
    assert pending.sweep() == [request.request_id]
    assert (await asyncio.wait_for(waiter, 1)).grants == {"camera": Grant("denied")}


async def test_wait_also_times_out_in_real_time() -> None:
    pending = PendingPermissions(timeout_s=0.05)
    request = pending.open("term", ["camera"])
    answer = await asyncio.wait_for(pending.wait(request), 2)
    assert answer.grants == {"camera": Grant("denied")}
    assert len(pending) == 0


async def test_a_cancelled_waiter_withdraws_its_request() -> None:
    pending = store(FakeClock())
    request = pending.open("term", ["camera"])
    waiter = asyncio.create_task(pending.wait(request))
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert pending.list() == []
    assert request.answered_by == "cancelled"


def test_cancel() -> None:
    pending = store(FakeClock())
    request = pending.open("term", ["camera"])
    assert pending.cancel(request.request_id)
    assert not pending.cancel(request.request_id)
    assert request.answer is not None and granted_names(request.answer.grants, T0) == frozenset()


def test_the_store_is_bounded_and_expiry_frees_room() -> None:
    clock = FakeClock()
    pending = store(clock, max_pending=2, timeout_s=10)
    pending.open("a", ["x"])
    clock.now += 5
    pending.open("b", ["x"])
    with pytest.raises(PendingFull):
        pending.open("c", ["x"])
    assert len(pending) == 2
    clock.now += 5  # the first expires
    pending.open("c", ["x"])
    assert [r["server_id"] for r in pending.list()] == ["b", "c"]


def test_pending_refuses_bad_settings() -> None:
    with pytest.raises(ValueError):
        PendingPermissions(timeout_s=0)
    with pytest.raises(ValueError):
        PendingPermissions(max_pending=0)


@given(steps=st.lists(st.tuples(st.sampled_from(["open", "tick", "answer", "cancel"]), st.integers(0, 5)), max_size=40))
def test_pending_never_exceeds_its_bound_nor_keeps_an_expired_request(steps: list[tuple[str, int]]) -> None:
    clock = FakeClock()
    pending = store(clock, max_pending=3, timeout_s=4)
    opened: list[str] = []
    for op, n in steps:
        if op == "open":
            try:
                opened.append(pending.open("s", ["p"]).request_id)
            except PendingFull:
                assert len(pending) == 3
        elif op == "tick":
            clock.now += n
        elif opened:
            rid = opened[n % len(opened)]
            if op == "answer":
                try:
                    pending.answer(rid, {"p": "approved"})
                except KeyError:
                    pass
            else:
                pending.cancel(rid)
        listed = pending.list()
        assert len(listed) <= 3
        assert all(parse_iso(r["expires_at"]) > clock.now for r in listed)


async def test_interactive_end_to_end_pre_approved_plus_the_operator_answer() -> None:
    clock = FakeClock()
    decided = PermissionDecider("interactive", approved=["memory.*"], grant_ttl_s=50, clock=clock).decide(
        ["memory.read", "shell.execute", "camera"]
    )
    pending = store(clock, grant_ttl_s=50)
    request = pending.open("term", decided.pending)
    assert request.permissions == ("shell.execute", "camera")
    answer = pending.answer(request.request_id, {"shell.execute": "approved"}, "ops")
    final = decided.merged(answer)
    assert final.pending == ()
    assert granted_names(final.grants, T0) == {"memory.read", "shell.execute"}
    assert final.params(request.request_id, "ops")["grants"] == {
        "memory.read": {"decision": "approved", "expires_at": iso(T0 + 50)},
        "shell.execute": {"decision": "approved", "expires_at": iso(T0 + 50)},
        "camera": {"decision": "denied"},
    }
    assert decided.merged(PermissionAnswer({})).pending == ("shell.execute", "camera")


def test_the_gate_hides_what_it_would_refuse() -> None:
    clock = FakeClock()
    policy = MgpPermissionPolicy(clock)
    assert isinstance(policy, Visibility)
    chain = PolicyChain([policy])
    action = "mcp/request:tools/call:run"
    grants = {"shell.execute": Grant("approved", T0 + 10), "filesystem.write": Grant("approved")}
    facts = {POLICY: PermissionFacts(SECURITY, grants)}
    assert chain.visible(action, ALICE, Target("term", "run", facts=facts))
    assert chain.visible(action, ALICE, Target("term", "run")), "no facts: no opinion"
    assert chain.visible(action, ALICE, None)
    clock.now = T0 + 10
    assert not chain.visible(action, ALICE, Target("term", "run", facts=facts)), "expired: hidden"
