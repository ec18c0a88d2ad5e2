"""An MGP server that streams (MGP_COMMUNICATION.md §12), over stdio as raw JSON lines, for tests.

It declares MGP 0.8 with ``streaming`` at ``capabilities.mgp``. Its tool ``generate {n, delay_s}``
sends ``n`` ``notifications/mgp.stream.chunk`` (``"part<i> "``), one every ``delay_s``, when the call
asks for a stream (``_mgp.stream: true``), and answers with the whole text and its own
``_mgp: {streamed, chunks_sent}``; without the flag it answers only at the end. A call is stopped by
``mgp/stream/cancel`` (answered with the text sent so far as ``partial_result``) or by
``notifications/cancelled``. ``pace`` sets a pause between chunks from ``notifications/mgp.stream.pace``.
Its tool ``received`` returns every method it got and the params of every ``tools/call``.
``python -m tests.e2e.backends.mgp_stream_server``
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

TOOLS = [
    {
        "name": "generate",
        "description": "Stream n parts of text, one every delay_s seconds",
        "inputSchema": {
            "type": "object",
            "properties": {"n": {"type": "integer"}, "delay_s": {"type": "number"}},
        },
    },
    {"name": "received", "description": "What this server received", "inputSchema": {"type": "object"}},
]


class Server:
    def __init__(self) -> None:
        self.methods: list[str] = []
        self.calls: list[dict[str, Any]] = []
        self.paces: list[dict[str, Any]] = []
        self.running: dict[Any, asyncio.Task[None]] = {}
        self.sent: dict[Any, list[str]] = {}

    def write(self, message: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()

    def answer(self, rpc_id: Any, result: Any) -> None:
        self.write({"jsonrpc": "2.0", "id": rpc_id, "result": result})

    def handle(self, message: dict[str, Any]) -> None:
        method = message.get("method")
        if not isinstance(method, str):
            return  # an answer to a request of ours: none are made
        self.methods.append(method)
        params = message.get("params") or {}
        rpc_id = message.get("id")
        if method == "initialize":
            self.answer(
                rpc_id,
                {
                    "protocolVersion": params.get("protocolVersion"),
                    "capabilities": {
                        "tools": {},
                        "mgp": {"version": "0.8.0", "extensions": ["streaming", "progress"], "server_id": "streamer"},
                    },
                    "serverInfo": {"name": "mgp-stream-test", "version": "1"},
                },
            )
        elif method == "tools/list":
            self.answer(rpc_id, {"tools": TOOLS})
        elif method == "tools/call":
            self.calls.append(params)
            if params.get("name") == "received":
                text = json.dumps({"methods": self.methods, "calls": self.calls, "paces": self.paces})
                self.answer(rpc_id, {"content": [{"type": "text", "text": text}]})
            else:
                self.running[rpc_id] = asyncio.ensure_future(self.generate(rpc_id, params))
        elif method == "mgp/stream/cancel":
            target = params.get("request_id")
            task = self.running.pop(target, None)
            if task is not None:
                task.cancel()
            partial = {"content": [{"type": "text", "text": "".join(self.sent.get(target, []))}]}
            self.answer(rpc_id, {"cancelled": task is not None, "partial_result": partial})
        elif method == "notifications/cancelled":
            task = self.running.pop(params.get("requestId"), None)
            if task is not None:
                task.cancel()
        elif method == "notifications/mgp.stream.pace":
            self.paces.append(params)
        elif rpc_id is not None:
            self.write({"jsonrpc": "2.0", "id": rpc_id, "error": {"code": -32601, "message": f"no {method}"}})

    async def generate(self, rpc_id: Any, params: dict[str, Any]) -> None:
        args = params.get("arguments") or {}
        n, delay = int(args.get("n", 3)), float(args.get("delay_s", 0.01))
        mgp = params.get("_mgp")
        stream = isinstance(mgp, dict) and mgp.get("stream") is True
        parts = self.sent.setdefault(rpc_id, [])
        try:
            for i in range(n):
                await asyncio.sleep(delay)
                part = f"part{i} "
                parts.append(part)
                if stream:
                    chunk = {"request_id": rpc_id, "index": i, "content": {"type": "text", "text": part}}
                    self.write(
                        {
                            "jsonrpc": "2.0",
                            "method": "notifications/mgp.stream.chunk",
                            "params": {**chunk, "done": i == n - 1},
                        }
                    )
        except asyncio.CancelledError:
            self.write({"jsonrpc": "2.0", "id": rpc_id, "error": {"code": -32800, "message": "cancelled"}})
            return
        self.running.pop(rpc_id, None)
        result: dict[str, Any] = {"content": [{"type": "text", "text": "".join(parts)}]}
        if stream:
            result["_mgp"] = {"streamed": True, "chunks_sent": n}
        self.answer(rpc_id, result)


async def main() -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 24)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    server = Server()
    while line := await reader.readline():
        if line.strip():
            server.handle(json.loads(line))


if __name__ == "__main__":
    asyncio.run(main())
