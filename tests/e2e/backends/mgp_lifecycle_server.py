"""An MGP 0.3 server over stdio (raw JSON lines) that speaks the ``lifecycle`` extension (§11), for tests.

It declares ``capabilities.experimental.mgp`` with ``extensions: ["lifecycle"]`` and answers
``mgp/health/ping``, ``mgp/health/status`` and ``mgp/lifecycle/shutdown`` as §11.3-11.4 show. Tools:

  pid       its process id, and the methods it received so far, in order (JSON text)
  die       exits at once (code 3) without answering
  announce  sends ``notifications/mgp.lifecycle`` with ``new_state`` = arguments.state, then answers

Environment: ``MGP_LIFECYCLE_LOG``, a file to append each received method to (one per line).
``python -m tests.e2e.backends.mgp_lifecycle_server``
"""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import UTC, datetime
from typing import Any

STARTED = time.monotonic()
TOOLS = [
    {"name": name, "description": text, "inputSchema": {"type": "object", "properties": {}}}
    for name, text in (
        ("pid", "This process's id and what it received."),
        ("die", "Exits without answering."),
        ("announce", "Announces a lifecycle state of its own."),
    )
]


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def write(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def call(name: object, arguments: dict[str, Any], received: list[str]) -> dict[str, Any]:
    if name == "die":
        os._exit(3)
    if name == "announce":
        state = arguments.get("state", "draining")
        params = {"server_id": "mgp-life", "previous_state": "connected", "new_state": state, "reason": "self_test"}
        write({"jsonrpc": "2.0", "method": "notifications/mgp.lifecycle", "params": {**params, "timestamp": now()}})
        return {"content": [{"type": "text", "text": f"announced {state}"}]}
    text = json.dumps({"pid": os.getpid(), "received": received})
    return {"content": [{"type": "text", "text": text}]}


def answer(method: str, params: dict[str, Any], received: list[str]) -> dict[str, Any] | None:
    uptime = int(time.monotonic() - STARTED)
    if method == "initialize":
        mgp = {"version": "0.3.0", "extensions": ["lifecycle"], "server_id": "mgp-life"}
        return {
            "protocolVersion": params["protocolVersion"],
            "capabilities": {"tools": {}, "experimental": {"mgp": mgp}},
            "serverInfo": {"name": "mgp-life", "version": "1"},
        }
    if method == "mgp/health/ping":
        return {"status": "healthy", "timestamp": now(), "uptime_secs": uptime, "server_id": "mgp-life"}
    if method == "mgp/health/status":
        return {
            "status": "healthy",
            "uptime_secs": uptime,
            "tools_available": len(TOOLS),
            "tools_total": len(TOOLS),
            "pending_requests": 0,
            "resources": {"pid": os.getpid()},
            "checks": {"self_test": True},
        }
    if method == "mgp/lifecycle/shutdown":
        return {"accepted": True, "pending_requests": 0, "estimated_drain_ms": 0}
    if method == "tools/list":
        return {"tools": TOOLS}
    if method == "tools/call":
        arguments = params.get("arguments")
        return call(params.get("name"), arguments if isinstance(arguments, dict) else {}, received)
    if method in ("ping", "mgp/permission/grant"):
        return {}
    return None


def main() -> None:
    received: list[str] = []
    for line in sys.stdin:
        if not line.strip():
            continue
        message = json.loads(line)
        method = message.get("method")
        received.append(method if isinstance(method, str) else "(response)")
        if os.environ.get("MGP_LIFECYCLE_LOG"):
            with open(os.environ["MGP_LIFECYCLE_LOG"], "a", encoding="utf-8") as log:
                log.write(received[-1] + "\n")
        if "id" not in message or not isinstance(method, str):
            continue
        params = message.get("params")
        result = answer(method, params if isinstance(params, dict) else {}, received)
        if result is None:
            error = {"code": -32601, "message": "Method not found"}
            write({"jsonrpc": "2.0", "id": message["id"], "error": error})
        else:
            write({"jsonrpc": "2.0", "id": message["id"], "result": result})


if __name__ == "__main__":
    main()
