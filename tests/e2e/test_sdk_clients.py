"""The official MCP Python SDK as the client, through every legacy front door, to stdio and HTTP backends.

One gateway fronts the conformance fixture twice: spawned over stdio (``stdio``) and over
Streamable HTTP (``web``). Every cell of (front door x backend) runs the same whole flow: lists,
plain calls, progress and logs while a call runs, sampling and elicitation round trips, resources
and prompts. Federated doors see prefixed names (two backends); ``/servers/NAME`` doors see bare ones.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import mcp_types as types
import pytest
from mcp.client import Client, ClientRequestContext
from mcp.client.sse import sse_client
from mcp.shared.exceptions import MCPError

from tests.support import RunningGateway, fixture_stdio_backend, run_gateway

pytestmark = [
    pytest.mark.timeout(90),
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
]


@pytest.fixture(scope="module")
def gateway(fixture_backend_url: str) -> Iterator[RunningGateway]:
    config = {
        "backends": {
            "stdio": fixture_stdio_backend(required=True),
            "web": {"transport": "http", "url": fixture_backend_url, "required": True},
        }
    }
    with run_gateway(config) as gw:
        yield gw


@dataclass(frozen=True)
class Door:
    label: str
    federated: bool
    sse: bool

    def url(self, gw: RunningGateway, backend: str) -> str:
        base = gw.url if self.federated else f"{gw.url}/servers/{backend}"
        return f"{base}/sse" if self.sse else f"{base}/mcp"

    def name(self, backend: str, tool: str) -> str:
        return f"{backend}__{tool}" if self.federated else tool

    def uri(self, backend: str, uri: str) -> str:
        return f"{backend}+{uri}" if self.federated else uri


DOORS = [
    Door("federated-streamable-http", True, False),
    Door("federated-sse", True, True),
    Door("single-streamable-http", False, False),
    Door("single-sse", False, True),
]


class Recorder:
    def __init__(self) -> None:
        self.logs: list[Any] = []
        self.sampled: list[types.CreateMessageRequestParams] = []
        self.elicited: list[types.ElicitRequestParams] = []

    async def sampling(
        self, ctx: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult:
        self.sampled.append(params)
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(text="from the client"), model="m", stop_reason="endTurn"
        )

    async def elicitation(self, ctx: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        self.elicited.append(params)
        return types.ElicitResult(action="accept", content={"username": "ada", "email": "ada@example.com"})

    async def logging(self, params: types.LoggingMessageNotificationParams) -> None:
        self.logs.append(params.data)


@asynccontextmanager
async def connect(door: Door, gw: RunningGateway, backend: str, rec: Recorder) -> AsyncIterator[Client]:
    url = door.url(gw, backend)
    server: Any = sse_client(url) if door.sse else url
    async with Client(
        server,
        mode="legacy",
        sampling_callback=rec.sampling,
        elicitation_callback=rec.elicitation,
        logging_callback=rec.logging,
        read_timeout_seconds=30,
    ) as client:
        yield client


def text_of(result: types.CallToolResult) -> str:
    return " ".join(c.text for c in result.content if isinstance(c, types.TextContent))


@pytest.mark.parametrize("backend", ["stdio", "web"])
@pytest.mark.parametrize("door", DOORS, ids=[d.label for d in DOORS])
async def test_whole_flow(gateway: RunningGateway, door: Door, backend: str) -> None:
    rec = Recorder()
    async with connect(door, gateway, backend, rec) as client:
        if door.federated:
            assert client.server_info is not None and client.server_info.name == "switchboard"
        tools = {t.name for t in (await client.list_tools()).tools}
        assert door.name(backend, "test_simple_text") in tools
        if door.federated:
            other = "web" if backend == "stdio" else "stdio"
            assert door.name(other, "test_simple_text") in tools, "both backends are merged"
        else:
            assert "test_simple_text" in tools and not any("__" in t for t in tools)

        result = await client.call_tool(door.name(backend, "test_simple_text"), {})
        assert text_of(result) == "This is a simple text response for testing."

        error = await client.call_tool(door.name(backend, "test_error_handling"), {})
        assert error.is_error

        progress: list[tuple[float, float | None]] = []

        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            progress.append((value, total))

        await client.call_tool(door.name(backend, "test_tool_with_progress"), {}, progress_callback=on_progress)
        assert [p for p, _ in progress] == sorted(p for p, _ in progress) and len(progress) >= 3

        await client.set_logging_level("debug")
        await client.call_tool(door.name(backend, "test_tool_with_logging"), {})
        assert len(rec.logs) >= 3

        sampled = await client.call_tool(door.name(backend, "test_sampling"), {"prompt": "Say hi"})
        assert "from the client" in text_of(sampled)
        assert len(rec.sampled) == 1

        elicited = await client.call_tool(door.name(backend, "test_elicitation"), {"message": "Who are you?"})
        assert "accept" in text_of(elicited)
        assert len(rec.elicited) == 1

        resources = {str(r.uri) for r in (await client.list_resources()).resources}
        static = door.uri(backend, "test://static-text")
        assert static in resources
        contents = (await client.read_resource(static)).contents
        assert isinstance(contents[0], types.TextResourceContents)
        assert str(contents[0].uri) == static
        assert contents[0].text == "This is the content of the static text resource."

        prompt = await client.get_prompt(door.name(backend, "test_simple_prompt"))
        assert prompt.messages and isinstance(prompt.messages[0].content, types.TextContent)


async def test_federated_embedded_resource_uris_are_rewritten(gateway: RunningGateway) -> None:
    """A resource a tool result names must be readable through the same view: its URI is prefixed."""
    rec = Recorder()
    door = DOORS[0]
    async with connect(door, gateway, "web", rec) as client:
        result = await client.call_tool("web__test_embedded_resource", {})
        embedded = [c for c in result.content if isinstance(c, types.EmbeddedResource)]
        assert embedded and str(embedded[0].resource.uri).startswith("web+")
        templates = (await client.list_resource_templates()).resource_templates
        assert any(t.uri_template.startswith("web+test://template/") for t in templates)
        read = await client.read_resource("web+test://template/42/data")
        assert str(read.contents[0].uri) == "web+test://template/42/data"


async def test_unknown_prefixed_tool_is_a_clear_error(gateway: RunningGateway) -> None:
    rec = Recorder()
    async with connect(DOORS[0], gateway, "web", rec) as client:
        with pytest.raises(MCPError) as raised:
            await client.call_tool("nosuch__tool", {})
        assert raised.value.error.code == -32602
        assert "Unknown tool: nosuch__tool" in raised.value.error.message
