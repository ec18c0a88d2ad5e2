"""Process CPU per tools/call spent in the router alone (no HTTP, no sockets), for A/B comparisons.

The wrk benchmark shares two cores with its load generator and backend and swings ±20 % or more
on a noisy VM; this measures the one thing a change to routing or policy code affects, in-process,
against the builtin demo backend. Run: ``.venv/bin/python bench/router_cpu.py [--calls N] [--samples K]``.
It prints every sample and the best one (the least disturbed by the machine). ``--mgp 0.8.0``
makes the session an MGP client of that version (effective security, kernel tools, MGP results).
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


async def measure(calls: int, samples: int, warmup: int, mgp: str | None = None) -> list[float]:
    capabilities = {"mgp": {"version": mgp, "extensions": ["tool_security", "access_control"]}} if mgp else None
    init = initialize_request(0, capabilities=capabilities, client="bench")
    gateway = Gateway(Config.model_validate({"backends": {"demo": {"transport": "builtin"}}}))
    await gateway.start()
    try:
        if not await gateway.connections["demo"].wait_ready(10):
            raise SystemExit("the demo backend did not start")
        session = gateway.open_session("bench", gateway.federated, Credentials("anonymous", "anonymous"))
        router = gateway.router
        await router.handle(session, init, jsonrpc.Shape.REQUEST, session.standalone)
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
    parser.add_argument("--mgp", default=None, help="the session declares this MGP version (e.g. 0.8.0)")
    args = parser.parse_args()
    from gateway.collector import tune_collector

    tune_collector()  # as `switchboard run` does (gateway/collector.py)
    results = asyncio.run(measure(args.calls, args.samples, args.warmup, args.mgp))
    print("router CPU µs/call:", " ".join(f"{r:.1f}" for r in results), f"(best {min(results):.1f})")


if __name__ == "__main__":
    main()
