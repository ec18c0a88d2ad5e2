"""Exactly N ``tools/call`` round trips over C kept-alive connections, raw HTTP/1.1 (for ``gateway_ir.sh``).

wrk runs for a duration; an instruction count per call needs a known number of calls. This client
sends them, checks each answer for the echoed text, and exits 1 if any answer was wrong. Legacy:
one ``initialize`` + ``notifications/initialized`` first, then every call on that session;
modern: stateless 2026-07-28 requests (the ``_meta`` envelope and the routing headers).

Run: ``python bench/fixed_calls.py PORT N [--connections C] [--era legacy|modern]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

_MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "fixed-calls", "version": "1"},
}


def _request(body: bytes, headers: dict[str, str]) -> bytes:
    head = [
        "POST /mcp HTTP/1.1",
        "Host: 127.0.0.1",
        "Content-Type: application/json",
        "Accept: application/json, text/event-stream",
        f"Content-Length: {len(body)}",
        *(f"{k}: {v}" for k, v in headers.items()),
    ]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


async def _answer(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    async with asyncio.timeout(60):  # under valgrind a call takes milliseconds, not minutes
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        return head, await reader.readexactly(length)


async def _session(port: int) -> dict[str, str]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        params = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "b", "version": "1"}}
        init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}
        writer.write(_request(json.dumps(init).encode(), {"MCP-Protocol-Version": "2025-11-25"}))
        head, _ = await _answer(reader)
        lines = head.split(b"\r\n")
        [sid] = [line.split(b": ")[1].decode() for line in lines if line.lower().startswith(b"mcp-session-id")]
        headers = {"Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25"}
        writer.write(_request(b'{"jsonrpc":"2.0","method":"notifications/initialized"}', headers))
        async with asyncio.timeout(60):
            await reader.readuntil(b"\r\n\r\n")
        return headers
    finally:
        writer.close()


async def run(port: int, calls: int, connections: int, era: str) -> int:
    if era == "legacy":
        headers = await _session(port)
    else:
        headers = {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "echo"}
    left, wrong = [calls], [0]

    async def one(index: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while left[0] > 0:
                left[0] -= 1
                params: dict[str, object] = {"name": "echo", "arguments": {"text": "bench"}}
                if era == "modern":
                    params["_meta"] = _MODERN_META
                call = {"jsonrpc": "2.0", "method": "tools/call", "params": params, "id": index * 10**9 + left[0]}
                writer.write(_request(json.dumps(call).encode(), headers))
                _, body = await _answer(reader)
                wrong[0] += b'"bench"' not in body or b'"error"' in body
        finally:
            writer.close()

    await asyncio.gather(*(one(i) for i in range(connections)))
    if wrong[0]:
        print(f"{wrong[0]} wrong answers", file=sys.stderr)
    return 1 if wrong[0] else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("port", type=int)
    parser.add_argument("calls", type=int)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--era", choices=("legacy", "modern"), default="legacy")
    args = parser.parse_args()
    return asyncio.run(run(args.port, args.calls, args.connections, args.era))


if __name__ == "__main__":
    sys.exit(main())
