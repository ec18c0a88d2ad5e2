"""MGP §15 server discovery answered by the gateway, in-process on a real Gateway: a backend
registered at runtime joins every view (its tools listed and callable, clients told to list again),
``mgp/discovery/list`` reports the live registry, and deregistration removes only runtime backends."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway import jsonrpc
from gateway.config import Backend, Config
from gateway.core import Gateway
from gateway.errors import MgpCode
from gateway.sessions import ClientSession
from policies.auth import Credentials
from policies.patterns import CapabilitySet
from policies.principal import Principal
from tests.gateway.mgp.demo_gateway import ask, mgp_session_of, rpc, session_of, started
from tests.support import initialize_request

pytestmark = pytest.mark.timeout(30)

MGP_SERVER = {
    "id": "dyn",
    "transport": "stdio",
    "command": sys.executable,
    "args": ["-m", "tests.e2e.backends.mgp_server", "--none"],
    "mgp": {"trust_level": "untrusted"},
    "created_by": "agent.test",
    "justification": "a test needs it",
}
LIST_CHANGED = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}


@pytest.fixture
async def gateway() -> AsyncIterator[Gateway]:
    async for gw in started({"register_commands": True}):
        yield gw


async def tool_names(gw: Gateway, session: ClientSession) -> set[str]:
    return {t["name"] for t in (await ask(gw, session, rpc("tools/list")))["result"]["tools"]}


async def told(session: ClientSession, after: int) -> list[dict[str, Any]]:
    """What the session's own stream carried after sequence number ``after``."""
    async with asyncio.timeout(5):
        return [m for _, m in await session.standalone.read(after)]


async def test_a_runtime_backend_joins_is_called_listed_and_leaves(gateway: Gateway) -> None:
    session = await session_of(gateway)
    mark = session.standalone.last_seq
    registered = await ask(gateway, session, rpc("mgp/discovery/register", MGP_SERVER))
    result = registered["result"]
    assert result["id"] == "dyn" and result["status"] == "connected" and result["registered"] is True
    assert result["transport"] == "stdio" and result["source"] == "runtime"
    assert result["trust_level"] == "untrusted", "the registration's declared trust level"
    assert result["mgp_version"] == "0.3.0", "the kernel negotiated MGP with it"
    assert result["tools"] == ["handshake_log"] and result["tool_count"] == 1
    assert LIST_CHANGED in await told(session, mark), "clients list again"
    assert "handshake_log" in await tool_names(gateway, session)
    called = await ask(gateway, session, rpc("tools/call", {"name": "handshake_log", "arguments": {}}, 2))
    assert "result" in called and not called["result"].get("isError"), called

    listed = (await ask(gateway, session, rpc("mgp/discovery/list", {}, 3)))["result"]["servers"]
    by_id = {s["id"]: s for s in listed}
    assert set(by_id) == {"demo", "dyn"}
    assert by_id["demo"]["source"] == "config" and "mgp_version" not in by_id["demo"], "plain MCP: nothing negotiated"
    assert by_id["demo"]["status"] == "connected" and by_id["demo"]["tool_count"] >= 2
    only_mgp = await ask(gateway, session, rpc("mgp/discovery/list", {"filter": {"extensions": ["permissions"]}}, 4))
    assert [s["id"] for s in only_mgp["result"]["servers"]] == ["dyn"]

    mark = session.standalone.last_seq
    gone = await ask(gateway, session, rpc("mgp/discovery/deregister", {"id": "dyn", "reason": "done"}, 5))
    assert gone["result"] == {"id": "dyn", "deregistered": True, "registered_by": "anonymous", "reason": "done"}
    assert LIST_CHANGED in await told(session, mark)
    assert "handshake_log" not in await tool_names(gateway, session)
    assert "dyn" not in gateway.connections and "dyn" not in gateway.single and "dyn" not in gateway.catalogs
    refused = await ask(gateway, session, rpc("tools/call", {"name": "handshake_log", "arguments": {}}, 6))
    assert refused["error"]["code"] == jsonrpc.INVALID_PARAMS
    again = await ask(gateway, session, rpc("mgp/discovery/deregister", {"id": "dyn"}, 7))
    assert again["error"]["code"] == jsonrpc.INVALID_PARAMS


