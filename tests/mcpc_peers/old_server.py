"""An MCPC server of our own for the *older* wire (before ``mcpc`` 0.2.5), raw JSON lines over stdio.

Written from shared/notes/WIRE.md "MCPC", standard library only (any python runs it)::

    python tests/mcpc_peers/old_server.py [--version 0.2.4|0.2.2] [--name N]

- Handshake tool: ``_is_mcpc_enabled`` (0.2.3-0.2.4, argument ``{"mcpc_info": {...}}``) or
  ``is_mcpc_enabled`` (<= 0.2.2, argument ``{}``), by ``--version``; it is listed, as old servers
  did. The reply is ``{"mcpc_enabled":true,"mcpc_version":V,"mcpc_provider":N}``. Any other
  handshake name (``_mcpc_init`` included) is an unknown tool: an ``isError`` result.
- Per-call metadata: ``_metadata: {mcpc_session_id, mcpc_task_id}`` (declared in the schemas).
- After the handshake, ``slow_task {steps, delay_s}`` and ``fails {delay_s}`` answer ``created`` at
  once and send ``update`` / ``complete`` / ``failed`` as unsolicited ``"MCPC_CALLBACK"`` responses
  on stdout; ``emit_event {event, result}`` sends a ``server_event`` callback.
- ``hang {}`` answers ``created`` and then never sends anything more about the task; ``crash {}``
  answers ``created`` and exits the process about 0.2 s later (exit code 1), the task unfinished.
  Both do so with or without the handshake (for tests of the gateway's bounds).
- Without the handshake (the fallback), a task runs to its end inside the call and the result holds
  every message (``created`` .. ``complete``/``failed``) as one text block each.
- ``sync_echo {text}`` is an ordinary tool. ``initialize``, ``ping`` and ``tools/list`` are answered;
  notifications are ignored; other requests get -32601.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import threading
import time
import uuid
from typing import Any

CALLBACK_ID = "MCPC_CALLBACK"
_write_lock = threading.Lock()


def send(obj: dict[str, Any]) -> None:
    line = json.dumps(obj, separators=(",", ":")) + "\n"
    with _write_lock:
        sys.stdout.write(line)
        sys.stdout.flush()


def message(
    kind: str, event: str, session_id: str, task_id: str | None, tool: str | None, result: Any
) -> dict[str, Any]:
    return {
        "type": kind,
        "event": event,
        "session_id": session_id,
        "task_id": task_id,
        "tool_name": tool,
        "result": result,
        "protocol": "mcpc",
    }


def text_result(*texts: str, is_error: bool = False) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text} for text in texts], "isError": is_error}


def callback(msg: dict[str, Any]) -> None:
    block = {"type": "text", "text": json.dumps(msg, separators=(",", ":")), "annotations": None}
    send({"jsonrpc": "2.0", "id": CALLBACK_ID, "result": {"content": [block], "isError": False}})


class OldServer:
    def __init__(self, name: str, version: str) -> None:
        self.name = name
        self.version = version
        numbers = tuple(int(part) for part in re.findall(r"\d+", version)[:3])
        self.handshake_tool = "is_mcpc_enabled" if numbers < (0, 2, 3) else "_is_mcpc_enabled"
        self.mcpc_client = False

    def tools(self) -> list[dict[str, Any]]:
        metadata = {"type": "object", "properties": {"mcpc_session_id": {}, "mcpc_task_id": {}}}

        def schema(**props: Any) -> dict[str, Any]:
            return {"type": "object", "properties": {**props, "_metadata": metadata}}

        number = {"type": "number"}
        return [
            {"name": self.handshake_tool, "description": "MCPC handshake", "inputSchema": {"type": "object"}},
            {"name": "slow_task", "inputSchema": schema(steps={"type": "integer"}, delay_s=number)},
            {"name": "fails", "inputSchema": schema(delay_s=number)},
            {"name": "sync_echo", "inputSchema": schema(text={"type": "string"})},
            {"name": "emit_event", "inputSchema": schema(event={"type": "string"}, result={})},
            {"name": "hang", "inputSchema": schema()},
            {"name": "crash", "inputSchema": schema()},
        ]

    def steps(
        self, tool: str, arguments: dict[str, Any], session_id: str, task_id: str
    ) -> list[tuple[float, dict[str, Any]]]:
        """(delay before, message) of a task's run after ``created``."""
        delay = float(arguments.get("delay_s", 0.05))
        if tool == "fails":
            return [
                (0.0, message("task", "update", session_id, task_id, tool, "about to fail")),
                (delay, message("task", "failed", session_id, task_id, tool, "boom")),
            ]
        count = int(arguments.get("steps", 3))
        run = [
            (delay, message("task", "update", session_id, task_id, tool, {"step": i, "of": count}))
            for i in range(1, count + 1)
        ]
        return [*run, (0.0, message("task", "complete", session_id, task_id, tool, {"steps": count}))]

    def call(self, tool: Any, arguments: dict[str, Any]) -> dict[str, Any]:
        metadata = arguments.pop("_metadata", None)
        metadata = metadata if isinstance(metadata, dict) else {}
        session_id = str(metadata.get("mcpc_session_id") or "default")
        task_id = str(metadata.get("mcpc_task_id") or uuid.uuid4())
        if tool == self.handshake_tool:
            self.mcpc_client = True
            info = {"mcpc_enabled": True, "mcpc_version": self.version, "mcpc_provider": self.name}
            return text_result(json.dumps(info, separators=(",", ":")))
        if tool == "sync_echo":
            return text_result(str(arguments.get("text", "")))
        if tool == "emit_event":
            event = str(arguments.get("event") or "notification")
            callback(message("server_event", event, session_id, None, None, arguments.get("result")))
            return text_result("sent")
        if tool not in ("slow_task", "fails", "hang", "crash"):
            return text_result(f"Unknown tool: {tool}", is_error=True)
        created = message("task", "created", session_id, task_id, tool, f"{tool} started")
        if tool in ("hang", "crash"):
            if tool == "crash":
                threading.Timer(0.2, os._exit, (1,)).start()  # after the answer below is written
            return text_result(json.dumps(created, separators=(",", ":")))
        run = self.steps(tool, arguments, session_id, task_id)
        if not self.mcpc_client:  # the fallback: the whole run in the result
            for delay, _ in run:
                time.sleep(delay)
            return text_result(*(json.dumps(m, separators=(",", ":")) for m in [created] + [m for _, m in run]))

        def background() -> None:
            for delay, msg in run:
                time.sleep(delay)
                callback(msg)

        threading.Thread(target=background, daemon=True).start()
        return text_result(json.dumps(created, separators=(",", ":")))

    def handle(self, request: dict[str, Any]) -> dict[str, Any] | None:
        method, params = request.get("method"), request.get("params") or {}
        if "id" not in request:
            return None  # a notification
        if method == "initialize":
            result: dict[str, Any] = {
                "protocolVersion": params.get("protocolVersion", "2024-11-05"),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": self.name, "version": self.version},
            }
        elif method == "ping":
            result = {}
        elif method == "tools/list":
            result = {"tools": self.tools()}
        elif method == "tools/call":
            arguments = params.get("arguments")
            result = self.call(params.get("name"), dict(arguments) if isinstance(arguments, dict) else {})
        else:
            return {"jsonrpc": "2.0", "id": request["id"], "error": {"code": -32601, "message": "Method not found"}}
        return {"jsonrpc": "2.0", "id": request["id"], "result": result}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", default="0.2.4")
    parser.add_argument("--name", default="old-mcpc-peer")
    args = parser.parse_args()
    server = OldServer(args.name, args.version)
    for line in sys.stdin:
        try:
            request = json.loads(line)
        except ValueError:
            send({"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}})
            continue
        if isinstance(request, dict) and "method" in request:
            response = server.handle(request)
            if response is not None:
                send(response)


if __name__ == "__main__":
    main()
