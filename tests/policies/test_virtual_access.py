"""policies/virtual_access.py: who may use a virtual server; a rename never widens a capability."""

from __future__ import annotations

from hypothesis import given, strategies as st

from gateway.errors import CAPABILITY_DENIED
from policies.chain import Outcome
from policies.patterns import CapabilitySet
from policies.principal import Principal
from policies.virtual_access import VirtualServerAccess


def doors(backend: str, original: str) -> tuple[str, ...]:
    return (original, f"{backend}__{original}")


def principal(name: str, *patterns: str) -> Principal:
    return Principal(name, CapabilitySet(patterns))


def test_an_empty_principals_list_admits_everyone() -> None:
    access = VirtualServerAccess("ops", [], doors)
    assert access.admits(principal("anyone")) is None


def test_only_listed_principals_are_admitted() -> None:
    access = VirtualServerAccess("ops", ["alice"], doors)
    assert access.admits(principal("alice")) is None
    refused = access.admits(principal("bob", "*"))
    assert refused is not None and not refused.allowed
    assert refused.code == CAPABILITY_DENIED and refused.outcome is Outcome.DENIED
    assert "'bob'" in refused.reason and "'ops'" in refused.reason


def test_the_real_tool_must_be_allowed_at_some_existing_door() -> None:
    access = VirtualServerAccess("ops", [], doors)
    fed_only = principal("p", "mcp/request:tools/call:weather__*")
    own_only = principal("q", "mcp/request:tools/call:get_forecast")
    for allowed in (fed_only, own_only, principal("r", "*")):
        assert access.reaches(allowed, "tools/call", "weather", "get_forecast") is None
    # Allowed the name it is renamed to, but not the real tool: refused, naming the real action.
    renamed_only = principal("s", "mcp/request:tools/call:forecast")
    refused = access.reaches(renamed_only, "tools/call", "weather", "get_forecast")
    assert refused is not None and refused.code == CAPABILITY_DENIED
    assert refused.data is not None and refused.data["action"] == "mcp/request:tools/call:get_forecast"
    assert access.visible(renamed_only, "tools", "weather", "get_forecast") is False
    assert access.visible(fed_only, "tools", "weather", "get_forecast") is True


def test_prompts_are_held_to_prompts_get_and_uris_are_left_to_the_chain() -> None:
    access = VirtualServerAccess("ops", [], doors)
    p = principal("p", "mcp/request:prompts/get:greet")
    assert access.visible(p, "prompts", "demo", "greet") is True
    assert access.visible(p, "prompts", "demo", "other") is False
    assert access.visible(principal("n"), "resources", "demo", "demo://x") is True


_NAME = st.text(alphabet="abc_*", min_size=1, max_size=6)


@given(patterns=st.lists(_NAME, max_size=3), exposed=_NAME, original=_NAME)
def test_never_wider_than_the_existing_doors(patterns: list[str], exposed: str, original: str) -> None:
    """Whatever the rename, a call passes both checks only if some existing door would pass it too."""
    p = principal("p", *(f"mcp/request:tools/call:{x}" for x in patterns))
    access = VirtualServerAccess("ops", [], doors)
    through_virtual = (
        p.capabilities.allows(f"mcp/request:tools/call:{exposed}")
        and access.reaches(p, "tools/call", "b", original) is None
    )
    at_a_door = any(p.capabilities.allows(f"mcp/request:tools/call:{n}") for n in doors("b", original))
    assert not through_virtual or at_a_door
