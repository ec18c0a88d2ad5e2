"""A stdio MCP backend whose tool list changes at runtime (newline-delimited JSON-RPC, no SDK).

Tool ``grow`` adds a tool named by its ``name`` argument and announces
``notifications/tools/list_changed``; every added tool echoes its own name.
For pass-through tests it also speaks methods MCP does not define: ``x/echo`` answers with its
params; tool ``emit`` sends the client ``notifications/x.custom`` and the request ``x/ask`` and
returns the client's answer; tool ``seen`` lists the unknown notifications it received.
"""

from __future__ import annotations

import json
import sys
from typing import Any

tools: list[dict[str, Any]] = [
    {
        "name": "grow",
        "description": "Add a tool",
        "inputSchema": {"type": "object", "properties": {"name": {"type": "string"}}},
    }
]


def send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


seen: list[dict[str, Any]] = []
pending: list[dict[str, Any]] = []


def ask_client(method: str, params: dict[str, Any]) -> dict[str, Any]:
    """Send a request to the client and read stdin until its answer; other messages wait their turn."""
    send({"jsonrpc": "2.0", "id": "ask-1", "method": method, "params": params})
    for line in sys.stdin:
        if not line.strip():
            continue
        message = json.loads(line)
        if message.get("id") == "ask-1" and "method" not in message:
            return message
        pending.append(message)
    return {"error": {"message": "stdin closed"}}


def handle(message: dict[str, Any]) -> None:
    method, rpc_id, params = message.get("method"), message.get("id"), message.get("params") or {}
    if rpc_id is None:
        if isinstance(method, str) and method.startswith("notifications/x."):
            seen.append(message)
        return
    if method == "initialize":
        result: Any = {
            "protocolVersion": params.get("protocolVersion", "2025-11-25"),
            "capabilities": {"tools": {"listChanged": True}},
            "serverInfo": {"name": "dynamic", "version": "1"},
        }
    elif method == "tools/list":
        result = {"tools": tools}
    elif method == "tools/call":
        name = params.get("name")
        if name == "grow":
            tools.append({"name": params["arguments"]["name"], "inputSchema": {"type": "object"}})
            send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
            result = {"content": [{"type": "text", "text": "grown"}]}
        elif name == "emit":
            send({"jsonrpc": "2.0", "method": "notifications/x.custom", "params": {"n": 1}})
            answer = ask_client("x/ask", {"question": "meaning?"})
            result = {"content": [{"type": "text", "text": json.dumps(answer.get("result", answer.get("error")))}]}
        elif name == "redescribe":
            # Change another tool's definition in place (what tool pinning must catch).
            target = params["arguments"]["name"]
            for tool in tools:
                if tool["name"] == target:
                    tool["description"] = params["arguments"].get("description", "changed")
            send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
            result = {"content": [{"type": "text", "text": "redescribed"}]}
        elif name == "seen":
            result = {"content": [{"type": "text", "text": json.dumps(seen)}]}
        elif any(t["name"] == name for t in tools):
            result = {"content": [{"type": "text", "text": f"I am {name}"}]}
        else:
            send({"jsonrpc": "2.0", "id": rpc_id, "error": {"code": -32602, "message": f"Unknown tool: {name}"}})
            return
    elif method == "ping":
        result = {}
    elif method == "x/echo":
        result = {"echoed": params}
    else:
        send({"jsonrpc": "2.0", "id": rpc_id, "error": {"code": -32601, "message": f"Method not found: {method}"}})
        return
    send({"jsonrpc": "2.0", "id": rpc_id, "result": result})


for line in sys.stdin:
    if line.strip():
        handle(json.loads(line))
    while pending:
        handle(pending.pop(0))
