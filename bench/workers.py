#!/usr/bin/env python3
"""`make bench-workers`: tools/call throughput through 1, 2 and 4 worker processes on one machine.

Topology: wrk → Switchboard (`run --workers N`, a redis bus: the only bus worker processes may
share) → bench/echo_backend.py (raw ASGI, one process). Every request is a stateless 2026-07-28
`tools/call` of `echo` (the client envelope in `params._meta`, no session), so any worker can answer
any request and the kernel spreads wrk's connections over the workers (SO_REUSEPORT).

For each N the driver starts a fresh gateway, waits for its banner (printed once every worker is
ready), checks one call answers the echoed text, runs wrk for a warm-up and a measured run at each
concurrency, and reads the CPU time of the gateway's process tree (supervisor + workers), the echo
backend and redis-server from /proc. wrk, the gateway, the backend and redis share the machine's
cores: on a machine with few cores the load generator and the backend take cores the workers would
use, which the CPU columns show.

Columns: req/s of the measured run and its ratio to the median 1-worker rate; wrk's p50/p99; errors
(socket errors, timeouts, non-2xx, bodies without the echoed text; any is flagged); then cores used
during the measured run (CPU seconds per second) by the gateway tree (and by each worker: how evenly
the kernel spread the connections), the echo backend, wrk and
redis, and "other": the machine's busy cores (/proc/stat) that none of those account for, i.e. load
from outside the benchmark; "gateway CPU µs/call" is the gateway tree's CPU per completed call.

The wrk script is bench/wrk/tools_call_modern.lua (as for `make bench`'s switchboard-modern target):
tools_call.lua's answer checks and summary, with a request carrying `_meta` in params and the routing
headers. The check before the runs is the driver's validating tools/call (bench/roundtrip/client.py).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import yaml

from bench.roundtrip.client import McpSession, validate_call
from bench.roundtrip.common import LOG_DIR, MODERN_PROTOCOL_VERSION, PROJECT_PYTHON, WRK_TEXT, StartError, log
from bench.roundtrip.report import loadavg, machine_info
from bench.roundtrip.services import CLK_TCK, Service, machine_busy_ticks, stop_all
from bench.roundtrip.targets import echo_http
from bench.roundtrip.wrk import script_for
from tools.procs import ProcStat, descendants, free_port, scan_procs

CLIENT_INFO = {"name": "bench-workers", "version": "1"}


def modern_session(url: str) -> McpSession:
    """The stateless 2026-07-28 client every request comes from (no initialize, nothing to open)."""
    return McpSession(url, None, MODERN_PROTOCOL_VERSION, "echo", {}, era="modern", client_info=dict(CLIENT_INFO))


@dataclass
class Point:
    workers: int
    concurrency: int
    rps: float
    p50_ms: float
    p99_ms: float
    errors: int
    gateway_cores: float  # CPU seconds of the gateway tree per second of the run
    backend_cores: float
    redis_cores: float
    wrk_cores: float
    machine_cores: float
    worker_cores: list[float]  # each worker's own cores (how evenly the kernel spread the connections)
    gateway_us_per_call: float

    @property
    def other_cores(self) -> float:
        """Busy cores of the machine that none of the measured processes account for (other load)."""
        return self.machine_cores - self.gateway_cores - self.backend_cores - self.redis_cores - self.wrk_cores


def _tree_ticks(pid: int, procs: dict[int, ProcStat]) -> int:
    return sum(procs[p].ticks for p in [pid, *descendants(pid, procs)] if p in procs)


def _ticks(services: list[Service]) -> tuple[list[int], dict[int, int]]:
    """Ticks of each service's process tree, and of each worker (the first service's children, or itself)."""
    procs = scan_procs()
    trees = [_tree_ticks(s.popen.pid, procs) if s.popen else 0 for s in services]
    root = services[0].popen.pid if services[0].popen else -1
    workers = {pid: st.ticks for pid, st in procs.items() if st.ppid == root} or {root: procs[root].ticks}
    return trees, workers


def _wrk(session: McpSession, concurrency: int, duration: float, threads: int, id_base: int) -> dict[str, Any]:
    script, script_env = script_for(session)
    env = {**os.environ, **script_env, "BENCH_ID_BASE": str(id_base)}
    argv = ["wrk", f"-t{max(1, min(threads, concurrency))}", f"-c{concurrency}", f"-d{max(1, round(duration))}s"]
    argv += ["--timeout", "5s", "--latency", "-s", str(script), session.url]
    before = os.times()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=duration + 60, check=False)
    after = os.times()
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("BENCH_JSON ")), None)
    if done.returncode != 0 or line is None:
        raise RuntimeError(f"wrk failed (exit {done.returncode}): {done.stderr.strip()[:500]} {done.stdout[-500:]}")
    raw: dict[str, Any] = json.loads(line[len("BENCH_JSON ") :])
    raw["wrk_cpu_s"] = (after.children_user + after.children_system) - (before.children_user + before.children_system)
    return raw


def _wait_banner(svc: Service, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while "listening on" not in svc.log_path.read_text(errors="replace"):
        if svc.popen is None or svc.popen.poll() is not None:
            raise StartError(f"the gateway exited during start-up\n{svc.log_tail()}")
        if time.monotonic() > deadline:
            raise StartError(f"the gateway did not print its banner within {timeout:.0f}s\n{svc.log_tail()}")
        time.sleep(0.05)


def measure(args: argparse.Namespace, tmp: Path) -> list[Point]:
    redis_port = free_port()
    redis = Service(
        "redis",
        [args.redis, "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        redis_port,
        "redis",
        LOG_DIR / "workers.redis.log",
    )
    backend = echo_http("workers")
    backend_port = backend.port
    points: list[Point] = []
    for svc in (redis, backend):
        svc.start()
        svc.wait_ready(30)
    run = 0
    for workers in [w for _ in range(args.rounds) for w in args.workers_list]:  # rounds interleave the counts
        port = free_port()
        config = {
            "listen": {"host": "127.0.0.1", "port": port},
            "bus": {"kind": "redis", "url": f"redis://127.0.0.1:{redis_port}/0", "prefix": f"bench{workers}:"},
            "backends": {"echo": {"transport": "http", "url": f"http://127.0.0.1:{backend_port}/mcp"}},
        }
        config_path = tmp / f"workers-{workers}.yaml"
        config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        argv = [PROJECT_PYTHON, "-m", "gateway", "run", "-c", str(config_path), "--workers", str(workers)]
        gateway = Service(
            f"switchboard-{workers}w", argv, port, "proxy", LOG_DIR / f"workers.switchboard-{workers}.log"
        )
        gateway.start()
        try:
            gateway.wait_ready(60)
            _wait_banner(gateway, 60)
            session = modern_session(f"http://127.0.0.1:{port}/mcp")
            validate_call(session, WRK_TEXT)
            for concurrency in args.concurrency_list:
                run += 1
                log(f"{workers} worker(s), c={concurrency}: {args.warmup:g}s warm-up + {args.duration:g}s")
                if args.warmup > 0:
                    _wrk(session, concurrency, args.warmup, args.threads, run * 10**11)
                watched = [gateway, backend, redis]
                (before, w0), busy0, t0 = _ticks(watched), machine_busy_ticks(), time.monotonic()
                raw = _wrk(session, concurrency, args.duration, args.threads, run * 10**11 + 5 * 10**10)
                (after, w1), busy1, elapsed = _ticks(watched), machine_busy_ticks(), time.monotonic() - t0
                cores = [(b - a) / CLK_TCK / elapsed for a, b in zip(before, after, strict=True)]
                seconds = raw["duration_us"] / 1e6
                err = raw["errors"]
                errors = (
                    err["connect"] + err["read"] + err["write"] + err["timeout"] + max(err["status"], raw["bad_bodies"])
                )
                rps = raw["requests"] / seconds if seconds else 0.0
                points.append(
                    Point(
                        workers=workers,
                        concurrency=concurrency,
                        rps=rps,
                        p50_ms=raw["latency_us"]["percentiles"]["50"] / 1000,
                        p99_ms=raw["latency_us"]["percentiles"]["99"] / 1000,
                        errors=errors,
                        gateway_cores=cores[0],
                        worker_cores=[(w1[pid] - w0[pid]) / CLK_TCK / elapsed for pid in sorted(w0) if pid in w1],
                        backend_cores=cores[1],
                        redis_cores=cores[2],
                        wrk_cores=raw["wrk_cpu_s"] / elapsed,
                        machine_cores=(busy1 - busy0) / CLK_TCK / elapsed,
                        gateway_us_per_call=cores[0] * elapsed / raw["requests"] * 1e6 if raw["requests"] else 0.0,
                    )
                )
        finally:
            gateway.stop()
    return points


def table(points: list[Point]) -> str:
    # Ratios are to the median 1-worker rate at the same concurrency.
    ones: dict[int, list[float]] = {}
    for p in points:
        if p.workers == 1:
            ones.setdefault(p.concurrency, []).append(p.rps)
    base = {c: statistics.median(rates) for c, rates in ones.items()}
    lines = [
        "| workers | conc | req/s | x 1 worker | p50 ms | p99 ms | errors | gateway cores | gateway CPU µs/call "
        "| per worker | backend cores | wrk cores | redis cores | other cores |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in points:
        ratio = f"{p.rps / base[p.concurrency]:.2f}x" if base.get(p.concurrency) else "—"
        flag = " ⚠" if p.errors else ""
        lines.append(
            f"| {p.workers} | {p.concurrency} | {p.rps:,.0f} | {ratio} | {p.p50_ms:.3f} | {p.p99_ms:.3f} "
            f"| {p.errors}{flag} | {p.gateway_cores:.2f} | {p.gateway_us_per_call:.0f} "
            f"| {' / '.join(f'{c:.2f}' for c in p.worker_cores)} | {p.backend_cores:.2f} "
            f"| {p.wrk_cores:.2f} | {p.redis_cores:.2f} | {max(0.0, p.other_cores):.2f} |"
        )
    return "\n".join(lines)


def summary(points: list[Point]) -> str:
    """Medians over the rounds, per worker count and concurrency."""
    groups: dict[tuple[int, int], list[Point]] = {}
    for p in points:
        groups.setdefault((p.workers, p.concurrency), []).append(p)
    lines = [
        "| workers | conc | rounds | median req/s | x 1 worker | median gateway cores | median other cores |",
        "|---|---|---|---|---|---|---|",
    ]
    for (workers, conc), group in groups.items():
        rps = statistics.median(p.rps for p in group)
        one = groups.get((1, conc))
        ratio = f"{rps / statistics.median(p.rps for p in one):.2f}x" if one else "—"
        cores = statistics.median(p.gateway_cores for p in group)
        other = statistics.median(max(0.0, p.other_cores) for p in group)
        lines.append(f"| {workers} | {conc} | {len(group)} | {rps:,.0f} | {ratio} | {cores:.2f} | {other:.2f} |")
    return "\n".join(lines)


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="tools/call throughput through 1, 2 and 4 worker processes")
    p.add_argument("--workers", default="1,2,4", help="comma-separated worker counts (default 1,2,4)")
    p.add_argument("--concurrency", default="64", help="comma-separated wrk connection counts (default 64)")
    p.add_argument("--duration", type=float, default=5.0, help="seconds per measured run (default 5)")
    p.add_argument("--warmup", type=float, default=2.0, help="seconds of warm-up before each run (default 2)")
    p.add_argument("--threads", type=int, default=1, help="wrk threads (default 1)")
    p.add_argument("--rounds", type=int, default=1, help="repeat the whole sequence, interleaved (default 1)")
    p.add_argument("--redis", default="redis-server", help="the redis-server binary")
    p.add_argument("--json", type=Path, help="also write the points as JSON here")
    args = p.parse_args(argv)
    args.workers_list, args.concurrency_list = _ints(args.workers), _ints(args.concurrency)
    for tool in ("wrk", args.redis):
        if shutil.which(tool) is None:
            log(f"{tool} not found (apt-get install wrk redis-server; `bash bench/run.sh` installs wrk)")
            return 2
    machine = machine_info()
    cores = len(os.sched_getaffinity(0))
    started = dt.datetime.now(dt.UTC)
    load_start = loadavg()
    try:
        with tempfile.TemporaryDirectory(prefix="switchboard-bench-workers-") as tmp:
            points = measure(args, Path(tmp))
    finally:
        stop_all()
    print()
    print(f"- {started:%Y-%m-%d %H:%M} UTC; machine: `{machine['uname']}`, {machine['cpu_model']}, {cores} cores")
    print(f"- load average {load_start} at start, {loadavg()} at end")
    print(
        f"- {args.duration:g} s per point after {args.warmup:g} s of warm-up, wrk threads {args.threads}, "
        f"{args.rounds} round(s) of {args.workers}"
    )
    print()
    print(table(points))
    if args.rounds > 1:
        print()
        print(summary(points))
    if args.json:
        args.json.write_text(json.dumps({"machine": machine, "cores": cores, "points": [vars(p) for p in points]}))
    return 1 if any(p.errors for p in points) else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        stop_all()
        sys.exit(130)
