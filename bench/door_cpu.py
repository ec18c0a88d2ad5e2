"""Process CPU per tools/call through the whole /mcp door, in-process, for A/B comparisons (issue 15).

`bench/router_cpu.py` measures the router alone against the builtin backend. This drives the real
app (``build_app``: the Host/Origin guard, the Streamable HTTP door, both eras, the router, the
gateway's own HTTP client) with ASGI messages, in front of ``bench/echo_backend.py`` over real
loopback HTTP. Only the server side of the client's HTTP (uvicorn, the client's socket) is left out,
so a change to anything the gateway's own code does per call shows here, steadier than wrk on a
shared 2-core VM. The scope carries the gateway protocol's disconnect watcher and registry of held
tasks, as under uvicorn.

Run: ``.venv/bin/python bench/door_cpu.py [--calls N] [--samples K] [--concurrency C] [--era legacy|modern|both]
[--answers json|sse]`` (``sse``: the backend answers with SSE streams, as the official SDKs do).
Prints every sample and the best one (the least disturbed by the machine), in µs of this process's
CPU per call; the backend's CPU is not counted.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import orjson

from gateway.app import FastPath, build_app
from gateway.config import Config
from gateway.core import Gateway
from gateway.transports.coalesce import HOLD_KEY, LOST_KEY, CoalescingTransport
from tests.support import http_server, initialize_request, modern_meta

BENCH = Path(__file__).resolve().parent
JSON_HEADERS = [(b"content-type", b"application/json"), (b"accept", b"application/json, text/event-stream")]


class Exchange:
    """One ASGI request: the body once, then nothing until the request ends (a client that waits)."""

    def __init__(self, body: bytes) -> None:
        self._body: bytes | None = body
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.chunks: list[bytes] = []

    async def receive(self) -> dict[str, Any]:
        body, self._body = self._body, None
        if body is None:
            await asyncio.Event().wait()  # never: the client does not leave
        return {"type": "http.request", "body": body or b"", "more_body": False}

    async def send(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            self.headers = list(message.get("headers") or [])
        else:
            self.chunks.append(message.get("body", b""))


_connections: dict[asyncio.AbstractEventLoop, CoalescingTransport] = {}


def scope(headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    # One client connection's registry of held tasks (what the 2026-07-28 wire's cancel-on-disconnect
    # uses under the gateway's protocol), shared by every request as a kept-alive connection's is.
    connection = _connections.get(loop)
    if connection is None:
        connection = _connections[loop] = CoalescingTransport(None, loop)  # type: ignore[arg-type]  # never written to
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/mcp",
        "raw_path": b"/mcp",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1:8080"), *headers],
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8080),
        LOST_KEY: loop.create_future,
        HOLD_KEY: connection,
    }


async def post(app: FastPath, headers: list[tuple[bytes, bytes]], message: dict[str, Any]) -> Exchange:
    exchange = Exchange(orjson.dumps(message))
    await app(scope(headers), exchange.receive, exchange.send)
    return exchange


def call(rpc_id: int, meta: dict[str, Any] | None) -> dict[str, Any]:
    params: dict[str, Any] = {"name": "echo", "arguments": {"text": "bench"}}
    if meta is not None:
        params["_meta"] = meta
    return {"jsonrpc": "2.0", "id": rpc_id, "method": "tools/call", "params": params}


async def measure(url: str, era: str, calls: int, samples: int, concurrency: int) -> list[float]:
    gateway = Gateway(Config.model_validate({"backends": {"echo": {"transport": "http", "url": url}}}))
    app = build_app(gateway.config, gateway)
    await gateway.start()
    try:
        if not await gateway.connections["echo"].wait_ready(10):
            raise SystemExit("the echo backend did not become ready")
        if era == "legacy":
            init = await post(app, JSON_HEADERS, initialize_request(0, client="bench"))
            session_id = dict(init.headers)[b"mcp-session-id"]
            headers = [*JSON_HEADERS, (b"mcp-session-id", session_id), (b"mcp-protocol-version", b"2025-11-25")]
            await post(app, headers, {"jsonrpc": "2.0", "method": "notifications/initialized"})
            meta = None
        else:
            headers = [
                *JSON_HEADERS,
                (b"mcp-protocol-version", b"2026-07-28"),
                (b"mcp-method", b"tools/call"),
                (b"mcp-name", b"echo"),
            ]
            meta = modern_meta("bench")
        ids = itertools.count(1)

        async def worker(count: int) -> None:
            for _ in range(count):
                answer = await post(app, headers, call(next(ids), meta))
                if answer.status != 200 or b'"bench"' not in b"".join(answer.chunks):
                    raise SystemExit(f"a call failed: HTTP {answer.status} {b''.join(answer.chunks)[:300]!r}")

        async def batch(total: int) -> None:
            async with asyncio.TaskGroup() as group:
                for _ in range(concurrency):
                    group.create_task(worker(total // concurrency))

        await batch(min(2_000, calls))  # warm-up: caches, connection pool, JIT-free but allocator-warm
        results = []
        for _ in range(samples):
            started = time.process_time()
            await batch(calls)
            results.append((time.process_time() - started) / (calls // concurrency * concurrency) * 1e6)
        return results
    finally:
        await gateway.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5_000, help="calls per sample")
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=16, help="calls in flight at once")
    parser.add_argument("--era", choices=["legacy", "modern", "both"], default="both")
    parser.add_argument(
        "--answers",
        choices=["json", "sse"],
        default="json",
        help="how the backend answers: JSON (echo_backend.py) or an SSE stream, as the SDKs do (sse_echo_backend.py)",
    )
    args = parser.parse_args()
    import uvloop

    from gateway.collector import tune_collector

    tune_collector()
    eras = ["legacy", "modern"] if args.era == "both" else [args.era]
    script = "sse_echo_backend.py" if args.answers == "sse" else "echo_backend.py"
    argv = [sys.executable, str(BENCH / script), "--host", "127.0.0.1", "--port"]
    with http_server(lambda port: [*argv, str(port)]) as url:
        for era in eras:
            best = uvloop.run(_best(url, era, args))
            print(f"{era}: best {best:.1f} µs/call")


async def _best(url: str, era: str, args: argparse.Namespace) -> float:
    results = await measure(url, era, args.calls, args.samples, args.concurrency)
    print(f"{era}: " + " ".join(f"{r:.1f}" for r in results))
    return min(results)


if __name__ == "__main__":
    main()
