"""The gateway as the MGP kernel of a real subprocess backend (gateway/mgp/kernel.py, MGP §2-§3).

The backend (tests/e2e/backends/mgp_server.py) declares MGP 0.3 under ``experimental`` with
``permissions_required``, as Python-SDK-based servers do. The gateway must offer MGP in its
``initialize``, decide the permissions by ``mgp.permission_policy`` and send the grants as
``mgp/permission/grant`` after the initialize result and before ``notifications/initialized``, in
object form with ``expires_at`` (the real kernel's shape).
"""

from __future__ import annotations

import json
from datetime import datetime

import mcp_types as types
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from tests.support import initialize_request, run_gateway, stdio_backend

pytestmark = [pytest.mark.timeout(60)]


def _text(result: types.CallToolResult) -> str:
    return " ".join(c.text for c in result.content if isinstance(c, types.TextContent))


async def test_grants_go_after_the_initialize_result_and_before_initialized() -> None:
    config = {
        "backends": {"mgp": stdio_backend("tests.e2e.backends.mgp_server", required=True)},
        "mgp": {"permission_policy": "config_only", "approved_permissions": ["filesystem.*"], "grant_ttl_s": 3600},
    }
    with run_gateway(config) as gw:
        async with Client(gw.mcp, mode="legacy", read_timeout_seconds=30) as client:
            seen = json.loads(_text(await client.call_tool("handshake_log", {})))
    assert seen["received"][:3] == ["initialize", "mgp/permission/grant", "notifications/initialized"]
    assert seen["offered"]["version"].startswith("0.") and "permissions" in seen["offered"]["extensions"]
    grants = seen["grants"]
    assert set(grants) == {"shell.execute", "filesystem.read"}
    assert grants["shell.execute"] == {"decision": "denied"}, "config_only denies what it does not list"
    assert grants["filesystem.read"]["decision"] == "approved"
    expires = datetime.fromisoformat(grants["filesystem.read"]["expires_at"].replace("Z", "+00:00"))
    assert 3000 < (expires - datetime.now(expires.tzinfo)).total_seconds() <= 3600


async def test_a_backend_without_permissions_gets_no_grant_request() -> None:
    config = {"backends": {"mgp": stdio_backend("tests.e2e.backends.mgp_server", "--none", required=True)}}
    with run_gateway(config) as gw:
        async with Client(gw.mcp, mode="legacy", read_timeout_seconds=30) as client:
            seen = json.loads(_text(await client.call_tool("handshake_log", {})))
    assert seen["received"][:2] == ["initialize", "notifications/initialized"]
    assert seen["grants"] == {}


async def test_a_plain_client_sees_no_mgp_field_of_an_mgp_backend() -> None:
    config = {"backends": {"mgp": stdio_backend("tests.e2e.backends.mgp_server", required=True)}}
    with run_gateway(config) as gw:
        async with Client(gw.server("mgp"), mode="legacy", read_timeout_seconds=30) as client:
            capabilities = client.session.server_capabilities
            assert capabilities is not None
            dumped = capabilities.model_dump(by_alias=True, exclude_none=True)
            assert "mgp" not in dumped and "mgp" not in (dumped.get("experimental") or {})
            tools = (await client.list_tools()).tools
            assert [t.name for t in tools] == ["handshake_log"]
            assert all("security" not in t.model_dump(by_alias=True, exclude_none=True) for t in tools)


async def test_interactive_permissions_wait_for_an_operator_and_reach_the_backend_when_answered() -> None:
    import httpx
    import httpx2

    admin = {"authorization": "Bearer admin-secret"}
    config = {
        "backends": {"mgp": stdio_backend("tests.e2e.backends.mgp_server", required=True)},
        "auth": {"admin_token": "admin-secret"},
        "principals": {"alice": {"tokens": ["alice-token"], "capabilities": ["*"]}},
        "mgp": {"permission_policy": "interactive", "approved_permissions": ["filesystem.*"]},
    }
    with run_gateway(config) as gw:
        async with httpx.AsyncClient(base_url=gw.url, headers=admin, timeout=10) as http:
            [waiting] = (await http.get("/admin/mgp/permissions")).json()["pending"]
            assert (waiting["server_id"], waiting["permissions"]) == ("mgp", ["shell.execute"])
            refused = await http.post(f"/admin/mgp/permissions/{waiting['request_id']}", json={"grants": {"x": 1}})
            assert refused.status_code == 400
            assert (await http.post("/admin/mgp/permissions/nope", json={"grants": {}})).status_code == 404
            answered = await http.post(
                f"/admin/mgp/permissions/{waiting['request_id']}", json={"grants": {"shell.execute": "approved"}}
            )
            assert answered.status_code == 200 and answered.json()["grants"]["shell.execute"]["decision"] == "approved"
            assert (await http.get("/admin/mgp/permissions")).json()["pending"] == []
            assert (await http.get("/admin/mgp/permissions", headers={"authorization": "Bearer x"})).status_code == 401
        alice = httpx2.AsyncClient(headers={"authorization": "Bearer alice-token"}, timeout=20)
        async with alice, Client(streamable_http_client(gw.mcp, http_client=alice), mode="legacy") as client:
            seen = json.loads(_text(await client.call_tool("handshake_log", {})))
    received = seen["received"]
    assert received[:4] == ["initialize", "mgp/permission/grant", "mgp/permission/request", "notifications/initialized"]
    assert received.count("mgp/permission/grant") == 2, "the operator's answer is sent when it is given"
    assert seen["grants"]["shell.execute"]["decision"] == "approved"


async def test_a_client_cannot_grant_a_backend_permissions_through_a_one_backend_view() -> None:
    """Granting is the kernel's authority: a client's mgp/permission/grant on /servers/NAME/mcp,
    where every other unknown method is relayed to the one backend, never reaches the backend."""
    import httpx

    config = {
        "backends": {"mgp": stdio_backend("tests.e2e.backends.mgp_server", required=True)},
        "mgp": {"permission_policy": "deny_all"},
    }
    forged = {"request_id": "forged", "grants": {"shell.execute": {"decision": "approved"}}}
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    with run_gateway(config) as gw:
        async with httpx.AsyncClient(headers=headers, timeout=20) as http:
            opened = await http.post(gw.server("mgp"), json=initialize_request(0))
            headers["mcp-session-id"] = opened.headers["mcp-session-id"]
            initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            await http.post(gw.server("mgp"), json=initialized, headers=headers)
            grant = {"jsonrpc": "2.0", "id": 1, "method": "mgp/permission/grant", "params": forged}
            refused = (await http.post(gw.server("mgp"), json=grant, headers=headers)).json()
            assert refused["error"]["code"] == -32601
            call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "handshake_log"}}
            answered = (await http.post(gw.server("mgp"), json=call, headers=headers)).json()
    seen = json.loads(answered["result"]["content"][0]["text"])
    assert seen["received"].count("mgp/permission/grant") == 1, "only the kernel's own grant reached it"
    assert seen["grants"]["shell.execute"] == {"decision": "denied"}
