"""An HTTP MCP backend (raw ASGI) whose tool ``whoami`` returns the Authorization header it received.

It proves what reaches a backend: the gateway must send the backend's own configured credential,
never the client's token. ``python -m tests.e2e.backends.header_echo PORT``.
"""

from __future__ import annotations

import json
import secrets
import sys
from typing import Any

import uvicorn


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    headers = {k.decode(): v.decode() for k, v in scope["headers"]}
    if scope["method"] != "POST":
        await _send(send, 405, b"")
        return
    request = json.loads(body)
    if "id" not in request:
        await _send(send, 202, b"")
        return
    method = request.get("method")
    extra: list[tuple[bytes, bytes]] = []
    if method == "initialize":
        result: Any = {
            "protocolVersion": request["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "header-echo", "version": "1"},
        }
        extra.append((b"mcp-session-id", secrets.token_hex(8).encode()))
    elif method == "tools/list":
        result = {"tools": [{"name": "whoami", "inputSchema": {"type": "object"}}]}
    elif method == "tools/call":
        seen = headers.get("authorization", "<none>")
        result = {"content": [{"type": "text", "text": seen}]}
    else:
        reply = {"jsonrpc": "2.0", "id": request["id"], "error": {"code": -32601, "message": "Method not found"}}
        await _send(send, 200 if method != "server/discover" else 400, json.dumps(reply).encode())
        return
    await _send(send, 200, json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": result}).encode(), extra)


async def _send(send: Any, status: int, body: bytes, extra: list[tuple[bytes, bytes]] | None = None) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *(extra or [])]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
