"""A dual-era HTTP backend (official MCP Python SDK) that offers sampling only on its legacy path.

It serves both eras at one URL, like the official conformance fixture: the 2026-07-28 path
(``server/discover``, per-request envelope) and the legacy ``initialize`` session. Like that
fixture, its ``ask_model`` tool asks the client for sampling with a real request on the legacy
path only; on the modern path it cannot ask and says so. ``which_era`` names the era of the
request that reached it. A gateway with era affinity must send legacy clients' calls through a
legacy session, so that they get the sampling request.

    python -m tests.e2e.backends.era_split PORT
"""

from __future__ import annotations

import sys
import warnings
from typing import Any

import mcp_types as types
import uvicorn
from mcp.server import Server, ServerRequestContext
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

warnings.filterwarnings("ignore", category=MCPDeprecationWarning)

NO_SAMPLING_HERE = "sampling is offered only on the legacy path"
_EMPTY: dict[str, Any] = {"type": "object", "properties": {}}
TOOLS = [
    types.Tool(name="which_era", description="Names the era of this request", input_schema=_EMPTY),
    types.Tool(name="ask_model", description="Asks the client's model (legacy path only)", input_schema=_EMPTY),
]


def _modern(ctx: ServerRequestContext[Any, Any]) -> bool:
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


def _text(text: str, error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=error)


async def on_list_tools(
    ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    return types.ListToolsResult(tools=TOOLS)


async def on_call_tool(
    ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
) -> types.CallToolResult:
    if params.name == "which_era":
        return _text("modern" if _modern(ctx) else "legacy")
    if params.name == "ask_model":
        if _modern(ctx):
            return _text(NO_SAMPLING_HERE, error=True)
        question = types.SamplingMessage(role="user", content=types.TextContent(text="What is the capital of France?"))
        request = types.CreateMessageRequest(
            params=types.CreateMessageRequestParams(messages=[question], max_tokens=50)
        )
        answer = await ctx.session.send_request(
            request, types.CreateMessageResult, metadata=ServerMessageMetadata(related_request_id=ctx.request_id)
        )
        content = answer.content
        return _text(f"the model said: {content.text if isinstance(content, types.TextContent) else content}")
    raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown tool: {params.name}")


def main(port: int) -> None:
    server = Server("era-split", version="1.0.0", on_list_tools=on_list_tools, on_call_tool=on_call_tool)
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=["127.0.0.1:*", "localhost:*"],
        allowed_origins=["http://127.0.0.1:*", "http://localhost:*"],
    )
    app = server.streamable_http_app(streamable_http_path="/mcp", transport_security=security, host="127.0.0.1")
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")


if __name__ == "__main__":
    main(int(sys.argv[1]))
