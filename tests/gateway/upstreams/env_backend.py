"""A small MCP server over stdio that tells whose it is: the proof of per-principal children (issue 17).

    python -m tests.gateway.upstreams.env_backend

Newline-delimited JSON-RPC on stdin/stdout, no SDK (it starts in a few milliseconds). Tools:

- ``whoami``: ``{"pid", "api_key", "principal", "level"}`` as text JSON (``API_KEY`` and
  ``SWITCHBOARD_PRINCIPAL`` from its environment, the last ``logging/setLevel`` it was told, how many
  ``notifications/roots/list_changed`` it received);
- ``only_<principal>``: a tool whose name depends on the child's principal (lists may differ per child);
- ``ask_roots``: asks the client ``roots/list`` (a server->client request, unrelated on stdio) and
  answers with what came back;
- ``say``: sends a log line (``notifications/message``) with the given text, then answers;
- ``ask_later``: answers at once, then 0.3 s later asks the client ``roots/list`` outside any call;
  ``whoami`` then reports that answer as ``later``.

``ENV_BACKEND_DELAY_S`` in its environment delays its start (a slow server).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

PRINCIPAL = os.environ.get("SWITCHBOARD_PRINCIPAL", "")


_WRITE = threading.Lock()  # ask_later writes from a timer thread


def send(message: dict[str, Any]) -> None:
    with _WRITE:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()


def tools() -> list[dict[str, Any]]:
    schema = {"type": "object", "properties": {}}
    names = ["whoami", "ask_roots", "say", "ask_later"] + ([f"only_{PRINCIPAL}"] if PRINCIPAL else [])
    return [{"name": name, "description": name, "inputSchema": schema} for name in names]


def text(rpc_id: Any, value: Any) -> None:
    send({"jsonrpc": "2.0", "id": rpc_id, "result": {"content": [{"type": "text", "text": json.dumps(value)}]}})


def main() -> None:
    time.sleep(float(os.environ.get("ENV_BACKEND_DELAY_S", "0")))
    waiting: dict[str, Any] = {}  # our request id -> the tools/call id that waits for its answer
    asked = 0
    level: str | None = None
    roots_changed = 0
    later: Any = None
    for line in sys.stdin:
        if not line.strip():
            continue
        message = json.loads(line)
        method = message.get("method")
        rpc_id = message.get("id")
        if method is None:
            if rpc_id == "later":
                later = message.get("result", message.get("error"))
                continue
            caller = waiting.pop(str(rpc_id), None)
            if caller is not None:
                text(caller, message.get("result", message.get("error")))
            continue
        if rpc_id is None:
            roots_changed += method == "notifications/roots/list_changed"
            continue  # a notification
        if method == "initialize":
            result = {
                "protocolVersion": message["params"].get("protocolVersion", "2025-06-18"),
                "capabilities": {"tools": {"listChanged": True}, "logging": {}},
                "serverInfo": {"name": "env-backend", "version": "1"},
            }
            send({"jsonrpc": "2.0", "id": rpc_id, "result": result})
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": rpc_id, "result": {"tools": tools()}})
        elif method == "tools/call":
            name = message["params"]["name"]
            if name == "whoami" or name == f"only_{PRINCIPAL}":
                me = {"pid": os.getpid(), "api_key": os.environ.get("API_KEY"), "principal": PRINCIPAL, "level": level}
                me["roots_changed"] = roots_changed
                me["later"] = later
                text(rpc_id, me)
            elif name == "ask_roots":
                asked += 1
                ours = f"roots-{asked}"
                waiting[ours] = rpc_id
                send({"jsonrpc": "2.0", "id": ours, "method": "roots/list"})
            elif name == "ask_later":
                text(rpc_id, "later")
                ask = {"jsonrpc": "2.0", "id": "later", "method": "roots/list"}
                threading.Timer(0.3, send, (ask,)).start()
            elif name == "say":
                params = {"level": "warning", "logger": "env", "data": f"{PRINCIPAL} says hi"}
                send({"jsonrpc": "2.0", "method": "notifications/message", "params": params})
                text(rpc_id, "said")
            else:
                send({"jsonrpc": "2.0", "id": rpc_id, "error": {"code": -32602, "message": f"Unknown tool: {name}"}})
        elif method == "ping" or method == "logging/setLevel":
            if method == "logging/setLevel":
                level = message["params"]["level"]
            send({"jsonrpc": "2.0", "id": rpc_id, "result": {}})
        else:
            send({"jsonrpc": "2.0", "id": rpc_id, "error": {"code": -32601, "message": f"Method not found: {method}"}})


if __name__ == "__main__":
    main()
