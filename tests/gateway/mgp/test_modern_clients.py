"""MGP clients on the 2026-07-28 era (MGP_SECURITY.md §2.6), through the real HTTP door: the client
declares ``extensions["dev.cloto/mgp"]`` in each request's client capabilities; ``server/discover``
answers with the gateway's object only to a client that declared one; kernel tools and effective
security follow the request's declaration, never a previous request's."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from adapters import mcp_modern
from tests.gateway.transports.modern_door_support import META, client_for, headers_for, rpc

pytestmark = pytest.mark.timeout(30)

MGP = {"version": "0.8.0", "extensions": ["tool_security", "access_control", "tool_discovery"]}
MGP_META = {
    **META,
    mcp_modern.CLIENT_CAPABILITIES_KEY: {"extensions": {"dev.cloto/mgp": MGP}},
}
CONFIG: dict[str, Any] = {"mgp": {"tools": {"demo": {"echo": {"risk_level": "safe", "validator": "readonly"}}}}}


@pytest.fixture
async def door() -> AsyncIterator[httpx.AsyncClient]:
    async for client, _ in client_for(CONFIG):
        yield client


async def post(door: httpx.AsyncClient, message: dict[str, Any], name: str | None = None) -> dict[str, Any]:
    answer = await door.post("/mcp", headers=headers_for(message["method"], name), json=message)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


async def test_discover_answers_mgp_only_to_a_client_that_declared_it(door: httpx.AsyncClient) -> None:
    declared = await post(door, rpc("server/discover", meta=MGP_META))
    ours = declared["result"]["capabilities"]["extensions"]["dev.cloto/mgp"]
    assert ours["version"] == "0.8.0"
    assert sorted(ours["extensions"]) == ["access_control", "tool_discovery", "tool_security"]
    plain = await post(door, rpc("server/discover"))
    assert "dev.cloto/mgp" not in json.dumps(plain), "§2.4 rule 3: no mgp to a client that sent none"


async def test_each_request_is_served_as_its_own_declaration_says(door: httpx.AsyncClient) -> None:
    mgp_tools = (await post(door, rpc("tools/list", meta=MGP_META)))["result"]["tools"]
    names = [t["name"] for t in mgp_tools]
    assert "mgp.access.query" in names
    echo = next(t for t in mgp_tools if t["name"] == "echo")
    assert echo["security"]["validator"] == "readonly" and echo["security"]["effective_risk_level"]
    plain_tools = (await post(door, rpc("tools/list", rpc_id=2)))["result"]["tools"]
    assert not [t for t in plain_tools if t["name"].startswith("mgp.")]
    assert all("security" not in t for t in plain_tools)


async def test_a_kernel_tool_is_called_statelessly(door: httpx.AsyncClient) -> None:
    arguments = {"agent_id": "anonymous", "server_id": "demo", "tool_name": "echo"}
    call = rpc("tools/call", {"name": "mgp.access.query", "arguments": arguments}, meta=MGP_META)
    answer = await post(door, call, "mgp.access.query")
    assert answer["result"]["structuredContent"]["permission"] == "allow"
    plain = rpc("tools/call", {"name": "mgp.access.query", "arguments": arguments}, rpc_id=2)
    refused = await door.post("/mcp", headers=headers_for("tools/call", "mgp.access.query"), json=plain)
    assert "error" in refused.json(), "a plain client has no kernel tools"
