"""MGP's protections on a plain MCP backend, in-process (MGP §3, §4, §5): the operator attaches
security metadata in config, and calls are held to permissions and access control by the chain.

A real Gateway with the builtin demo backend (plain MCP); requests go to ``Router.handle``.
"""

from __future__ import annotations

import json

import pytest

from gateway.errors import MgpCode
from tests.gateway.mgp.demo_gateway import ADD, ECHO, ask, rpc, session_of, started

pytestmark = pytest.mark.timeout(30)


async def test_a_tool_whose_configured_permission_is_not_granted_is_blocked_before_the_backend() -> None:
    mgp = {"tools": {"demo": {"echo": {"permissions_required": ["shell.execute"]}}}, "approved_permissions": ["fs.*"]}
    async for gw in started(mgp):
        session = await session_of(gw)
        blocked = await ask(gw, session, rpc("tools/call", ECHO))
        error = blocked["error"]
        assert error["code"] == MgpCode.PERMISSION_DENIED
        assert error["data"]["missing"] == ["shell.execute"] and error["data"]["tool_name"] == "echo"
        assert error["data"]["rejection"]["code"] == "TOOL_BLOCKED"
        assert not session.inflight
        assert "result" in await ask(gw, session, rpc("tools/call", ADD, 2)), "other tools are unaffected"


async def test_a_granted_permission_lets_the_call_through() -> None:
    mgp = {
        "tools": {"demo": {"echo": {"permissions_required": ["fs.read"]}}},
        "approved_permissions": ["fs.*"],
    }
    async for gw in started(mgp):
        session = await session_of(gw)
        answer = await ask(gw, session, rpc("tools/call", ECHO))
        assert answer["result"]["content"][0]["text"] == "hi"


async def test_access_control_refuses_the_call_and_hides_the_tool() -> None:
    mgp = {"access": [{"agent_id": "anonymous", "server_id": "demo", "tool_name": "add", "permission": "deny"}]}
    async for gw in started(mgp):
        session = await session_of(gw)
        listed = await ask(gw, session, rpc("tools/list"))
        names = {t["name"] for t in listed["result"]["tools"]}
        assert "add" not in names and "echo" in names
        refused = await ask(gw, session, rpc("tools/call", ADD))
        assert refused["error"]["code"] == MgpCode.ACCESS_DENIED
        assert json.dumps(refused["error"]["data"]["rejection"]).count("ACCESS_DENIED") == 1
        assert "result" in await ask(gw, session, rpc("tools/call", ECHO, 2))


async def test_opt_in_denies_every_tool_no_entry_allows() -> None:
    mgp = {
        "default_access": "opt-in",
        "access": [{"agent_id": "anonymous", "server_id": "demo", "tool_name": "echo", "permission": "allow"}],
    }
    async for gw in started(mgp):
        session = await session_of(gw)
        listed = await ask(gw, session, rpc("tools/list"))
        assert {t["name"] for t in listed["result"]["tools"]} == {"echo"}
        assert (await ask(gw, session, rpc("tools/call", ADD)))["error"]["code"] == MgpCode.ACCESS_DENIED


async def test_a_configured_validator_blocks_a_dangerous_call_before_the_backend() -> None:
    mgp = {"tools": {"demo": {"echo": {"validator": "sandbox"}}}}
    async for gw in started(mgp):
        session = await session_of(gw)
        refused = await ask(
            gw, session, rpc("tools/call", {"name": "echo", "arguments": {"text": "rm -rf / --no-preserve-root"}})
        )
        error = refused["error"]
        assert error["code"] == MgpCode.VALIDATION_BLOCKED
        assert error["data"]["status"] == "rejected" and error["data"]["validator"] == "sandbox"
        assert not session.inflight
        fine = await ask(
            gw, session, rpc("tools/call", {"name": "echo", "arguments": {"text": "remove the old notes"}}, 2)
        )
        assert fine["result"]["content"][0]["text"] == "remove the old notes"


async def test_network_restricted_refuses_a_metadata_address_in_any_spelling() -> None:
    mgp = {"tools": {"demo": {"echo": {"validator": "network_restricted"}}}}
    async for gw in started(mgp):
        session = await session_of(gw)
        for n, url in enumerate(
            ["http://169.254.169.254/latest/meta-data", "http://2852039166/", "http://[::ffff:a9fe:a9fe]/"]
        ):
            refused = await ask(gw, session, rpc("tools/call", {"name": "echo", "arguments": {"text": url}}, n))
            assert refused["error"]["code"] == MgpCode.VALIDATION_BLOCKED, url
        ok = await ask(
            gw, session, rpc("tools/call", {"name": "echo", "arguments": {"text": "https://example.com/"}}, 9)
        )
        assert "result" in ok
