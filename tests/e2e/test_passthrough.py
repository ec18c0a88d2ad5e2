"""What the gateway does not interpret still crosses it, both ways; cancellation; metrics.

Extensions (MCPL, MGP, MCPC) ride on methods MCP does not define, so the gateway must relay
unknown requests, notifications and server-to-client requests untouched and answer every request.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import websockets

from tests.support import (
    JSON_HEADERS as HEADERS,
    RunningGateway,
    dynamic_backend,
    initialize_request,
    modern_headers,
    modern_meta,
    run_gateway,
)

pytestmark = [pytest.mark.timeout(60)]
DYNAMIC = dynamic_backend()
INIT = initialize_request()


@pytest.fixture(scope="module")
def gateway() -> Iterator[RunningGateway]:
    with run_gateway({"backends": {"dyn": DYNAMIC, "demo": {"transport": "builtin", "required": True}}}) as gw:
        yield gw


async def _recv(ws: Any, timeout: float = 10) -> dict[str, Any]:
    return json.loads(await asyncio.wait_for(ws.recv(), timeout))


async def test_unknown_methods_cross_both_ways_over_websocket(gateway: RunningGateway) -> None:
    url = gateway.ws("/servers/dyn/mcp/ws")
    async with websockets.connect(url, subprotocols=["mcp"]) as ws:  # type: ignore[list-item]
        await ws.send(json.dumps(INIT))
        assert (await _recv(ws))["result"]["serverInfo"]["name"] == "dynamic"
        await ws.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))

        await ws.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "x/echo", "params": {"a": [1, 2]}}))
        assert await _recv(ws) == {"jsonrpc": "2.0", "id": 1, "result": {"echoed": {"a": [1, 2]}}}

        await ws.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/x.upward", "params": {"k": "v"}}))
        await ws.send(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "emit"}}))
        custom = await _recv(ws)
        assert custom == {"jsonrpc": "2.0", "method": "notifications/x.custom", "params": {"n": 1}}
        ask = await _recv(ws)
        assert ask["method"] == "x/ask" and ask["params"] == {"question": "meaning?"}
        assert ask["id"] != "ask-1", "the backend's request id is remapped for the client"
        await ws.send(json.dumps({"jsonrpc": "2.0", "id": ask["id"], "result": {"answer": 42}}))
        done = await _recv(ws)
        assert done["id"] == 2 and json.loads(done["result"]["content"][0]["text"]) == {"answer": 42}

        await ws.send(json.dumps({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "seen"}}))
        seen = json.loads((await _recv(ws))["result"]["content"][0]["text"])
        assert seen == [{"jsonrpc": "2.0", "method": "notifications/x.upward", "params": {"k": "v"}}]


async def test_unknown_method_on_the_federated_view_is_answered(gateway: RunningGateway) -> None:
    async with httpx.AsyncClient(timeout=10) as http:
        init = await http.post(gateway.mcp, json=INIT, headers=HEADERS)
        headers = {**HEADERS, "mcp-session-id": init.headers["mcp-session-id"]}
        response = await http.post(gateway.mcp, json={"jsonrpc": "2.0", "id": 7, "method": "x/echo"}, headers=headers)
        body = response.json()
        assert body["id"] == 7 and body["error"]["code"] == -32601
        assert "not routable across 2 backends" in body["error"]["message"]


async def test_client_cancellation_reaches_the_backend_and_ends_the_call(gateway: RunningGateway) -> None:
    async with httpx.AsyncClient(timeout=20) as http:
        init = await http.post(gateway.server("demo"), json=INIT, headers=HEADERS)
        headers = {**HEADERS, "mcp-session-id": init.headers["mcp-session-id"]}
        call = {
            "jsonrpc": "2.0",
            "id": "slow-1",
            "method": "tools/call",
            "params": {"name": "slow_count", "arguments": {"n": 100, "delay_s": 0.1}},
        }
        started = asyncio.get_running_loop().time()
        pending = asyncio.create_task(http.post(gateway.server("demo"), json=call, headers=headers))
        await asyncio.sleep(0.5)
        cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "slow-1"}}
        assert (await http.post(gateway.server("demo"), json=cancel, headers=headers)).status_code == 202
        response = await asyncio.wait_for(pending, 5)
        elapsed = asyncio.get_running_loop().time() - started
        assert elapsed < 5, "a cancelled 10 s call must end at once"
        text = response.text
        assert '"code":-32800' in text.replace(" ", "")


async def test_metrics_count_requests_sessions_and_backends(gateway: RunningGateway) -> None:
    async with httpx.AsyncClient(timeout=10) as http:
        init = await http.post(gateway.mcp, json=INIT, headers=HEADERS)
        headers = {**HEADERS, "mcp-session-id": init.headers["mcp-session-id"]}
        call = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "demo__echo", "arguments": {"text": "m"}},
        }
        assert (await http.post(gateway.mcp, json=call, headers=headers)).json()["result"]["content"][0]["text"] == "m"
        text = (await http.get(f"{gateway.url}/metrics")).text
    assert 'switchboard_requests_total{backend="demo",method="tools/call",outcome="ok"}' in text
    assert 'switchboard_request_duration_seconds_bucket{backend="demo",le=' in text
    assert 'switchboard_active_sessions{transport="streamable_http"}' in text
    assert 'switchboard_backend_up{backend="dyn"} 1.0' in text
    assert 'switchboard_backend_up{backend="demo"} 1.0' in text


async def test_a_request_no_2026_07_28_client_can_be_asked_is_refused_to_the_backend(gateway: RunningGateway) -> None:
    """A 2026-07-28 client is asked only through input requests, which are sampling, elicitation and
    roots. A backend's request of another method (``x/ask`` here) is refused to the backend, and the
    client gets the call's result, never an ``input_required`` naming a method it cannot answer."""
    tool = "dyn__emit"
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": tool, "arguments": {}, "_meta": modern_meta()},
    }
    async with httpx.AsyncClient(timeout=30) as http:
        answer = await http.post(gateway.mcp, json=body, headers=modern_headers("tools/call", tool))
    result = answer.json()["result"]
    assert result["resultType"] == "complete", answer.text
    refusal = json.loads(result["content"][0]["text"])  # what the backend got back for x/ask
    assert "x/ask" in refusal["message"] and "2026-07-28" in refusal["message"]
