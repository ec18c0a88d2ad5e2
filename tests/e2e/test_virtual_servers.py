"""Virtual servers end to end: a real gateway, two real backends, the official MCP SDK as the client.

The gateway fronts the in-process demo backend (``demo``: echo, add, slow_count, demo://readme, greet)
and the conformance fixture over stdio (``fx``); the virtual server ``ops`` picks some of each, renames
two tools, redescribes one and has its own serverInfo and instructions; ``private`` admits alice only.
Principals: alice may do everything; bob may call the exposed names ``say`` and ``simple`` but, of the
real tools behind them, only ``test_simple_text`` (so ``say``, the renamed ``echo``, stays closed to
him); carol may do everything but is not on ``private``'s list.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import mcp_types as types
import pytest
from mcp.client import Client
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from websockets.asyncio.client import connect as ws_connect
from websockets.typing import Subprotocol

from tests.support import RunningGateway, fixture_stdio_backend, run_gateway

pytestmark = [
    pytest.mark.timeout(90),
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
]

TOKENS = {"alice": "alice-secret-1", "bob": "bob-secret-2", "carol": "carol-secret-3"}
BOB = [
    "mcp/request:initialize",
    "mcp/request:ping",
    "mcp/notification:*",
    "mcp/request:*/list",
    "mcp/request:tools/call:say",
    "mcp/request:tools/call:simple",
    "mcp/request:tools/call:test_simple_text",
    "mcp/request:prompts/get:hello",  # the renamed greet of "desk", not greet itself
]
CONFIG: dict[str, Any] = {
    "auth": {},
    "principals": {
        "alice": {"tokens": [TOKENS["alice"]], "capabilities": ["*"]},
        "bob": {"tokens": [TOKENS["bob"]], "capabilities": BOB},
        "carol": {"tokens": [TOKENS["carol"]], "capabilities": ["*"]},
    },
    "virtual_servers": {
        "ops": {
            "tools": ["demo:echo", "demo:add", "fx:test_simple_text"],
            "prompts": ["demo:greet"],
            "resources": ["demo:demo://*", "fx:test://template/*"],
            "rename": {"say": "demo:echo", "simple": "fx:test_simple_text"},
            "descriptions": {"say": "Says it back."},
            "server_info": {"name": "ops-tools", "version": "2.1.0", "title": "Ops"},
            "instructions": "Use say first.",
        },
        "private": {"tools": ["demo:*"], "principals": ["alice"]},
        "desk": {"prompts": ["demo:greet"], "rename": {"hello": "demo:greet"}},
    },
}


@pytest.fixture(scope="module")
def gateway() -> Iterator[RunningGateway]:
    config = {
        **CONFIG,
        "backends": {
            "demo": {"transport": "builtin", "server": "demo", "required": True},
            "fx": fixture_stdio_backend(required=True),
        },
    }
    with run_gateway(config) as gw:
        yield gw


def bearer(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[who]}"}


@asynccontextmanager
async def sdk(url: str, who: str, mode: str = "legacy", sse: bool = False) -> AsyncIterator[Client]:
    """The official SDK's client on ``url`` as ``who`` (Streamable HTTP, or legacy SSE)."""
    if sse:
        async with Client(sse_client(url, headers=bearer(who)), mode="legacy", read_timeout_seconds=30) as client:
            yield client
        return
    async with (
        create_mcp_http_client(headers=bearer(who)) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode, read_timeout_seconds=30) as client,
    ):
        yield client


def text_of(result: types.CallToolResult) -> str:
    return " ".join(c.text for c in result.content if isinstance(c, types.TextContent))


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_the_sdk_sees_the_curated_server(gateway: RunningGateway, mode: str) -> None:
    async with sdk(gateway.server("ops"), "alice", mode) as client:
        assert client.server_info is not None
        assert (client.server_info.name, client.server_info.version) == ("ops-tools", "2.1.0")
        assert client.server_info.title == "Ops"
        assert client.instructions == "Use say first."
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert set(listed) == {"say", "add", "simple"}, "exactly the selection, renamed"
        assert listed["say"].description == "Says it back."
        assert listed["add"].description == "Add two numbers.", "not redescribed: the backend's own"
        assert text_of(await client.call_tool("say", {"text": "hi there"})) == "hi there"  # demo's echo
        assert text_of(await client.call_tool("add", {"a": 2, "b": 3})) == "5"
        assert "simple" in text_of(await client.call_tool("simple", {})).lower()  # the fixture's test_simple_text
        for outside in ("echo", "slow_count", "test_simple_text", "test_sampling", "demo__echo"):
            with pytest.raises(MCPError) as refused:
                await client.call_tool(outside, {"text": "x"})
            assert refused.value.error.code == -32602 and "Unknown tool" in refused.value.error.message


async def test_prompts_and_resources_are_curated_too(gateway: RunningGateway) -> None:
    async with sdk(gateway.server("ops"), "alice") as client:
        assert [p.name for p in (await client.list_prompts()).prompts] == ["greet"]
        greeting = await client.get_prompt("greet", {"name": "Ada"})
        assert "Ada" in json.dumps(greeting.model_dump(mode="json"))
        with pytest.raises(MCPError):
            await client.get_prompt("test_simple_prompt")  # the fixture's: not selected
        assert [str(r.uri) for r in (await client.list_resources()).resources] == ["demo://readme"]
        templates = (await client.list_resource_templates()).resource_templates
        assert [t.uri_template for t in templates] == ["test://template/{id}/data"]
        readme = await client.read_resource("demo://readme")
        assert "demo backend" in json.dumps(readme.model_dump(mode="json"))
        data = await client.read_resource("test://template/7/data")  # through the selected template
        assert "7" in json.dumps(data.model_dump(mode="json"))
        with pytest.raises(MCPError):
            await client.read_resource("test://static-text")  # the fixture's, not selected


