"""A server built on the official Python SDK 1.x (FastMCP), run in its own virtualenv.

    python sdk1_server.py stdio            # newline-delimited JSON-RPC on stdin/stdout
    python sdk1_server.py http PORT        # Streamable HTTP at http://127.0.0.1:PORT/mcp (SDK >= 1.8)

It imports nothing from this project: it stands for the released servers found in the wild, which
is the point (SDK 1.6 dies on an unknown method such as ``server/discover``; SDK 1.x Streamable
HTTP refuses it with HTTP 400 and ``"id": "server-error"``). Tools: ``echo`` and ``add``.
"""

from __future__ import annotations

import sys

from mcp.server.fastmcp import FastMCP

server = FastMCP("sdk1-peer")


@server.tool()
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def main(argv: list[str]) -> None:
    if argv[:1] == ["http"]:
        server.settings.host = "127.0.0.1"
        server.settings.port = int(argv[1])
        server.run(transport="streamable-http")
    else:
        server.run(transport="stdio")


if __name__ == "__main__":
    main(sys.argv[1:])
