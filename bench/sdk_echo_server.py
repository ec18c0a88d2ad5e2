"""Echo MCP server written with the official Python SDK 2.x (``MCPServer``).

This is the "slower real server" of the benchmark: the SDK's own Streamable
HTTP transport at ``/mcp`` with legacy-era (2025-11-25) stateful sessions —
``initialize`` mints an ``Mcp-Session-Id`` — served by uvicorn (httptools +
uvloop when installed), single worker, access log off.

By default responses use the SDK default (an SSE stream per POST);
``--json-response`` switches to plain ``application/json`` answers.
"""

from __future__ import annotations

import argparse

import uvicorn
from mcp.server.mcpserver import MCPServer


def build_server() -> MCPServer:
    server = MCPServer("bench-sdk-echo", version="1.0.0", log_level="WARNING")

    @server.tool(description="Echo the `text` argument back as text content.")
    def echo(text: str) -> str:
        return text

    return server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8766)
    parser.add_argument("--path", default="/mcp")
    parser.add_argument("--json-response", action="store_true", help="answer application/json instead of SSE")
    args = parser.parse_args(argv)

    app = build_server().streamable_http_app(
        streamable_http_path=args.path,
        json_response=args.json_response,
        stateless_http=False,
        host=args.host,
    )
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        workers=1,
        access_log=False,
        log_level="warning",
        server_header=False,
    )


if __name__ == "__main__":
    main()
