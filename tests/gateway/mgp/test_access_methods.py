"""MGP's access-control methods answered by the gateway (MGP §5.4), in-process on a real Gateway:
a grant or revocation takes effect for calls and lists at once, and only an admin may make one."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from gateway import jsonrpc
from gateway.core import Gateway
from gateway.errors import MgpCode
from gateway.sessions import ClientSession
from policies.patterns import CapabilitySet
from policies.principal import Principal
from tests.gateway.mgp.demo_gateway import ADD, ask, rpc, session_of, started

pytestmark = pytest.mark.timeout(30)

DENY_ADD = {"agent_id": "anonymous", "server_id": "demo", "tool_name": "add", "permission": "deny"}


@pytest.fixture
async def gateway() -> AsyncIterator[Gateway]:
    async for gw in started():
        yield gw


async def tool_names(gw: Gateway, session: ClientSession) -> set[str]:
    return {t["name"] for t in (await ask(gw, session, rpc("tools/list")))["result"]["tools"]}


async def test_a_grant_and_a_revocation_apply_to_calls_and_lists_at_once(gateway: Gateway) -> None:
    session = await session_of(gateway)
    query = {"agent_id": "anonymous", "server_id": "demo", "tool_name": "add"}
    assert (await ask(gateway, session, rpc("mgp/access/query", query)))["result"]["permission"] == "allow"
    granted = await ask(gateway, session, rpc("mgp/access/grant", {**DENY_ADD, "entry_type": "tool_grant"}, 2))
    assert "result" in granted, granted
    assert "add" not in await tool_names(gateway, session)
    refused = await ask(gateway, session, rpc("tools/call", ADD, 3))
    assert refused["error"]["code"] == MgpCode.ACCESS_DENIED
    assert (await ask(gateway, session, rpc("mgp/access/query", query, 4)))["result"]["permission"] == "deny"
    async with asyncio.timeout(5):
        told = [m for _, m in await session.standalone.read(0)]
    assert {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"} in told, "clients list again"
    revoked = await ask(gateway, session, rpc("mgp/access/revoke", {**query, "entry_type": "tool_grant"}, 5))
    assert "result" in revoked, revoked
    assert "add" in await tool_names(gateway, session)
    assert (await ask(gateway, session, rpc("tools/call", ADD, 6)))["result"]["structuredContent"] == {"sum": 3}


async def test_only_an_admin_may_change_the_table(gateway: Gateway) -> None:
    session = await session_of(gateway)
    reader = Principal("reader", CapabilitySet(["mcp/*", "mgp/request:mgp/access/query"]))
    refused = await ask(
        gateway, session, rpc("mgp/access/grant", {**DENY_ADD, "entry_type": "tool_grant"}), principal=reader
    )
    assert refused["error"]["code"] == MgpCode.PERMISSION_DENIED
    assert refused["error"]["data"]["action"] == "mgp/request:mgp/access/grant"
    assert "add" in await tool_names(gateway, session), "nothing changed"
    admin = Principal("ops", CapabilitySet(["mcp/*", "mgp/request:mgp/access/*"]))
    done = await ask(
        gateway, session, rpc("mgp/access/grant", {**DENY_ADD, "entry_type": "tool_grant"}, 2), principal=admin
    )
    assert "result" in done, done


async def test_malformed_access_params_are_invalid_params(gateway: Gateway) -> None:
    session = await session_of(gateway)
    answer = await ask(gateway, session, rpc("mgp/access/query", {"agent_id": 7}))
    assert answer["error"]["code"] == jsonrpc.INVALID_PARAMS
