"""policies/mgp_access.py: §5 access control: precedence, runtime grants and revocations, expiry, the
query/grant/revoke shapes, and one check for calls and lists."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, strategies as st

from gateway.events import Event, Kind
from policies import CapabilitySet, PolicyChain, Principal, Target
from policies.chain import Outcome, Visibility
from policies.mgp_access import (
    MGP_ACCESS_DENIED,
    POLICY,
    AccessEntry,
    AccessRequestError,
    AccessStore,
    AccessTable,
    MemoryAccessStore,
    MgpAccessPolicy,
)
from policies.mgp_permissions import iso

T0 = 1_780_000_000.0


class FakeClock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def entry(agent: str, server: str, tool: str | None, permission: str) -> dict[str, Any]:
    return {"agent_id": agent, "server_id": server, "tool_name": tool, "permission": permission}


# ---- precedence ---------------------------------------------------------------------------------

STATIC = [
    entry("alice", "files", None, "deny"),
    entry("alice", "files", "read", "allow"),
    entry("bob", "files", None, "allow"),
    entry("bob", "files", "delete", "deny"),
]


@pytest.mark.parametrize(
    ("default", "agent", "server", "tool", "permission", "source"),
    [
        # tool_grant beats server_grant
        ("opt-out", "alice", "files", "read", "allow", "tool_grant"),
        ("opt-in", "alice", "files", "read", "allow", "tool_grant"),
        ("opt-out", "bob", "files", "delete", "deny", "tool_grant"),
        # server_grant beats the default
        ("opt-out", "alice", "files", "write", "deny", "server_grant"),
        ("opt-in", "bob", "files", "write", "allow", "server_grant"),
        ("opt-out", "alice", "files", None, "deny", "server_grant"),
        # no entry: the default
        ("opt-out", "carol", "files", "read", "allow", "default_policy"),
        ("opt-in", "carol", "files", "read", "deny", "default_policy"),
        ("opt-in", "alice", "mail", "send", "deny", "default_policy"),
        ("opt-out", "alice", "mail", None, "allow", "default_policy"),
        # a tool entry does not leak to a server-level query nor to another server
        ("opt-in", "alice", "files", None, "deny", "server_grant"),
        ("opt-in", "bob", "mail", "delete", "deny", "default_policy"),
    ],
)
def test_precedence(default: str, agent: str, server: str, tool: str | None, permission: str, source: str) -> None:
    table = AccessTable(STATIC, default)  # type: ignore[arg-type]
    resolution = table.resolve(agent, server, tool)
    assert (resolution.permission, resolution.source) == (permission, source)
    assert table.allows(agent, server, tool) is (permission == "allow")


def test_conflicting_static_entries_deny_wins() -> None:
    for pair in (
        [entry("a", "s", "t", "allow"), entry("a", "s", "t", "deny")],
        [entry("a", "s", "t", "deny"), entry("a", "s", "t", "allow")],
    ):
        assert not AccessTable(pair).allows("a", "s", "t")


def test_bad_default_is_refused() -> None:
    with pytest.raises(ValueError, match="opt-in or opt-out"):
        AccessTable([], "closed")  # type: ignore[arg-type]


def test_configure_replaces_static_entries_and_keeps_runtime_ones() -> None:
    table = AccessTable([entry("a", "s", None, "deny")], "opt-out")
    assert not table.allows("a", "s", "t")
    table.configure([], "opt-in")
    assert not table.allows("a", "s", "t") and table.resolve("a", "s", "t").source == "default_policy"
    table.configure([entry("a", "s", None, "allow")], "opt-in")
    assert table.allows("a", "s", "t")


@given(
    default=st.sampled_from(["opt-in", "opt-out"]),
    tool_entry=st.sampled_from([None, "allow", "deny"]),
    server_entry=st.sampled_from([None, "allow", "deny"]),
    tool_runtime=st.sampled_from([None, "allow", "deny"]),
)
def test_precedence_property(
    default: str, tool_entry: str | None, server_entry: str | None, tool_runtime: str | None
) -> None:
    """The answer is the first of (runtime tool, static tool, server, default) that says anything."""
    static = []
    if tool_entry:
        static.append(entry("a", "s", "t", tool_entry))
    if server_entry:
        static.append(entry("a", "s", None, server_entry))
    store = MemoryAccessStore()
    if tool_runtime:
        store._entries[("a", "s", "t")] = AccessEntry("tool_grant", "a", "s", "t", tool_runtime)  # type: ignore[arg-type]
    table = AccessTable(static, default, store)  # type: ignore[arg-type]
    expected = tool_runtime or tool_entry or server_entry or ("allow" if default == "opt-out" else "deny")
    assert table.resolve("a", "s", "t").permission == expected
    assert table.resolve("a", "s", "other").permission == (
        server_entry or ("allow" if default == "opt-out" else "deny")
    )


# ---- the wire shapes ----------------------------------------------------------------------------


def test_query_shape_for_a_static_entry_and_the_default() -> None:
    table = AccessTable([entry("alice", "files", None, "allow")], "opt-in")
    assert table.query({"agent_id": "alice", "server_id": "files", "tool_name": "read"}) == {
        "permission": "allow",
        "source": "server_grant",
        "granted_by": "config",
        "granted_at": None,
        "expires_at": None,
    }
    assert table.query({"agent_id": "bob", "server_id": "files"}) == {
        "permission": "deny",
        "source": "default_policy",
        "granted_by": None,
        "granted_at": None,
        "expires_at": None,
    }


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"agent_id": "a"},
        {"agent_id": "", "server_id": "s"},
        {"agent_id": "a", "server_id": 3},
        {"agent_id": "a", "server_id": "s", "tool_name": 1},
    ],
)
def test_query_refuses_malformed_params(params: dict[str, Any]) -> None:
    with pytest.raises(AccessRequestError):
        AccessTable().query(params)


async def test_grant_then_query_then_revoke() -> None:
    clock = FakeClock()
    table = AccessTable([], "opt-in", clock=clock)
    params = {
        "entry_type": "server_grant",
        "agent_id": "agent.cloto_default",
        "server_id": "mind",
        "tool_name": None,
        "permission": "allow",
        "granted_by": "someone-else",  # not trusted: the authenticated caller is recorded
        "justification": "Required for agent reasoning",
        "expires_at": None,
    }
    stored = await table.grant(params, granted_by="admin")
    assert stored == {
        "granted": True,
        "entry_type": "server_grant",
        "agent_id": "agent.cloto_default",
        "server_id": "mind",
        "tool_name": None,
        "permission": "allow",
        "granted_by": "admin",
        "granted_at": iso(T0),
        "expires_at": None,
        "justification": "Required for agent reasoning",
    }
    assert table.query({"agent_id": "agent.cloto_default", "server_id": "mind", "tool_name": "think"}) == {
        "permission": "allow",
        "source": "server_grant",
        "granted_by": "admin",
        "granted_at": iso(T0),
        "expires_at": None,
    }
    revoke = {"agent_id": "agent.cloto_default", "server_id": "mind", "entry_type": "server_grant"}
    assert await table.revoke(revoke, revoked_by="admin") == {
        "revoked": True,
        "entry_type": "server_grant",
        "agent_id": "agent.cloto_default",
        "server_id": "mind",
        "tool_name": None,
    }
    assert not table.allows("agent.cloto_default", "mind", "think")
    assert (await table.revoke(revoke, revoked_by="admin"))["revoked"] is False
    assert table.store.entries() == []


async def test_a_runtime_grant_shadows_the_static_entry_and_revoke_masks_it() -> None:
    table = AccessTable([entry("alice", "files", "delete", "deny")], "opt-out")
    tool = {"entry_type": "tool_grant", "agent_id": "alice", "server_id": "files", "tool_name": "delete"}
    await table.grant({**tool, "permission": "allow"}, "admin")
    assert table.allows("alice", "files", "delete")
    assert (await table.revoke(tool, "admin"))["revoked"] is True
    # Both the runtime allow and the static deny are gone: the default (opt-out) decides.
    assert table.resolve("alice", "files", "delete").source == "default_policy"
    assert table.allows("alice", "files", "delete")
    # Masked once: revoking again finds nothing in force; reconfiguring keeps the mask.
    assert (await table.revoke(tool, "admin"))["revoked"] is False
    table.configure([entry("alice", "files", "delete", "deny")], "opt-out")
    assert table.allows("alice", "files", "delete")
    # A new grant replaces the mask.
    await table.grant({**tool, "permission": "deny"}, "admin")
    assert not table.allows("alice", "files", "delete")


async def test_a_tool_grant_beats_a_runtime_server_grant() -> None:
    table = AccessTable([], "opt-out")
    await table.grant({"entry_type": "server_grant", "agent_id": "a", "server_id": "s", "permission": "deny"}, "x")
    await table.grant(
        {"entry_type": "tool_grant", "agent_id": "a", "server_id": "s", "tool_name": "t", "permission": "allow"}, "x"
    )
    assert table.allows("a", "s", "t") and not table.allows("a", "s", "u") and not table.allows("a", "s")


async def test_a_grant_expires_on_the_fake_clock() -> None:
    clock = FakeClock()
    table = AccessTable([entry("a", "s", None, "deny")], "opt-out", clock=clock)
    stored = await table.grant(
        {
            "entry_type": "server_grant",
            "agent_id": "a",
            "server_id": "s",
            "permission": "allow",
            "expires_at": iso(T0 + 60),
        },
        "admin",
    )
    assert stored["expires_at"] == iso(T0 + 60)
    assert table.query({"agent_id": "a", "server_id": "s"})["expires_at"] == iso(T0 + 60)
    clock.now = T0 + 59
    assert table.allows("a", "s", "t")
    clock.now = T0 + 60
    assert not table.allows("a", "s", "t"), "expired: the static deny under it decides again"
    under = table.resolve("a", "s", "t").entry
    assert under is not None and under.granted_by == "config"


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"entry_type": "agent_grant"}, "entry_type"),
        ({"entry_type": "tool_grant"}, "needs tool_name"),
        ({"entry_type": "server_grant", "tool_name": "t"}, "tool_name must be absent"),
        ({"entry_type": "server_grant", "server_id": ""}, "server_id"),
        ({"entry_type": "server_grant", "permission": "maybe"}, "permission"),
        ({"entry_type": "server_grant", "expires_at": "tomorrow"}, "RFC 3339"),
        ({"entry_type": "server_grant", "expires_at": 5}, "RFC 3339"),
        ({"entry_type": "server_grant", "expires_at": "2020-01-01T00:00:00Z"}, "in the past"),
        ({"entry_type": "server_grant", "justification": 3}, "justification"),
    ],
)
async def test_grant_refuses_malformed_params(params: dict[str, Any], message: str) -> None:
    table = AccessTable(clock=FakeClock())
    base = {"agent_id": "a", "server_id": "s", "permission": "allow"}
    with pytest.raises(AccessRequestError, match=message):
        await table.grant({**base, **params}, "admin")
    assert table.store.entries() == []


async def test_revoke_refuses_malformed_params() -> None:
    with pytest.raises(AccessRequestError, match="needs tool_name"):
        await AccessTable().revoke({"agent_id": "a", "server_id": "s", "entry_type": "tool_grant"}, "admin")


async def test_entries_lists_what_is_in_force() -> None:
    clock = FakeClock()
    table = AccessTable([entry("a", "s", None, "allow"), entry("b", "s", None, "deny")], clock=clock)
    await table.grant({"entry_type": "server_grant", "agent_id": "b", "server_id": "s", "permission": "allow"}, "x")
    await table.revoke({"entry_type": "server_grant", "agent_id": "a", "server_id": "s"}, "x")
    listed = table.entries()
    assert [(e["agent_id"], e["permission"], e["granted_by"]) for e in listed] == [("b", "allow", "x")]


def test_the_memory_store_satisfies_the_protocol() -> None:
    store: AccessStore = MemoryAccessStore()
    assert store.get(("a", "s", None)) is None


# ---- the policy: calls and lists ----------------------------------------------------------------


def call(tool: str) -> Event:
    return Event(
        kind=Kind.REQUEST,
        method="tools/call",
        payload={"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool}},
        context=tool,
    )


ALICE = Principal("alice", CapabilitySet(["*"]))
BOB = Principal("bob", CapabilitySet(["*"]))


async def test_the_policy_refuses_what_the_table_denies_with_a_typed_rejection() -> None:
    table = AccessTable([entry("alice", "files", "delete", "deny")])
    chain = PolicyChain([MgpAccessPolicy(table)])
    assert (await chain.dispatch(call("files__read"), ALICE, Target("files", "read"))).allowed
    assert (await chain.dispatch(call("files__delete"), BOB, Target("files", "delete"))).allowed
    decision = await chain.dispatch(call("files__delete"), ALICE, Target("files", "delete"))
    assert not decision.allowed
    assert decision.outcome is Outcome.DENIED and decision.policy == POLICY
    assert decision.code == MGP_ACCESS_DENIED == 1001
    assert decision.data is not None
    rejection = decision.data["rejection"]
    assert isinstance(rejection, dict) and (rejection["code"], rejection["status"]) == ("ACCESS_DENIED", "denied")
    assert decision.data["_mgp"] == {"category": "security", "retryable": False}
    assert (decision.data["agent_id"], decision.data["server_id"], decision.data["tool_name"]) == (
        "alice",
        "files",
        "delete",
    )
    assert decision.data["source"] == "tool_grant"


async def test_the_policy_ignores_other_methods_and_targets_without_a_tool() -> None:
    chain = PolicyChain([MgpAccessPolicy(AccessTable([], "opt-in"))])
    listing = Event(kind=Kind.REQUEST, method="tools/list", payload={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert (await chain.dispatch(listing, ALICE, Target("files"))).allowed
    assert (await chain.dispatch(call("x"), ALICE, Target("files"))).allowed
    assert not (await chain.dispatch(call("x"), ALICE, Target("files", "x"))).allowed


async def test_a_grant_applies_to_the_next_call_at_once() -> None:
    table = AccessTable([], "opt-in")
    chain = PolicyChain([MgpAccessPolicy(table)])
    assert not (await chain.dispatch(call("t"), ALICE, Target("s", "t"))).allowed
    await table.grant(
        {"entry_type": "tool_grant", "agent_id": "alice", "server_id": "s", "tool_name": "t", "permission": "allow"},
        "admin",
    )
    assert (await chain.dispatch(call("t"), ALICE, Target("s", "t"))).allowed
    assert chain.visible("mcp/request:tools/call:t", ALICE, Target("s", "t"))


def test_visibility_hides_exactly_what_a_call_would_be_refused() -> None:
    policy = MgpAccessPolicy(
        AccessTable([entry("alice", "files", None, "deny"), entry("alice", "files", "read", "allow")])
    )
    assert isinstance(policy, Visibility)
    chain = PolicyChain([policy])
    assert chain.visible("mcp/request:tools/call:files__read", ALICE, Target("files", "read"))
    assert not chain.visible("mcp/request:tools/call:files__write", ALICE, Target("files", "write"))
    assert chain.visible("mcp/request:tools/call:files__write", BOB, Target("files", "write"))
    # Not a tool, or no target: access control has no opinion.
    assert chain.visible("mcp/request:resources/read:files+file:///x", ALICE, Target("files", "file:///x"))
    assert chain.visible("mcp/request:tools/call:files__write", ALICE, None)


@given(
    default=st.sampled_from(["opt-in", "opt-out"]),
    entries=st.lists(
        st.tuples(
            st.sampled_from(["alice", "bob"]),
            st.sampled_from([None, "t1", "t2"]),
            st.sampled_from(["allow", "deny"]),
        ),
        max_size=6,
    ),
    agent=st.sampled_from([ALICE, BOB]),
    tool=st.sampled_from(["t1", "t2", "t3"]),
)
async def test_a_listed_tool_is_exactly_a_callable_one(
    default: str, entries: list[tuple[str, str | None, str]], agent: Principal, tool: str
) -> None:
    table = AccessTable([entry(a, "s", t, p) for a, t, p in entries], default)  # type: ignore[arg-type]
    policy = MgpAccessPolicy(table)
    target = Target("s", tool)
    decision = await policy.check(call(tool), agent, target)
    assert policy.visible(f"mcp/request:tools/call:{tool}", agent, target) is (decision is None)


def test_the_table_reads_the_config_section() -> None:
    from gateway.config import Config

    config = Config.model_validate(
        {
            "backends": {"files": {"transport": "builtin"}},
            "mgp": {
                "default_access": "opt-in",
                "access": [
                    {"agent_id": "alice", "server_id": "files", "permission": "allow"},
                    {"agent_id": "alice", "server_id": "files", "tool_name": "delete", "permission": "deny"},
                ],
            },
        }
    )
    table = AccessTable([e.model_dump() for e in config.mgp.access], config.mgp.default_access)
    assert table.allows("alice", "files", "read")
    assert table.resolve("alice", "files", "delete").source == "tool_grant"
    assert not table.allows("alice", "files", "delete") and not table.allows("bob", "files", "read")


def test_the_chain_skips_the_access_member_while_the_table_is_open_to_all() -> None:
    assert MgpAccessPolicy(AccessTable()).idle()
    assert not MgpAccessPolicy(AccessTable([{"agent_id": "a", "server_id": "s", "permission": "deny"}])).idle()
    assert not MgpAccessPolicy(AccessTable(default="opt-in")).idle()
