"""A stdio MCP backend whose tool list changes at runtime (newline-delimited JSON-RPC, no SDK).

Tool ``grow`` adds a tool named by its ``name`` argument and announces
``notifications/tools/list_changed``; every added tool echoes its own name.
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


def handle(message: dict[str, Any]) -> None:
    method, rpc_id, params = message.get("method"), message.get("id"), message.get("params") or {}
    if rpc_id is None:
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
        elif any(t["name"] == name for t in tools):
            result = {"content": [{"type": "text", "text": f"I am {name}"}]}
        else:
            send({"jsonrpc": "2.0", "id": rpc_id, "error": {"code": -32602, "message": f"Unknown tool: {name}"}})
            return
    elif method == "ping":
        result = {}
    else:
        send({"jsonrpc": "2.0", "id": rpc_id, "error": {"code": -32601, "message": f"Method not found: {method}"}})
        return
    send({"jsonrpc": "2.0", "id": rpc_id, "result": result})


for line in sys.stdin:
    if line.strip():
        handle(json.loads(line))
