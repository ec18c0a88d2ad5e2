"""The kernel's part in a backend's handshake (gateway/mgp/kernel.py), against a scripted exchange."""

from __future__ import annotations

from typing import Any

from gateway.config import Mgp
from gateway.mgp.kernel import GRANT_METHOD, KERNEL_EXTENSIONS, Kernel


class Exchange:
    def __init__(self, answer: dict[str, Any]) -> None:
        self.answer = answer
        self.sent: list[tuple[str, dict[str, Any], str]] = []

    async def handshake_request(
        self, method: str, params: dict[str, Any], era: Any, timeout: float, probe: bool = False
    ) -> dict[str, Any]:
        self.sent.append((method, params, era))
        return self.answer


def result(mgp: dict[str, Any] | None, *, experimental: bool = True) -> dict[str, Any]:
    caps: dict[str, Any] = {"tools": {}}
    if mgp is not None:
        caps.update({"experimental": {"mgp": mgp}} if experimental else {"mgp": mgp})
    return {"protocolVersion": "2025-11-25", "capabilities": caps, "serverInfo": {"name": "b"}}


async def test_the_offer_names_what_the_kernel_does() -> None:
    offer = Kernel(Mgp()).offer()
    assert offer["version"].startswith("0.") and set(offer["extensions"]) >= set(KERNEL_EXTENSIONS)


async def test_a_plain_mcp_backend_gets_no_request_and_no_record() -> None:
    kernel, exchange = Kernel(Mgp()), Exchange({"result": {}})
    await kernel.on_initialized(exchange, "plain", result(None), 5)
    assert exchange.sent == [] and kernel.backend("plain") is None and kernel.grants_of("plain") == {}


async def test_permissions_are_decided_by_policy_and_sent_as_one_grant_request() -> None:
    kernel = Kernel(Mgp(permission_policy="auto_approve"))
    exchange = Exchange({"jsonrpc": "2.0", "id": 1, "result": {}})
    declared = {"version": "0.3.0", "extensions": ["security"], "permissions_required": ["shell.execute"]}
    await kernel.on_initialized(exchange, "b", result(declared, experimental=False), 5)
    [(method, params, era)] = exchange.sent
    assert (method, era) == (GRANT_METHOD, "legacy")
    assert params["grants"]["shell.execute"]["decision"] == "approved" and params["expires_at"]
    record = kernel.backend("b")
    assert record is not None and record.acknowledged and record.negotiation.version == "0.3"
    assert record.active == frozenset({"permissions", "tool_security"}), "security is split, then intersected"
    assert kernel.grants_of("b")["shell.execute"].decision == "approved"


async def test_a_backend_that_refuses_the_grants_still_connects_and_nothing_pending_is_granted() -> None:
    kernel = Kernel(Mgp(permission_policy="interactive", approved_permissions=["net.*"]))
    exchange = Exchange({"jsonrpc": "2.0", "id": 1, "error": {"code": -32601, "message": "Method not found"}})
    declared = {"version": "0.8.0", "extensions": ["permissions"], "permissions_required": ["net.http", "shell"]}
    await kernel.on_initialized(exchange, "b", result(declared), 5)
    record = kernel.backend("b")
    assert record is not None and not record.acknowledged
    assert record.pending == ("shell",) and "shell" not in kernel.grants_of("b")
    assert kernel.grants_of("b")["net.http"].decision == "approved"
