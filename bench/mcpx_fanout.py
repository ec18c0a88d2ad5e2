"""MCPx topic fan-out: envelopes delivered per second and delivery latency, with N participants.

Starts a real gateway process (static tokens, a generous rate limit), joins N ``websockets``
participants to one topic, and has them take turns broadcasting chat envelopes stamped with the
send time. Every other participant receives each one, so one send is N - 1 deliveries. Latency is
measured from the sender's stamp to each receipt (same host, same clock).

    .venv/bin/python bench/mcpx_fanout.py                 # 10 and 50 participants
    .venv/bin/python bench/mcpx_fanout.py --participants 10 --messages 2000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from websockets.asyncio.client import ClientConnection, connect

from tests.support import run_gateway

TOPIC = "bench"


def gateway_config(participants: int) -> dict[str, object]:
    tokens = {f"p{i}": {"tokens": [f"token-{i}"], "capabilities": ["chat"]} for i in range(participants)}
    return {
        "backends": {},
        "auth": {},
        "principals": tokens,
        "limits": {"session_queue": 100_000},
        "mcpx": {"rate_per_participant": {"messages_per_s": 1_000_000, "burst": 1_000_000}},
        "log_level": "warning",
    }


async def run(base: str, participants: int, messages: int, window: int) -> dict[str, float]:
    url = f"{base.replace('http', 'ws', 1)}/ws?topic={TOPIC}"
    sockets: list[ClientConnection] = []
    for i in range(participants):
        ws = await asyncio.wait_for(connect(url, additional_headers={"Authorization": f"Bearer token-{i}"}), 10)
        sockets.append(ws)
    # Each participant first sees its welcome and the joins after it.
    for i, ws in enumerate(sockets):
        for _ in range(1 + participants - 1 - i):
            await asyncio.wait_for(ws.recv(), 10)

    expected = messages * (participants - 1)
    latencies: list[float] = []
    done = asyncio.Event()
    # Bounded in flight: a sender waits while more than `window` broadcasts are undelivered.
    credit = asyncio.Semaphore(window)
    received: dict[str, int] = {}

    async def reader(ws: ClientConnection) -> None:
        async for frame in ws:
            env = json.loads(frame)
            if env["kind"] != "chat":
                continue
            latencies.append(time.perf_counter() - env["payload"]["t"])
            count = received.get(env["id"], 0) + 1
            received[env["id"]] = count
            if count == participants - 1:
                credit.release()
            if len(latencies) >= expected:
                done.set()

    readers = [asyncio.create_task(reader(ws)) for ws in sockets]
    started = time.perf_counter()
    for n in range(messages):
        await credit.acquire()
        i = n % participants
        env = {
            "protocol": "mcpx/v0.1",
            "id": str(uuid.uuid4()),
            "ts": "2025-01-01T00:00:00Z",
            "from": f"p{i}",
            "kind": "chat",
            "payload": {"text": "x", "t": time.perf_counter()},
        }
        await sockets[i].send(json.dumps(env))
    await asyncio.wait_for(done.wait(), 120)
    elapsed = time.perf_counter() - started
    for task in readers:
        task.cancel()
    await asyncio.gather(*(ws.close() for ws in sockets), return_exceptions=True)
    latencies.sort()
    return {
        "participants": participants,
        "envelopes_sent": messages,
        "deliveries": len(latencies),
        "deliveries_per_s": len(latencies) / elapsed,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--participants", type=int, nargs="*", default=[10, 50])
    parser.add_argument("--messages", type=int, default=1000, help="broadcasts per run")
    parser.add_argument("--window", type=int, default=32, help="broadcasts in flight at most")
    args = parser.parse_args()
    for n in args.participants:
        with run_gateway(gateway_config(n)) as gw:
            result = asyncio.run(run(gw.url, n, args.messages, args.window))
        print(
            f"{n:>3} participants: {result['deliveries_per_s']:>9.0f} deliveries/s "
            f"({result['envelopes_sent']} broadcasts, {result['deliveries']} deliveries), "
            f"p50 {result['p50_ms']:.2f} ms, p99 {result['p99_ms']:.2f} ms"
        )


if __name__ == "__main__":
    main()
