"""Process CPU per tools/call spent in the router alone (no HTTP, no sockets), for A/B comparisons.

The wrk benchmark shares two cores with its load generator and backend and swings ±20 % or more
on a noisy VM; this measures the one thing a change to routing or policy code affects, in-process,
against the builtin demo backend. Run: ``.venv/bin/python bench/router_cpu.py [--calls N] [--samples K]``.
It prints every sample and the best one (the least disturbed by the machine).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gateway import jsonrpc
from gateway.config import Config
from gateway.core import Gateway
from policies.auth import Credentials
from tests.support import initialize_request

CALL = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "hi"}}}
INIT = initialize_request(0, client="bench")


async def measure(calls: int, samples: int, warmup: int) -> list[float]:
    gateway = Gateway(Config.model_validate({"backends": {"demo": {"transport": "builtin"}}}))
    await gateway.start()
    try:
        if not await gateway.connections["demo"].wait_ready(10):
            raise SystemExit("the demo backend did not start")
        session = gateway.open_session("bench", gateway.federated, Credentials("anonymous", "anonymous"))
        router = gateway.router
        await router.handle(session, INIT, jsonrpc.Shape.REQUEST, session.standalone)
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        await router.handle(session, initialized, jsonrpc.Shape.NOTIFICATION, session.standalone)
        for _ in range(warmup):
            await router.handle(session, CALL, jsonrpc.Shape.REQUEST, session.standalone)
        results = []
        for _ in range(samples):
            started = time.process_time()
            for _ in range(calls):
                await router.handle(session, CALL, jsonrpc.Shape.REQUEST, session.standalone)
            results.append((time.process_time() - started) / calls * 1e6)
        return results
    finally:
        await gateway.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=10_000, help="calls per sample")
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2_000)
    args = parser.parse_args()
    results = asyncio.run(measure(args.calls, args.samples, args.warmup))
    print("router CPU µs/call:", " ".join(f"{r:.1f}" for r in results), f"(best {min(results):.1f})")


if __name__ == "__main__":
    main()
