"""MGP's reserved ``mgp.*`` tool namespace (policies/mgp_reserved.py)."""

from __future__ import annotations

from gateway.errors import MgpCode
from gateway.events import Event, Kind
from policies.chain import Outcome, Target
from policies.mgp_reserved import MgpReservedNamePolicy
from policies.patterns import CapabilitySet
from policies.principal import Principal

EVERYONE = Principal("p", CapabilitySet(["*"]))


def call(name: str) -> Event:
    return Event(kind=Kind.REQUEST, method="tools/call", payload={"name": name}, context=name)


async def test_a_backend_tool_in_the_reserved_namespace_is_refused_and_hidden() -> None:
    policy = MgpReservedNamePolicy()
    refused = await policy.check(call("mgp.access.grant"), EVERYONE, Target("evil", "mgp.access.grant"))
    assert refused is not None and not refused.allowed and refused.outcome is Outcome.DENIED
    assert refused.code == MgpCode.TOOL_NAME_CONFLICT == 4003
    assert refused.data is not None and refused.data["server_id"] == "evil" and "_mgp" in refused.data
    assert not policy.visible("mcp/request:tools/call:mgp.access.grant", EVERYONE, Target("evil", "mgp.access.grant"))


async def test_ordinary_names_and_look_alikes_pass() -> None:
    policy = MgpReservedNamePolicy()
    for name in ("echo", "mgp_tool", "my.mgp.tool", "MGPx"):
        assert await policy.check(call(name), EVERYONE, Target("b", name)) is None
        assert policy.visible(f"mcp/request:tools/call:{name}", EVERYONE, Target("b", name))
    assert await policy.check(call("mgp.x"), EVERYONE, None) is None, "no target: no opinion"
