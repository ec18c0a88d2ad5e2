"""An MGP 0.3 server over stdio (raw JSON lines), written from the spec and WIRE.md, for tests.

It declares MGP the way Python-SDK-based servers must (``capabilities.experimental.mgp``) with
``permissions_required``, takes the kernel's ``mgp/permission/grant``, and records every message it
receives in order. Its tool ``handshake_log`` returns that record and the grants it holds, so a test
can check the real kernel's shape: grants after the initialize result and before
``notifications/initialized``. ``python -m tests.e2e.backends.mgp_server [PERMISSION ...]``
"""

from __future__ import annotations

import json
import sys
from typing import Any

# Arguments: the permissions to require (default two); "--none" requires none.
PERMISSIONS = [] if sys.argv[1:] == ["--none"] else (sys.argv[1:] or ["shell.execute", "filesystem.read"])
TOOLS = [
    {
        "name": "handshake_log",
        "description": "What this server received, in order, and the grants it holds",
        "inputSchema": {"type": "object", "properties": {}},
        "security": {"risk_level": "safe", "permissions_required": [], "side_effects": []},
    }
]


def main() -> None:
    received: list[str] = []
    grants: dict[str, Any] = {}
    offered: dict[str, Any] = {}
    for line in sys.stdin:
        if not line.strip():
            continue
        message = json.loads(line)
        method = message.get("method")
        received.append(method if isinstance(method, str) else "(response)")
        if "id" not in message or method is None:
            continue
        result: Any
        if method == "initialize":
            offered = (message.get("params") or {}).get("capabilities", {}).get("mgp") or {}
            result = {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {
                    "tools": {},
                    "experimental": {
                        "mgp": {
                            "version": "0.3.0",
                            "extensions": ["security", "audit"],
                            "permissions_required": PERMISSIONS,
                            "server_id": "mgp-test",
                        }
                    },
                },
                "serverInfo": {"name": "mgp-test", "version": "1"},
            }
        elif method == "mgp/permission/grant":
            grants = (message.get("params") or {}).get("grants") or {}
            result = {"acknowledged": True}
        elif method == "tools/list":
            result = {"tools": TOOLS}
        elif method == "tools/call":
            text = json.dumps({"received": received, "grants": grants, "offered": offered})
            result = {"content": [{"type": "text", "text": text}]}
        elif method == "ping":
            result = {}
        else:
            reply = {"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32601, "message": "Method not found"}}
            print(json.dumps(reply), flush=True)
            continue
        print(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}), flush=True)


if __name__ == "__main__":
    main()
