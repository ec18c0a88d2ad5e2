"""Load generation: one wrk run against an open session, parsed into numbers.

The script follows the session's era: bench/wrk/tools_call.lua (legacy: the session's Mcp-Session-Id on
every request) or bench/wrk/tools_call_modern.lua (2026-07-28: the envelope in `_meta` and the routing
headers on every request, no session), which runs the former for its answer checks and summary.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.roundtrip.client import McpSession
from bench.roundtrip.common import LUA_SCRIPT, MODERN_LUA_SCRIPT, WRK_TEXT, BenchError


@dataclass
class WrkResult:
    requests: int
    duration_s: float
    rps: float
    p50_ms: float
    p75_ms: float
    p90_ms: float
    p99_ms: float
    p999_ms: float
    mean_ms: float
    max_ms: float
    non2xx: int
    socket_errors: int
    timeouts: int
    bad_bodies: int
    wrk_cpu_s: float
    raw: dict[str, Any]

    @property
    def error_total(self) -> int:
        return self.non2xx + self.socket_errors + self.timeouts + self.bad_bodies


_run_counter = 0


def script_for(session: McpSession) -> tuple[Path, dict[str, str]]:
    """The wrk script for the session's era and the environment it reads (besides the id base)."""
    env = {
        "BENCH_SESSION_ID": session.session_id or "",
        "BENCH_PROTOCOL_VERSION": session.protocol_version,
        "BENCH_TOOL": session.tool,
        "BENCH_TEXT": WRK_TEXT,
        "BENCH_ARG": session.echo.arg,
        "BENCH_EXPECT": session.echo.answer(WRK_TEXT),
    }
    if session.era != "modern":
        return LUA_SCRIPT, env
    meta = json.dumps(session.meta(), separators=(",", ":"))
    return MODERN_LUA_SCRIPT, {**env, "BENCH_BASE_SCRIPT": str(LUA_SCRIPT), "BENCH_META": meta}


def run_wrk(session: McpSession, concurrency: int, duration: float, threads: int) -> WrkResult:
    global _run_counter
    _run_counter += 1
    script, script_env = script_for(session)
    env = {
        **os.environ,
        **script_env,
        # ids stay unique across every wrk run of this driver invocation
        "BENCH_ID_BASE": str(_run_counter * 100_000_000_000),
    }
    argv = [
        "wrk",
        f"-t{max(1, min(threads, concurrency))}",
        f"-c{concurrency}",
        f"-d{max(1, round(duration))}s",
        "--timeout",
        "5s",
        "--latency",
        "-s",
        str(script),
        session.url,
    ]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=duration + 60, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("BENCH_JSON ")), None)
    if proc.returncode != 0 or line is None:
        detail = f"{proc.stderr.strip()[:500]} {proc.stdout[-500:]}"
        raise BenchError(f"wrk failed (exit {proc.returncode}): {detail}")
    raw = json.loads(line[len("BENCH_JSON ") :])
    lat = raw["latency_us"]
    pct = lat["percentiles"]
    err = raw["errors"]
    duration_s = raw["duration_us"] / 1e6
    return WrkResult(
        requests=raw["requests"],
        duration_s=duration_s,
        rps=raw["requests"] / duration_s if duration_s else 0.0,
        p50_ms=pct["50"] / 1000,
        p75_ms=pct["75"] / 1000,
        p90_ms=pct["90"] / 1000,
        p99_ms=pct["99"] / 1000,
        p999_ms=pct["99.9"] / 1000,
        mean_ms=lat["mean"] / 1000,
        max_ms=lat["max"] / 1000,
        non2xx=err["status"],
        socket_errors=err["connect"] + err["read"] + err["write"],
        timeouts=err["timeout"],
        bad_bodies=max(0, raw["bad_bodies"] - err["status"]),  # non-2xx are counted once, as non2xx
        wrk_cpu_s=(after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime),
        raw=raw,
    )
