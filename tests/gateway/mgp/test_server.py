"""The gateway as one MGP server toward its clients (gateway/mgp/server.py): negotiation in both
places a legacy client may put MGP, the version and extension intersection, kernel tools listed to
draft clients only and answered as their methods, effective security on listed tools, and plain
clients unaffected."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest

from gateway import jsonrpc
from gateway.core import Gateway
from gateway.errors import MgpCode
from policies.auth import Credentials
from policies.patterns import CapabilitySet
from policies.principal import Principal
from tests.gateway.mgp.demo_gateway import ADD, ask, mgp_session_of, rpc, session_of, started
from tests.support import initialize_request

pytestmark = pytest.mark.timeout(30)

CONFIG = {
    "trust": {"demo": "experimental"},
    "tools": {"demo": {"add": {"risk_level": "safe", "validator": "readonly", "permissions_required": []}}},
}


@pytest.fixture
async def gateway() -> AsyncIterator[Gateway]:
    async for gw in started(CONFIG):
        yield gw


async def test_a_client_that_declares_mgp_gets_the_gateways_object_back(gateway: Gateway) -> None:
    session, result = await mgp_session_of(gateway, "0.8.0", ["tool_security", "access_control", "no_such_thing"])
    declared = result["capabilities"]["mgp"]
    assert declared["version"] == "0.8.0"
    assert sorted(declared["extensions"]) == ["access_control", "tool_security"], "the intersection (§2.4)"
    assert declared["server_id"] == "switchboard"
    assert session.mgp is not None and session.mgp.draft and not session.mgp.modern


async def test_an_sdk_client_declaring_under_experimental_is_answered_there(gateway: Gateway) -> None:
    _, result = await mgp_session_of(gateway, "0.3.0", ["security", "access_control"], experimental=True)
    assert "mgp" not in result["capabilities"]
    declared = result["capabilities"]["experimental"]["mgp"]
    assert declared["version"] == "0.3.0"
    assert sorted(declared["extensions"]) == ["access_control", "security"], "seed names for a seed client"


async def test_a_newer_client_is_spoken_to_in_our_latest_version(gateway: Gateway) -> None:
    _, result = await mgp_session_of(gateway, "0.9.1")
    assert result["capabilities"]["mgp"]["version"] == "0.8.0"


async def test_a_plain_client_gets_no_mgp_and_no_kernel_tools(gateway: Gateway) -> None:
    session = await session_of(gateway)
    assert session.mgp is None
    tools = (await ask(gateway, session, rpc("tools/list")))["result"]["tools"]
    assert not [t for t in tools if t["name"].startswith("mgp.")]
    assert all("security" not in t and "_mgp" not in t for t in tools)
    unknown = await ask(gateway, session, rpc("tools/call", {"name": "mgp.access.query", "arguments": {}}))
    assert "error" in unknown


async def test_draft_clients_see_kernel_tools_and_effective_security(gateway: Gateway) -> None:
    session, _ = await mgp_session_of(gateway)
    tools = {t["name"]: t for t in (await ask(gateway, session, rpc("tools/list")))["result"]["tools"]}
    query = tools["mgp.access.query"]
    assert query["_mgp"] == {"source": "kernel", "admin_only": False}
    assert query["inputSchema"]["required"] == ["agent_id", "server_id"]
    assert tools["mgp.access.grant"]["_mgp"]["admin_only"] is True
    add = tools["add"]["security"]
    assert add["validator"] == "readonly"
    # §4.6: experimental trust makes the effective risk dangerous whatever the server declared.
    assert add["risk_level"] == "safe" and add["effective_risk_level"] == "dangerous"
    assert add["confirmation_required"] is True


async def test_seed_clients_get_no_kernel_tools(gateway: Gateway) -> None:
    session, _ = await mgp_session_of(gateway, "0.3.0", ["security"])
    tools = (await ask(gateway, session, rpc("tools/list")))["result"]["tools"]
    assert not [t for t in tools if t["name"].startswith("mgp.")]
    assert "security" in next(t for t in tools if t["name"] == "add")


async def test_a_kernel_tool_call_is_answered_as_its_method(gateway: Gateway) -> None:
    session, _ = await mgp_session_of(gateway)
    arguments = {"agent_id": "anonymous", "server_id": "demo", "tool_name": "add"}
    answer = await ask(gateway, session, rpc("tools/call", {"name": "mgp.access.query", "arguments": arguments}))
    result = answer["result"]
    assert result["isError"] is False
    assert result["structuredContent"]["permission"] == "allow"
    assert json.loads(result["content"][0]["text"]) == result["structuredContent"]


async def test_admin_only_kernel_tools_need_the_admin_capability(gateway: Gateway) -> None:
    session, _ = await mgp_session_of(gateway)
    agent = Principal("agent", CapabilitySet(["mcp/*"]))
    grant = {
        "entry_type": "tool_grant",
        "agent_id": "anonymous",
        "server_id": "demo",
        "tool_name": "add",
        "permission": "deny",
    }
    refused = await ask(
        gateway, session, rpc("tools/call", {"name": "mgp.access.grant", "arguments": grant}), principal=agent
    )
    assert refused["error"]["code"] == MgpCode.PERMISSION_DENIED, "§1.6.3: 1000 for an LLM agent"
    admin = Principal("ops", CapabilitySet(["mcp/*", "mgp/request:mgp/access/*"]))
    done = await ask(
        gateway, session, rpc("tools/call", {"name": "mgp.access.grant", "arguments": grant}, 2), principal=admin
    )
    assert done["result"]["isError"] is False
    # §14.7: a draft client gets the refused call as a Tool Rejection Envelope result ...
    refused_call = (await ask(gateway, session, rpc("tools/call", ADD, 3)))["result"]
    assert refused_call["isError"] is True
    body = json.loads(refused_call["content"][0]["text"])
    assert body["status"] == "denied" and body["code"] == "ACCESS_DENIED" and body["reason"]
    assert "_mgp" not in body and "error_code" not in body
    # ... a seed client and a plain client get the JSON-RPC error.
    seed, _ = await mgp_session_of(gateway, "0.3.0", ["security", "access_control"])
    assert (await ask(gateway, seed, rpc("tools/call", ADD, 4)))["error"]["code"] == MgpCode.ACCESS_DENIED
    plain = await session_of(gateway)
    assert (await ask(gateway, plain, rpc("tools/call", ADD, 5)))["error"]["code"] == MgpCode.ACCESS_DENIED


async def test_kernel_tool_arguments_are_checked(gateway: Gateway) -> None:
    session, _ = await mgp_session_of(gateway)
    bad = await ask(gateway, session, rpc("tools/call", {"name": "mgp.access.query", "arguments": "x"}))
    assert bad["error"]["code"] == -32602
    unknown = await ask(gateway, session, rpc("tools/call", {"name": "mgp.nope", "arguments": {}}))
    assert unknown["error"]["code"] == -32602


async def test_a_clients_mgp_request_is_never_relayed_to_a_backend(gateway: Gateway) -> None:
    """A client on a one-backend view must not reach the backend's kernel methods: granting
    permissions is the gateway's (the kernel's) authority alone."""
    session = gateway.open_session("test", gateway.single["demo"], Credentials("anonymous", "anonymous"))
    await ask(gateway, session, initialize_request(0))
    grant = {"request_id": "x", "grants": {"shell.execute": {"decision": "approved"}}}
    for method in ("mgp/permission/grant", "mgp/permission/await", "mgp/lifecycle/restart"):
        answer = await ask(gateway, session, rpc(method, grant))
        assert answer["error"]["code"] == -32601, answer


async def test_a_clients_mgp_notification_is_not_relayed_to_backends(gateway: Gateway) -> None:
    sent: list[dict[str, object]] = []
    conn = gateway.connections["demo"]

    async def record(message: dict[str, object]) -> None:
        sent.append(message)

    conn.send = record  # type: ignore[method-assign]
    session, _ = await mgp_session_of(gateway)
    forged = {"jsonrpc": "2.0", "method": "notifications/mgp.event", "params": {"channel": "x", "_mgp.seq": 1}}
    roots = {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"}
    for note in (forged, roots):
        await gateway.router.handle(session, note, jsonrpc.Shape.NOTIFICATION, session.standalone)
    await asyncio.sleep(0.05)
    assert [m["method"] for m in sent] == ["notifications/roots/list_changed"], "MCP news still goes"
