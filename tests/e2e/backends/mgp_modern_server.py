"""An MGP 0.8 server of the MCP 2026-07-28 era over stdio (raw JSON lines), written from the spec, for
tests.

Modern era: it refuses ``initialize`` (there is none) and answers ``server/discover`` with the MGP
object under ``capabilities.extensions["dev.cloto/mgp"]`` (MGP_SECURITY.md §2.6), requiring
``permissions_required``. It takes ``mgp/permission/grant`` (§3.8 rule 1) but, being stateless,
trusts only the grants each request carries in ``_meta["dev.cloto/mgp/grants"]`` (§3.8 rule 3). It
records every request it receives (method and ``_meta``); its tool ``received`` returns that record.
``python -m tests.e2e.backends.mgp_modern_server [PERMISSION ...]``
"""

from __future__ import annotations

import json
import sys
from typing import Any

PERMISSIONS = sys.argv[1:] or ["filesystem.read", "shell.execute"]
TOOLS = [
    {
        "name": "received",
        "description": "Every request this server received, with its _meta",
        "inputSchema": {"type": "object", "properties": {}},
    }
]
MGP = {"version": "0.8.0", "extensions": ["permissions", "tool_security"], "permissions_required": PERMISSIONS}


def _answer(rpc_id: Any, result: dict[str, Any]) -> None:
    print(json.dumps({"jsonrpc": "2.0", "id": rpc_id, "result": {**result, "resultType": "complete"}}), flush=True)


def _error(rpc_id: Any, code: int, message: str) -> None:
    print(json.dumps({"jsonrpc": "2.0", "id": rpc_id, "error": {"code": code, "message": message}}), flush=True)


def main() -> None:
    received: list[dict[str, Any]] = []
    for line in sys.stdin:
        if not line.strip():
            continue
        message = json.loads(line)
        method = message.get("method")
        if "id" not in message or not isinstance(method, str):
            continue  # notifications and responses
        params = message.get("params") or {}
        received.append({"method": method, "meta": params.get("_meta") or {}, "params": params})
        rpc_id = message["id"]
        if method == "server/discover":
            _answer(
                rpc_id,
                {
                    "supportedVersions": ["2026-07-28"],
                    "capabilities": {"tools": {}, "extensions": {"dev.cloto/mgp": MGP}},
                    "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "mgp-modern", "version": "1"}},
                },
            )
        elif method == "mgp/permission/grant":
            _answer(rpc_id, {"acknowledged": True})
        elif method == "tools/list":
            _answer(rpc_id, {"tools": TOOLS})
        elif method == "tools/call":
            text = json.dumps({"received": received})
            _answer(rpc_id, {"content": [{"type": "text", "text": text}]})
        else:
            _error(rpc_id, -32601, f"Method not found: {method}")


if __name__ == "__main__":
    main()
