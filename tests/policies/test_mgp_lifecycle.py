"""MGP lifecycle in the chain (policies/mgp_lifecycle.py, §11.4): a draining backend takes no new
tool calls; the refusal is §14.3 SERVER_DRAINING with the §14.4 recovery data."""

from __future__ import annotations

import pytest

from gateway.errors import MgpCode
from gateway.events import Event, Kind
from gateway.mgp.lifecycle import Lifecycle
from policies.chain import Outcome, PolicyChain, Target
from policies.mgp_lifecycle import MgpLifecyclePolicy
from policies.patterns import CapabilitySet
from policies.principal import Principal

pytestmark = pytest.mark.timeout(30)

EVERYONE = Principal("p", CapabilitySet(["*"]))


def request(method: str, name: str | None = None) -> Event:
    payload = {"name": name} if name is not None else {}
    return Event(kind=Kind.REQUEST, method=method, payload=payload, context=name or method)


class Draining:
    def __init__(self, *backends: str) -> None:
        self.backends = set(backends)

    def draining(self, backend: str) -> bool:
        return backend in self.backends

    def any_draining(self) -> bool:
        return bool(self.backends)


async def test_a_call_to_a_draining_backend_is_refused_as_server_draining() -> None:
    policy = MgpLifecyclePolicy(Draining("old"))
    refused = await policy.check(request("tools/call", "echo"), EVERYONE, Target("old", "echo"))
    assert refused is not None and not refused.allowed and refused.outcome is Outcome.DENIED
    assert refused.code == MgpCode.SERVER_DRAINING == 2001
    assert refused.data is not None and refused.data["server_id"] == "old"
    assert refused.data["_mgp"] == {"category": "lifecycle", "retryable": True, "retry_after_ms": 5000}
    assert "rejection" not in refused.data, "a lifecycle error, not a policy rejection (§14.7)"


async def test_other_backends_other_methods_and_no_target_pass() -> None:
    policy = MgpLifecyclePolicy(Draining("old"))
    assert await policy.check(request("tools/call", "echo"), EVERYONE, Target("new", "echo")) is None
    assert await policy.check(request("prompts/get", "greet"), EVERYONE, Target("old", "greet")) is None
    assert await policy.check(request("tools/call", "echo"), EVERYONE, None) is None


async def test_the_chain_follows_the_lifecycle_as_it_changes() -> None:
    lifecycle = Lifecycle()
    chain = PolicyChain([MgpLifecyclePolicy(lifecycle)])
    event, target = request("tools/call", "echo"), Target("b", "echo")
    assert (await chain.dispatch(event, EVERYONE, target)).allowed
    lifecycle.begin_drain("b", "operator_request")
    denied = await chain.dispatch(event, EVERYONE, target)
    assert not denied.allowed and denied.code == MgpCode.SERVER_DRAINING and denied.policy == "mgp.lifecycle"
    lifecycle.end_drain("b", "operator_request")
    # Shut down: no longer draining (the closed connection refuses calls itself: backend unavailable).
    assert (await chain.dispatch(event, EVERYONE, target)).allowed


def test_the_chain_skips_the_member_while_no_backend_drains() -> None:
    assert MgpLifecyclePolicy(Draining()).idle()
    assert not MgpLifecyclePolicy(Draining("old")).idle()
