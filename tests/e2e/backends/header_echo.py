"""An HTTP MCP backend (raw ASGI, legacy era) that says what reached it.

Tools: ``whoami`` returns the Authorization header it received (the gateway must send the backend's
own configured credential, never the client's token); ``echo_meta`` a JSON text of the request's
``params._meta`` and its ``traceparent``/``tracestate`` headers (trace context passed on); ``fail``
answers a JSON-RPC error (``FAIL_CODE``); ``broken`` a result with ``isError``.
``python -m tests.e2e.backends.header_echo PORT``.
"""

from __future__ import annotations

import json
import secrets
import sys
from typing import Any

import uvicorn

from tests.raw_asgi import read_body, respond

FAIL_CODE = -32050
TOOLS = [{"name": name, "inputSchema": {"type": "object"}} for name in ("whoami", "echo_meta", "fail", "broken")]


def _text(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}]}


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    body = await read_body(receive)
    if scope["method"] != "POST":
        await respond(send, 405, b"")
        return
    headers = {k.decode(): v.decode() for k, v in scope["headers"]}
    request = json.loads(body)
    if "id" not in request:
        await respond(send, 202, b"")
        return
    method, params = request.get("method"), request.get("params") or {}
    tool = params.get("name") if method == "tools/call" else None
    extra: list[tuple[bytes, bytes]] = []
    reply: dict[str, Any] = {"jsonrpc": "2.0", "id": request["id"]}
    if method == "initialize":
        reply["result"] = {
            "protocolVersion": params["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "header-echo", "version": "1"},
        }
        extra.append((b"mcp-session-id", secrets.token_hex(8).encode()))
    elif method == "tools/list":
        reply["result"] = {"tools": TOOLS}
    elif tool == "whoami":
        reply["result"] = _text(headers.get("authorization", "<none>"))
    elif tool == "echo_meta":
        seen = {"meta": params.get("_meta"), **{k: headers.get(k) for k in ("traceparent", "tracestate")}}
        reply["result"] = _text(json.dumps(seen))
    elif tool == "fail":
        reply["error"] = {"code": FAIL_CODE, "message": "deliberate failure"}
    elif tool == "broken":
        reply["result"] = {**_text("it broke"), "isError": True}
    elif method == "ping":
        reply["result"] = {}
    else:
        reply["error"] = {"code": -32601, "message": "Method not found"}
        await respond(send, 200 if method != "server/discover" else 400, json.dumps(reply).encode())
        return
    await respond(send, 200, json.dumps(reply).encode(), extra)


if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
