"""A virtual server as an MCPx topic participant (issue 17), through a real gateway and real WebSockets:
it announces its view's tools, calls reach the real backend under the original name, the selection holds,
and a rename never lets a sender run a tool its capabilities forbid."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.mcpx_client import ADMIN, SECRET, Peer, tool_call
from tests.e2e.test_mcpx_topics import wait_for_backend
from tests.support import RunningGateway, run_gateway

pytestmark = pytest.mark.timeout(60)

ROOM = "room"
CONFIG: dict[str, Any] = {
    "backends": {"demo": {"transport": "builtin", "required": True}},
    "auth": {"jwt": {"hs256_secret": SECRET}, "admin_token": ADMIN},
    "principals": {
        "alice": {"tokens": ["alice-token"], "capabilities": ["mcp/*", "chat"]},
        # may send the exposed name "sum", but not demo's "add" behind it; not on private's list
        "nina": {
            "tokens": ["nina-token"],
            "capabilities": ["mcp/request:tools/call:sum", "mcp/request:tools/call:echo", "mcp/response:*", "chat"],
        },
    },
    "virtual_servers": {
        "ops": {"tools": ["demo:add", "demo:echo"], "rename": {"sum": "demo:add"}, "descriptions": {"sum": "Adds."}},
        "private": {"tools": ["demo:echo"], "principals": ["alice"]},
    },
    "mcpx": {"topics": {ROOM: {"participants": ["ops", "private"]}}},
}


@pytest.fixture(scope="module")
def gateway() -> Iterator[RunningGateway]:
    with run_gateway(CONFIG) as gw:
        wait_for_backend(gw, ROOM, "ops")
        wait_for_backend(gw, ROOM, "private")
        yield gw


async def test_a_virtual_server_joins_and_answers_topic_calls(gateway: RunningGateway) -> None:
    alice = await Peer.join(gateway.url, ROOM, "alice-token")
    try:
        ops = next(p for p in alice.welcome["payload"]["participants"] if p["id"] == "ops")
        described = {t["name"]: t.get("description") for t in ops["tools"]}
        assert described == {"sum": "Adds.", "echo": "Return the given text unchanged."}
        call = await alice.send("mcp/request:tools/call:sum", tool_call("sum", {"a": 2, "b": 3}, rpc_id=7), to=["ops"])
        answer = await alice.recv_kind("mcp/response:tools/call:sum")
        assert answer["from"] == "ops" and answer["correlation_id"] == call["id"]
        assert answer["payload"]["result"]["structuredContent"] == {"sum": 5}
        # The original name and an unselected tool are unknown here.
        for name in ("add", "slow_count"):
            await alice.send(f"mcp/request:tools/call:{name}", tool_call(name, {}), to=["ops"])
            refused = await alice.recv_kind(f"mcp/response:tools/call:{name}")
            assert refused["payload"]["error"]["code"] == -32602
        await alice.send("mcp/request:tools/list", {"jsonrpc": "2.0", "id": 3, "method": "tools/list"}, to=["ops"])
        listed = await alice.recv_kind("mcp/response:tools/list")
        assert {t["name"] for t in listed["payload"]["result"]["tools"]} == {"sum", "echo"}
        sub = {"jsonrpc": "2.0", "id": 4, "method": "resources/subscribe", "params": {"uri": "demo://readme"}}
        await alice.send("mcp/request:resources/subscribe:demo://readme", sub, to=["ops"])
        curated = await alice.recv_kind("mcp/response:resources/subscribe:demo://readme")
        assert curated["payload"]["error"]["code"] == -32601, "nothing passes a virtual server untouched"
    finally:
        await alice.close()


async def test_a_rename_does_not_widen_a_senders_capabilities(gateway: RunningGateway) -> None:
    nina = await Peer.join(gateway.url, ROOM, "nina-token")
    try:
        await nina.send("mcp/request:tools/call:sum", tool_call("sum", {"a": 1, "b": 1}), to=["ops"])
        answer = await nina.recv_kind("mcp/response:tools/call:sum")
        assert answer["payload"]["error"]["code"] == -32093
        assert "mcp/request:tools/call:add" in answer["payload"]["error"]["message"]
    finally:
        await nina.close()


async def test_a_virtual_servers_principals_hold_in_topics_too(gateway: RunningGateway) -> None:
    nina = await Peer.join(gateway.url, ROOM, "nina-token", mode="directed")
    alice = await Peer.join(gateway.url, ROOM, "alice-token", mode="directed")  # not nina's answers
    try:
        echo = tool_call("echo", {"text": "hi"})
        await nina.send("mcp/request:tools/call:echo", echo, to=["private"])
        refused = await nina.recv_kind("mcp/response:tools/call:echo")
        assert refused["payload"]["error"]["code"] == -32093
        assert "may not use virtual server 'private'" in refused["payload"]["error"]["message"]
        await alice.send("mcp/request:tools/call:echo", echo, to=["private"])
        answered = await alice.recv_kind("mcp/response:tools/call:echo")
        assert "result" in answered["payload"], answered
        assert answered["payload"]["result"]["content"][0]["text"] == "hi"
    finally:
        await nina.close()
        await alice.close()
