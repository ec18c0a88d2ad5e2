"""MCPL through the gateway: context-hook fan-out latency and the cost of a backend's push/event.

Starts a real gateway process with N MCPL memory servers (the test server in
``tests/e2e/backends/mcpl_server/``, over stdio), connects one WebSocket MCPL host, enables every
feature set, and measures:

* ``context/beforeInference`` round trips from the host, sequential and 16 at a time: each one is
  fanned out to all N backends in parallel and their injections merged;
* a push: the host calls the backend's ``push`` tool, the backend sends ``push/event``, the gateway
  checks and de-duplicates it, the host answers, and the answer travels back. Compared with a
  plain tool call (``remember``) of the same backend, the difference is the push's own cost.

    .venv/bin/python bench/mcpl_hooks.py                  # 1 and 3 backends
    .venv/bin/python bench/mcpl_hooks.py --backends 5 --calls 1000
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.e2e.mcpl_host import McplHost
from tests.support import run_gateway, stdio_backend


def backend(name: str) -> dict[str, Any]:
    return stdio_backend("tests.e2e.backends.mcpl_server", "--role", "memory", "--name", name, required=True)


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def timed(calls: int, concurrency: int, one: Callable[[int], Awaitable[Any]]) -> dict[str, float]:
    latencies: list[float] = []

    async def worker(offset: int) -> None:
        for n in range(offset, calls, concurrency):
            started = time.perf_counter()
            await one(n)
            latencies.append((time.perf_counter() - started) * 1000)

    started = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(concurrency)))
    elapsed = time.perf_counter() - started
    return {
        "per_s": calls / elapsed,
        "p50": statistics.median(latencies),
        "p99": percentile(latencies, 0.99),
    }


async def measure(url: str, names: list[str], calls: int) -> list[tuple[str, dict[str, float]]]:
    async with McplHost.connect(url) as host:
        for name in names:
            await host.call_tool(f"{name}__remember" if len(names) > 1 else "remember", {"text": f"memory of {name}"})
        await host.notify("featureSets/update", {"enabled": ["*"]})
        await asyncio.sleep(0.5)  # the update is a notification; let it reach every backend
        tool = (lambda t: f"{names[0]}__{t}") if len(names) > 1 else (lambda t: t)

        async def hook(n: int) -> None:
            response = await host.request("context/beforeInference", {"inferenceId": f"i{n}", "conversationId": "c"})
            injections = response["result"]["contextInjections"]
            assert len(injections) == len(names), response

        async def push(n: int) -> None:
            answer = await host.call_tool(tool("push"), {"eventId": f"bench-{time.time_ns()}-{n}", "text": "x"})
            assert answer["result"]["accepted"] is True, answer

        async def plain(n: int) -> None:
            await host.call_tool(tool("remember"), {"text": "x"})

        for _ in range(50):  # warm-up
            await hook(0)
        rows = [
            ("beforeInference, sequential", await timed(calls, 1, hook)),
            ("beforeInference, 16 at a time", await timed(calls, 16, hook)),
            ("tools/call remember (baseline)", await timed(calls, 1, plain)),
            ("tools/call push -> push/event -> host", await timed(calls, 1, push)),
        ]
        return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", type=int, nargs="*", default=[1, 3])
    parser.add_argument("--calls", type=int, default=500)
    args = parser.parse_args()
    print("| backends | what | per s | p50 ms | p99 ms |")
    print("|---|---|---|---|---|")
    for count in args.backends:
        names = [f"mem{i}" for i in range(count)]
        config = {"backends": {n: backend(n) for n in names}, "log_level": "warning"}
        with run_gateway(config) as gateway:
            url = gateway.ws()
            for label, row in asyncio.run(measure(url, names, args.calls)):
                print(f"| {count} | {label} | {row['per_s']:,.0f} | {row['p50']:.2f} | {row['p99']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