async def test_names_in_use_and_config_backends_are_refused(gateway: Gateway) -> None:
    session = await session_of(gateway)
    taken = await ask(gateway, session, rpc("mgp/discovery/register", {**MGP_SERVER, "id": "demo"}))
    assert taken["error"]["code"] == MgpCode.SERVER_ALREADY_REGISTERED
    assert taken["error"]["data"]["_mgp"]["category"]
    kept = await ask(gateway, session, rpc("mgp/discovery/deregister", {"id": "demo"}, 2))
    assert kept["error"]["code"] == jsonrpc.INVALID_PARAMS
    assert "configuration file" in kept["error"]["message"]
    assert gateway.connections["demo"].state == "ready"


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"id": "Not.A.Label"}, "DNS label"),
        ({"transport": "pigeon"}, "transport"),
        ({"transport": "http", "command": "not a url"}, "url"),
        ({"mgp": {"trust_level": "godlike"}}, "trust_level"),
        ({"args": "not-a-list"}, "args"),
    ],
)
async def test_malformed_registrations_are_invalid_params(
    gateway: Gateway, change: dict[str, Any], needle: str
) -> None:
    session = await session_of(gateway)
    answer = await ask(gateway, session, rpc("mgp/discovery/register", {**MGP_SERVER, **change}))
    assert answer["error"]["code"] == jsonrpc.INVALID_PARAMS, answer
    assert needle in answer["error"]["message"]
    assert set(gateway.connections) == {"demo"}


async def test_stdio_registration_is_off_unless_the_operator_enables_it() -> None:
    async for gw in started():
        session = await session_of(gw)
        answer = await ask(gw, session, rpc("mgp/discovery/register", MGP_SERVER))
        assert answer["error"]["code"] == MgpCode.PERMISSION_DENIED
        assert "mgp.register_commands" in answer["error"]["message"]
        assert set(gw.connections) == {"demo"}


async def test_only_an_admin_may_register_or_deregister(gateway: Gateway) -> None:
    session = await session_of(gateway)
    reader = Principal("reader", CapabilitySet(["mcp/*", "mgp/request:mgp/discovery/list"]))
    for method, params in (("mgp/discovery/register", MGP_SERVER), ("mgp/discovery/deregister", {"id": "demo"})):
        refused = await ask(gateway, session, rpc(method, params), principal=reader)
        assert refused["error"]["code"] == MgpCode.PERMISSION_DENIED
        assert refused["error"]["data"]["action"] == f"mgp/request:{method}"
    listed = await ask(gateway, session, rpc("mgp/discovery/list"), principal=reader)
    assert [s["id"] for s in listed["result"]["servers"]] == ["demo"]


async def test_draft_clients_use_the_kernel_tools(gateway: Gateway) -> None:
    session, _ = await mgp_session_of(gateway, "0.8.0")
    listed = await ask(gateway, session, rpc("tools/list"))
    kernel = {t["name"]: t for t in listed["result"]["tools"] if t["name"].startswith("mgp.discovery.")}
    assert set(kernel) == {"mgp.discovery.list", "mgp.discovery.register", "mgp.discovery.deregister"}
    assert kernel["mgp.discovery.register"]["_mgp"]["admin_only"] is True
    answer = await ask(gateway, session, rpc("tools/call", {"name": "mgp.discovery.list", "arguments": {}}, 2))
    servers = answer["result"]["structuredContent"]["servers"]
    assert [s["id"] for s in servers] == ["demo"] and servers[0]["trust_level"] == "standard"
    bad = await ask(gateway, session, rpc("tools/call", {"name": "mgp.discovery.list", "arguments": {"filter": 3}}, 3))
    assert bad["error"]["code"] == jsonrpc.INVALID_PARAMS


async def test_views_change_safely_under_conditional_prefixing() -> None:
    """The core of it, with two builtin backends: the federated view turns prefixed when a second
    backend joins and bare again when it leaves; the newcomer's own view exists while it does."""
    config = Config.model_validate({"backends": {"demo": {"transport": "builtin"}}})
    gw = Gateway(config)
    await gw.start()
    try:
        assert await gw.connections["demo"].wait_ready(10)
        session = await session_of(gw)
        assert "echo" in await tool_names(gw, session)
        mark = session.standalone.last_seq
        conn = await gw.runtime.add("extra", Backend(transport="builtin"))
        assert await conn.wait_ready(10)
        assert await tool_names(gw, session) >= {"demo__echo", "extra__echo"}
        notes = await told(session, mark)
        assert LIST_CHANGED in notes
        assert {"jsonrpc": "2.0", "method": "notifications/prompts/list_changed"} in notes, "names changed"
        own = gw.open_session("test", gw.single["extra"], Credentials("anonymous", "anonymous"))
        await gw.router.handle(own, initialize_request(0), jsonrpc.Shape.REQUEST, own.standalone)
        own.initialized = True
        assert "echo" in await tool_names(gw, own)
        called = await ask(gw, session, rpc("tools/call", {"name": "extra__add", "arguments": {"a": 2, "b": 3}}))
        assert called["result"]["structuredContent"] == {"sum": 5}
        with pytest.raises(ValueError, match="already exists"):
            await gw.runtime.add("extra", Backend(transport="builtin"))
        await gw.runtime.remove("extra", 1.0)
        assert "echo" in await tool_names(gw, session), "bare names again"
        assert await tool_names(gw, own) == set(), "its own view is empty now"
        assert conn.state == "closed"
    finally:
        await gw.stop()