async def test_a_rename_never_widens_a_capability(gateway: RunningGateway) -> None:
    """bob may call the exposed ``say`` but not demo's ``echo`` behind it: he neither sees nor calls it."""
    async with sdk(gateway.server("ops"), "bob") as client:
        assert {t.name for t in (await client.list_tools()).tools} == {"simple"}
        with pytest.raises(MCPError) as refused:
            await client.call_tool("say", {"text": "hi"})
        assert refused.value.error.code == -32093
        assert "mcp/request:tools/call:echo" in refused.value.error.message
        with pytest.raises(MCPError) as denied:
            await client.call_tool("add", {"a": 1, "b": 2})  # not even the exposed name is allowed
        assert denied.value.error.code == -32093
        assert "simple" in text_of(await client.call_tool("simple", {})).lower()
    async with sdk(gateway.server("demo"), "bob") as client:  # the backend's own door agrees
        assert {t.name for t in (await client.list_tools()).tools} == set()


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_renamed_prompt_never_widens_a_capability(gateway: RunningGateway, mode: str) -> None:
    """bob may get the exposed ``hello`` but not demo's ``greet`` behind it, on both eras: a prompts/get
    is held to the real prompt's names as a tools/call is (no shortcut may skip it)."""
    async with sdk(gateway.server("desk"), "bob", mode) as client:
        assert (await client.list_prompts()).prompts == []
        with pytest.raises(MCPError) as refused:
            await client.get_prompt("hello", {"name": "Ada"})
        assert refused.value.error.code == -32093
    async with sdk(gateway.server("desk"), "alice", mode) as client:
        assert [p.name for p in (await client.list_prompts()).prompts] == ["hello"]
        assert "Ada" in json.dumps((await client.get_prompt("hello", {"name": "Ada"})).model_dump(mode="json"))


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_only_listed_principals_may_use_a_restricted_server(gateway: RunningGateway, mode: str) -> None:
    async with sdk(gateway.server("private"), "alice", mode) as client:
        assert {t.name for t in (await client.list_tools()).tools} == {"echo", "add", "slow_count"}
    # The SDK raises the refusal inside task groups: looked for in the whole chain.
    with pytest.raises(BaseException) as refused:
        async with sdk(gateway.server("private"), "carol", mode) as client:
            await client.list_tools()
    assert _refusal_in(refused.value), repr(refused.value)


async def test_a_refused_principal_gets_a_capability_denial_on_the_wire(gateway: RunningGateway) -> None:
    async with httpx.AsyncClient(timeout=10) as http:
        answer = await http.post(
            gateway.server("private"),
            headers={**bearer("carol"), "Accept": "application/json, text/event-stream"},
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "t", "version": "1"},
                },
            },
        )
    error = answer.json()["error"]
    assert error["code"] == -32093
    assert error["data"] == {"server": "private", "principal": "carol"}
    assert "serverInfo" not in answer.text


def _refusal_in(exc: BaseException) -> bool:
    seen: list[BaseException] = [exc]
    while seen:
        current = seen.pop()
        if "may not use virtual server" in str(current):
            return True
        seen += [*getattr(current, "exceptions", ()), *(e for e in (current.__cause__, current.__context__) if e)]
    return False


async def test_legacy_sse_door(gateway: RunningGateway) -> None:
    async with sdk(f"{gateway.url}/servers/ops/sse", "alice", sse=True) as client:
        assert client.server_info is not None and client.server_info.name == "ops-tools"
        assert {t.name for t in (await client.list_tools()).tools} == {"say", "add", "simple"}
        assert text_of(await client.call_tool("say", {"text": "over sse"})) == "over sse"
        with pytest.raises(MCPError):
            await client.call_tool("echo", {"text": "x"})


async def test_websocket_door(gateway: RunningGateway) -> None:
    async with ws_connect(
        gateway.ws("/servers/ops/mcp/ws"), subprotocols=[Subprotocol("mcp")], additional_headers=bearer("alice")
    ) as ws:

        async def ask(rpc_id: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
            await ws.send(json.dumps({"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": params}))
            while True:
                message = json.loads(await ws.recv(decode=True))
                if message.get("id") == rpc_id:
                    return dict(message)

        hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
        init = await ask(1, "initialize", hello)
        assert init["result"]["serverInfo"]["name"] == "ops-tools"
        assert init["result"]["instructions"] == "Use say first."
        await ws.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        listed = await ask(2, "tools/list", {})
        assert {t["name"] for t in listed["result"]["tools"]} == {"say", "add", "simple"}
        said = await ask(3, "tools/call", {"name": "say", "arguments": {"text": "over ws"}})
        assert said["result"]["content"][0]["text"] == "over ws"
        refused = await ask(4, "tools/call", {"name": "echo", "arguments": {"text": "x"}})
        assert refused["error"]["code"] == -32602
        untouched = await ask(5, "some/custom", {})
        assert untouched["error"]["code"] == -32601, "a virtual server passes nothing through untouched"


async def test_a_backend_door_and_an_unknown_name(gateway: RunningGateway) -> None:
    async with sdk(gateway.server("demo"), "alice") as client:
        assert {t.name for t in (await client.list_tools()).tools} == {"echo", "add", "slow_count"}
    async with httpx.AsyncClient(timeout=10) as http:
        answer = await http.post(
            f"{gateway.url}/servers/nothing/mcp",
            headers={**bearer("alice"), "Accept": "application/json, text/event-stream"},
            json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
        )
        assert answer.status_code == 404
