"""Gateway.principal_of (gateway/callers.py): one principal object per credentials, looked up by the
credentials object's identity first (speed, issue 15), and re-resolved when principals change."""

from __future__ import annotations

from gateway.config import Config, PrincipalConfig
from gateway.core import Gateway
from policies.auth import Credentials


async def test_a_principal_change_reaches_credentials_seen_before() -> None:
    gateway = Gateway(
        Config.model_validate(
            {"bus": {"kind": "memory"}, "principals": {"alice": {"tokens": ["alice-token"], "capabilities": ["mcp/*"]}}}
        )
    )
    alice = Credentials("static", "alice")
    first = gateway.principal_of(alice)
    assert gateway.principal_of(alice) is first  # by identity
    assert gateway.principal_of(Credentials("static", "alice")) is first  # an equal object: by value
    assert first.capabilities.allows("mcp/tools/call")

    gateway.principals.replace({"alice": PrincipalConfig(tokens=["alice-token"], capabilities=[])})
    gateway.principals_changed()
    now = gateway.principal_of(alice)
    assert now is not first and not now.capabilities.allows("mcp/tools/call")
