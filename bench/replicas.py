"""The added latency of a legacy session's request that lands on a replica other than the one that
opened it (issue 14): two gateway processes on one real Redis, the fast echo backend over HTTP.

Run: ``.venv/bin/python bench/replicas.py [--calls N]`` (``make bench-replicas``). One session is
opened on replica A; then ``tools/call`` round trips are timed sent straight to A (its creator), to
B (a copy restored from Redis, kept fresh by the bus), and alternating A/B (what a round-robin
balancer does), one at a time, after a warm-up. Prints p50/p99 in ms for each.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support import http_server, redis_server, run_gateway

HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


async def timed(http: httpx.AsyncClient, urls: list[str], headers: dict[str, str], calls: int) -> list[float]:
    out = []
    for n in range(calls):
        body = {
            "jsonrpc": "2.0",
            "id": n,
            "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "hi"}},
        }
        started = time.perf_counter()
        response = await http.post(urls[n % len(urls)], json=body, headers=headers)
        out.append((time.perf_counter() - started) * 1000)
        if response.status_code != 200 or "result" not in response.json():
            raise SystemExit(f"call failed: {response.status_code} {response.text[:200]}")
    return out


def summary(label: str, samples: list[float]) -> str:
    samples = sorted(samples)
    p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))]
    return f"| {label} | {statistics.median(samples):.3f} | {p99:.3f} |"


async def measure(a: str, b: str, calls: int) -> list[str]:
    init = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "bench", "version": "1"},
        },
    }
    async with httpx.AsyncClient(timeout=10) as http:
        opened = await http.post(a, json=init, headers=HEADERS)
        headers = {**HEADERS, "mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-06-18"}
        await http.post(a, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
        await timed(http, [a, b], headers, 200)  # warm-up, and B restores its copy
        rows = [
            summary("on the replica that opened it", await timed(http, [a], headers, calls)),
            summary("on another replica", await timed(http, [b], headers, calls)),
            summary("alternating (round robin)", await timed(http, [a, b], headers, calls)),
        ]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    root = Path(__file__).resolve().parent.parent
    echo = [sys.executable, str(root / "bench" / "echo_backend.py")]
    with redis_server() as (redis_url, _), http_server(lambda port: [*echo, "--port", str(port)]) as backend:
        config = {
            "bus": {"kind": "redis", "url": redis_url},
            "backends": {"echo": {"transport": "http", "url": backend}},
        }
        with run_gateway(config) as first, run_gateway(config) as second:
            rows = asyncio.run(measure(first.mcp, second.mcp, args.calls))
    print(f"{args.calls} sequential tools/call, one legacy session, {os.cpu_count()} cores")
    print("| where the request lands | p50 ms | p99 ms |\n|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
