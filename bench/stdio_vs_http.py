#!/usr/bin/env python3
"""`make bench-stdio`: the same echo backend over stdio and over HTTP, behind one gateway process.

Topology: wrk → Switchboard (one process, legacy 2025-11-25 session) → two backends, both
bench/echo_backend.py: ``stdio`` (the gateway's child, line-delimited JSON-RPC on its pipes) and
``http`` (its own process, raw ASGI on uvicorn). With two backends the tools are prefixed, so the
bench calls ``stdio__echo`` and ``http__echo`` through the same session and gateway.

For each concurrency, and for several interleaved rounds (stdio, http, stdio, http, ...: the machine
is shared, so A/B in alternation), wrk runs a warm-up then a measured run of one tool, and the CPU
time of the gateway process alone (its stdio child excluded) is read from /proc before and after.

Columns per backend kind: req/s, wrk's p50, gateway CPU µs per call (the gateway's own ticks ÷
calls; the backends' CPU is not counted), and the backend's CPU µs per call. The summary gives the
ratios stdio ÷ http of the medians: the issue's goal is the stdio backend within 1.2 times HTTP
(http req/s ÷ stdio req/s ≤ 1.2, and the same for gateway CPU per call).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx
import yaml

from bench.roundtrip.client import McpSession, rpc, validate_call
from bench.roundtrip.common import (
    BENCH,
    LOG_DIR,
    PROJECT_PYTHON,
    PROTOCOL_VERSION,
    WRK_TEXT,
    BenchError,
    StartError,
    log,
)
from bench.roundtrip.services import CLK_TCK, Service, stop_all
from bench.roundtrip.targets import echo_http, switchboard_command
from bench.roundtrip.wrk import run_wrk
from tools.procs import descendants, free_port, scan_procs

KINDS = ("stdio", "http")


@dataclass(slots=True)
class Point:
    kind: str
    concurrency: int
    rps: float
    p50_ms: float
    errors: int
    gateway_us: float  # gateway process CPU per call (the stdio child excluded)
    backend_us: float  # the serving backend's CPU per call


def _ticks(gateway: Service, http_backend: Service) -> tuple[int, int, int]:
    """Ticks of (the gateway process itself, its stdio child tree, the HTTP backend)."""
    procs = scan_procs()
    assert gateway.popen is not None and http_backend.popen is not None
    root = gateway.popen.pid
    own = procs[root].ticks if root in procs else 0
    child = sum(procs[p].ticks for p in descendants(root, procs) if p in procs)
    http_pid = http_backend.popen.pid
    http = sum(procs[p].ticks for p in [http_pid, *descendants(http_pid, procs)] if p in procs)
    return own, child, http


def start(tmp: Path) -> tuple[Service, Service]:
    echo = str(BENCH / "echo_backend.py")
    http_backend = echo_http("stdio_vs_http")
    http_port = http_backend.port
    http_backend.start()
    http_backend.wait_ready(30)
    port = free_port()
    config = {
        "listen": {"host": "127.0.0.1", "port": port},
        "backends": {
            "stdio": {"transport": "stdio", "command": PROJECT_PYTHON, "args": [echo, "--stdio"]},
            "http": {"transport": "http", "url": f"http://127.0.0.1:{http_port}/mcp"},
        },
        "log_level": "warning",
    }
    cfg = tmp / "stdio_vs_http.yaml"
    cfg.write_text(yaml.safe_dump(config, sort_keys=False))
    gateway = Service(
        "switchboard",
        [*switchboard_command(), "run", "-c", str(cfg), "--port", str(port)],
        port,
        "proxy",
        LOG_DIR / "stdio_vs_http.switchboard.log",
    )
    gateway.start()
    gateway.wait_ready(60)
    return gateway, http_backend


def open_session(url: str) -> McpSession:
    """initialize + initialized + tools/list (bench.roundtrip's wants one bare `echo`; here there are two)."""
    base = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    params = {
        "protocolVersion": PROTOCOL_VERSION,
        "capabilities": {},
        "clientInfo": {"name": "bench-stdio", "version": "1"},
    }
    with httpx.Client(timeout=10.0) as client:
        result, resp = rpc(client, url, base, "initialize", params, 0)
        session = McpSession(url, resp.headers.get("mcp-session-id"), result["protocolVersion"], "", {})
        client.post(url, headers=session.headers(), json={"jsonrpc": "2.0", "method": "notifications/initialized"})
        tools, _ = rpc(client, url, session.headers(), "tools/list", {}, 1)
    names = {t.get("name") for t in tools.get("tools", [])}
    if missing := {f"{kind}__echo" for kind in KINDS} - names:
        raise BenchError(f"tools/list lacks {sorted(missing)}: {sorted(names)}")
    return session


def measure(args: argparse.Namespace, gateway: Service, http_backend: Service) -> list[Point]:
    session = open_session(f"http://127.0.0.1:{gateway.port}/mcp")
    points: list[Point] = []
    for concurrency in args.concurrency:
        for _ in range(args.rounds):
            for kind in KINDS:
                session.tool = f"{kind}__echo"
                validate_call(session, WRK_TEXT)
                run_wrk(session, concurrency, args.warmup, 1)
                before = _ticks(gateway, http_backend)
                result = run_wrk(session, concurrency, args.duration, 1)
                after = _ticks(gateway, http_backend)
                calls = max(1, result.requests)
                per_call = [(b - a) * 1e6 / CLK_TCK / calls for a, b in zip(before, after, strict=True)]
                point = Point(
                    kind,
                    concurrency,
                    result.rps,
                    result.p50_ms,
                    result.error_total,
                    per_call[0],
                    per_call[1] if kind == "stdio" else per_call[2],
                )
                log(
                    f"c={concurrency} {kind:>5}: {point.rps:8.0f} req/s  p50 {point.p50_ms:6.3f} ms  "
                    f"gateway {point.gateway_us:6.1f} µs/call  backend {point.backend_us:6.1f} µs/call"
                    + (f"  ⚠ {point.errors} errors" if point.errors else "")
                )
                points.append(point)
    return points


def report(points: list[Point], concurrencies: list[int]) -> str:
    lines = [
        "| c | backend | req/s | p50 ms | gateway CPU µs/call | backend CPU µs/call | errors |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    ratios: list[str] = []
    for c in concurrencies:
        med: dict[str, tuple[float, float, float]] = {}
        for kind in KINDS:
            mine = [p for p in points if p.kind == kind and p.concurrency == c]
            rps = statistics.median(p.rps for p in mine)
            p50 = statistics.median(p.p50_ms for p in mine)
            gw = statistics.median(p.gateway_us for p in mine)
            be = statistics.median(p.backend_us for p in mine)
            errors = sum(p.errors for p in mine)
            med[kind] = (rps, p50, gw)
            flag = f"⚠ {errors}" if errors else "0"
            lines.append(f"| {c} | {kind} | {rps:.0f} | {p50:.3f} | {gw:.1f} | {be:.1f} | {flag} |")
        s, h = med["stdio"], med["http"]
        ratios.append(
            f"- c={c}: http ÷ stdio req/s = {h[0] / s[0]:.2f}, stdio ÷ http p50 = {s[1] / h[1]:.2f}, "
            f"stdio ÷ http gateway CPU/call = {s[2] / h[2]:.2f} (goal: each ≤ 1.2)"
        )
    return "\n".join([*lines, "", *ratios])


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--concurrency", type=_ints, default=[1, 16], help="comma-separated wrk connections (1,16)")
    p.add_argument("--duration", type=float, default=8.0, help="seconds per measured run (8)")
    p.add_argument("--warmup", type=float, default=2.0, help="seconds of warm-up before each run (2)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved stdio/http rounds per concurrency (3)")
    args = p.parse_args(argv)
    try:
        with tempfile.TemporaryDirectory(prefix="bench-stdio-") as tmp:
            gateway, http_backend = start(Path(tmp))
            points = measure(args, gateway, http_backend)
    except (StartError, BenchError) as exc:
        log(str(exc))
        return 1
    finally:
        stop_all()
    print(f"stdio vs HTTP backend behind one gateway; {args.rounds} interleaved rounds of {args.duration:g} s, medians")
    print()
    print(report(points, args.concurrency))
    return 0


if __name__ == "__main__":
    sys.exit(main())
