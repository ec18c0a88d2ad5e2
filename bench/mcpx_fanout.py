"""MCPx topic fan-out: deliveries per second, per gateway CPU-second, and delivery latency, with N participants.

Starts a real gateway process (static tokens, a generous rate limit), joins N ``websockets``
participants to one topic, and has them all send, in turn, chat envelopes stamped with the send
time (at most ``--window`` broadcasts undelivered at once). Latency is measured from the sender's
stamp to each receipt (same host, same clock). The gateway's CPU time (utime + stime of its process,
from /proc) is read before and after the sends, so "per CPU-s" is deliveries ÷ the CPU seconds the
gateway spent delivering them: the figure that does not depend on the load generator sharing the cores.

``--with-reference`` (the default when node is found) measures the Node reference gateway side by side,
in alternation with Switchboard (``--rounds``): packages/gateway of rjcorwin/mew-protocol at its last
v0.1 commit, built by bench/mcpx_reference/setup.sh into bench/.peers/mew-reference (run here when
missing). Both speak the mcpx/v0.1 envelope; the client adapts to each side without touching either
gateway: the reference wants a JWT from its ``POST /v0.1/auth/token`` (Switchboard: static bearer
tokens) and, since its last v0.1 change, also echoes each envelope to its sender (Switchboard never
does), so a broadcast is N deliveries there and N - 1 here; every frame a gateway delivers counts.
Both are given rate limits and topic sizes that do not bind. Clients do not offer permessage-deflate
(the reference's server never accepts it), so both sides send the same bytes.

    .venv/bin/python bench/mcpx_fanout.py                 # 10 and 50 participants, with the reference
    .venv/bin/python bench/mcpx_fanout.py --participants 50 --messages 4000 --rounds 3
    .venv/bin/python bench/mcpx_fanout.py --no-reference
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx
from websockets.asyncio.client import ClientConnection, connect

from tests.support import run_gateway
from tools.procs import free_port, stop_process, wait_for_http

TOPIC = "bench"
BENCH = Path(__file__).resolve().parent
REFERENCE = BENCH / ".peers" / "mew-reference"
REFERENCE_JS = REFERENCE / "dist" / "index.js"
SETUP = BENCH / "mcpx_reference" / "setup.sh"
CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass(slots=True)
class Side:
    """One gateway under test, as the client sees it."""

    name: str
    ws_url: str
    pid: int
    tokens: list[str]
    echoes_sender: bool  # the reference delivers a broadcast to its sender as well


SideOf = Callable[[int], contextlib.AbstractContextManager[Side]]  # participants -> the running side


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


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime


@contextlib.contextmanager
def switchboard(participants: int) -> Iterator[Side]:
    with run_gateway(gateway_config(participants)) as gw:
        url = f"{gw.url.replace('http', 'ws', 1)}/ws?topic={TOPIC}"
        yield Side("switchboard", url, gw.proc.pid, [f"token-{i}" for i in range(participants)], False)


def ensure_reference() -> None:
    if not REFERENCE_JS.exists() and subprocess.run(["bash", str(SETUP)], check=False).returncode != 0:
        raise SystemExit(f"the reference gateway could not be built ({SETUP} said why above)")


@contextlib.contextmanager
def reference(participants: int) -> Iterator[Side]:
    port = free_port()
    env = {
        **os.environ,
        "PORT": str(port),
        "RATE_LIMIT_MESSAGES": "1000000000",
        "RATE_LIMIT_CHAT": "1000000000",
        "MAX_PARTICIPANTS_PER_TOPIC": str(max(50, participants)),
        "NODE_ENV": "development",
    }
    log = open(BENCH / "results" / "mew-reference.log", "wb") if (BENCH / "results").is_dir() else subprocess.DEVNULL
    proc = subprocess.Popen(
        [shutil.which("node") or "node", str(REFERENCE_JS)],
        cwd=REFERENCE,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        wait_for_http(f"{base}/health", 30, proc)
        tokens = []
        with httpx.Client(timeout=10) as client:
            for i in range(participants):
                body = {"participantId": f"p{i}", "topic": TOPIC, "capabilities": ["chat"]}
                resp = client.post(f"{base}/v0.1/auth/token", json=body)
                resp.raise_for_status()
                tokens.append(resp.json()["token"])
        yield Side("reference", f"ws://127.0.0.1:{port}/ws?topic={TOPIC}", proc.pid, tokens, True)
    finally:
        stop_process(proc)
        if not isinstance(log, int):
            log.close()


async def run(side: Side, participants: int, messages: int, window: int) -> dict[str, float]:
    sockets: list[ClientConnection] = []
    for token in side.tokens:
        headers = {"Authorization": f"Bearer {token}"}
        async with asyncio.timeout(10):
            sockets.append(await connect(side.ws_url, additional_headers=headers, compression=None))
    # Each participant first sees its welcome and the joins after it (the reference: its own too).
    for i, ws in enumerate(sockets):
        for _ in range(1 + participants - 1 - i + side.echoes_sender):
            async with asyncio.timeout(10):
                await ws.recv()

    per_send = participants if side.echoes_sender else participants - 1
    expected = messages * per_send
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
            if count == per_send:
                credit.release()
            if len(latencies) >= expected:
                done.set()

    readers = [asyncio.create_task(reader(ws)) for ws in sockets]
    cpu_before = cpu_seconds(side.pid)
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
    async with asyncio.timeout(120):
        await done.wait()
    elapsed = time.perf_counter() - started
    cpu = cpu_seconds(side.pid) - cpu_before
    for task in readers:
        task.cancel()
    await asyncio.gather(*(ws.close() for ws in sockets), return_exceptions=True)
    latencies.sort()
    return {
        "participants": participants,
        "envelopes_sent": messages,
        "deliveries": len(latencies),
        "deliveries_per_s": len(latencies) / elapsed,
        "gateway_cpu_s": cpu,
        "deliveries_per_cpu_s": len(latencies) / cpu if cpu > 0 else float("inf"),
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1000,
    }


def measure(side_of: SideOf, participants: int, args: argparse.Namespace) -> dict[str, float]:
    with side_of(participants) as side:
        return asyncio.run(run(side, participants, args.messages, args.window))


def line(name: str, r: dict[str, float]) -> str:
    return (
        f"{int(r['participants']):>3} participants {name:>11}: {r['deliveries_per_s']:>8.0f} deliveries/s, "
        f"{r['deliveries_per_cpu_s']:>8.0f} per gateway CPU-s ({r['gateway_cpu_s']:.2f} CPU-s), "
        f"p50 {r['p50_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms ({int(r['deliveries'])} deliveries)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--participants", type=int, nargs="*", default=[10, 50])
    parser.add_argument("--messages", type=int, default=4000, help="broadcasts per run")
    parser.add_argument("--window", type=int, default=32, help="broadcasts in flight at most")
    parser.add_argument("--rounds", type=int, default=1, help="alternating runs of each side (medians)")
    parser.add_argument(
        "--with-reference",
        action=argparse.BooleanOptionalAction,
        default=shutil.which("node") is not None,
        help="also measure the Node reference gateway (default: when node is found)",
    )
    args = parser.parse_args()
    if args.with_reference:
        ensure_reference()
    sides: list[tuple[str, SideOf]] = [("switchboard", switchboard)]
    if args.with_reference:
        sides.append(("reference", reference))
    for n in args.participants:
        results: dict[str, list[dict[str, float]]] = {name: [] for name, _ in sides}
        for _ in range(args.rounds):
            for name, side_of in sides:
                result = measure(side_of, n, args)
                results[name].append(result)
                print(line(name, result), flush=True)
        if args.with_reference:
            ours = statistics.median(r["deliveries_per_cpu_s"] for r in results["switchboard"])
            theirs = statistics.median(r["deliveries_per_cpu_s"] for r in results["reference"])
            print(
                f"{n:>3} participants: Switchboard ÷ reference deliveries per gateway CPU-s = {ours / theirs:.2f} "
                f"(medians of {args.rounds}; goal at 50: >= 1.25)",
                flush=True,
            )


if __name__ == "__main__":
    main()
