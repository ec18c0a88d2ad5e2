#!/usr/bin/env python3
"""`make bench-interpreters`: the same gateway code under several CPython interpreters, side by side.

What the gateway costs per call depends on the interpreter as much as on our code: a build with
profile-guided optimization and link-time optimization (PGO, LTO) runs the same bytecode with fewer
instructions and better branch layout, and from 3.12 on a shared ``libpython`` reaches the thread
state through ``__tls_get_addr`` on every access (a function call that 3.11 does not make: its
thread state is a global). The deployed image (deploy/Dockerfile) and the development venv need not
use the same build, so this bench says what the choice is worth on this machine.

Topology: one echo backend (bench/echo_backend.py, the project's interpreter) and one gateway per
interpreter, all started once and kept running; the gateways run this source tree (``PYTHONPATH``)
from a venv per interpreter with the project's runtime dependencies (pyproject.toml), made once
under ``.cache/interpreters/``. Every round measures each gateway at each concurrency (wrk: warm-up,
then a measured run; the gateway's CPU from /proc), in alternating order (canonical, reversed, ...:
ABBA, so a linear drift of the shared machine weighs on every interpreter alike); the table gives
medians, each interpreter's ratio to the project's (the first one), and each one's best round (the
machine's noise only adds time, so the least disturbed round is the nearest to the build's own cost).
On a shared VM, differences under about 15 % do not survive from run to run: `gateway_ir.sh` with
``GATEWAY_IR_PYTHON`` counts each build's instructions per call, which the load does not change.

Run: ``.venv/bin/python bench/interpreters.py [--python PATH]... [--era legacy|modern] [--rounds N]
[--duration S] [--concurrency 1,64] [--record]``. Without ``--python``: the project's interpreter and
``/usr/bin/python3`` (Debian's build) when it is another CPython 3.11 or later.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import statistics
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import yaml

from bench.roundtrip.client import McpSession, open_session, validate_call
from bench.roundtrip.common import (
    LOG_DIR,
    PROJECT_PYTHON,
    RESULTS_MD,
    ROOT,
    WRK_TEXT,
    BenchError,
    StartError,
    log,
)
from bench.roundtrip.report import loadavg, machine_info
from bench.roundtrip.services import CLK_TCK, Service, stop_all
from bench.roundtrip.targets import echo_http
from bench.roundtrip.wrk import run_wrk
from tools.procs import free_port, scan_procs

VENVS = ROOT / ".cache" / "interpreters"
DEBIAN_PYTHON = "/usr/bin/python3"
# What describes a build: its version, the optimizations its configuration declares (PGO: --enable-optimizations
# or -fprofile-use; LTO: --with-lto or -flto; a distribution may build its interpreter with flags its config vars
# do not show), and whether libpython is a shared library in the running process (its memory map says).
_DESCRIBE = """
import json, platform, sys, sysconfig as s
flags = " ".join(str(s.get_config_var(v) or "") for v in ("CONFIG_ARGS", "PY_CFLAGS_NODIST", "PY_LDFLAGS_NODIST"))
maps = open("/proc/self/maps").read()
print(json.dumps({
    "version": platform.python_version(),
    "pgo": "--enable-optimizations" in flags or "-fprofile-use" in flags,
    "lto": "--with-lto" in flags or "-flto" in flags,
    "shared": "libpython" in maps,
    "ok": sys.version_info >= (3, 11),
}))
"""


@dataclass(slots=True)
class Interpreter:
    path: str  # the interpreter as given
    version: str
    pgo: bool
    lto: bool
    shared: bool
    venv_python: str = ""  # the interpreter that runs the gateway (a venv's, with the dependencies)

    @property
    def label(self) -> str:
        flags = [f for f, on in (("PGO", self.pgo), ("LTO", self.lto)) if on]
        build = "+".join(flags) if flags else "no PGO/LTO declared"
        return f"{self.version} ({self.path}; {build}, {'shared' if self.shared else 'static'} libpython)"


@dataclass(slots=True)
class Point:
    interpreter: int
    concurrency: int
    rps: float
    p50_ms: float
    gateway_us: float
    errors: int


def describe(path: str) -> Interpreter:
    try:
        out = subprocess.run([path, "-c", _DESCRIBE], capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise StartError(f"{path}: not a usable interpreter ({exc})") from exc
    facts = json.loads(out)
    if not facts.pop("ok"):
        raise StartError(f"{path}: CPython {facts['version']} is older than the project's 3.11")
    return Interpreter(path, **facts)


def runtime_dependencies() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return list(project["dependencies"])


def venv_for(interp: Interpreter) -> str:
    """A venv of ``interp`` with the project's runtime dependencies (made once; remade when they change)."""
    deps = runtime_dependencies()
    tag = hashlib.sha256(f"{interp.path}\n{interp.version}\n{deps}".encode()).hexdigest()[:12]
    venv = VENVS / f"{interp.version}-{tag}"
    python = venv / "bin" / "python"
    if not (venv / ".installed").exists():
        log(f"{interp.path}: a venv with the runtime dependencies in {venv} (once)")
        subprocess.run([interp.path, "-m", "venv", "--clear", str(venv)], check=True, timeout=300)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", *deps], check=True, timeout=1200)
        (venv / ".installed").touch()
    return str(python)


def start(interps: list[Interpreter], tmp: Path) -> tuple[Service, list[Service]]:
    backend = echo_http("interpreters")
    backend_port = backend.port
    backend.start()
    backend.wait_ready(30)
    gateways = []
    for k, interp in enumerate(interps):
        port = free_port()
        config = {
            "listen": {"host": "127.0.0.1", "port": port},
            "backends": {"echo": {"transport": "http", "url": f"http://127.0.0.1:{backend_port}/mcp"}},
        }
        cfg = tmp / f"gateway-{k}.yaml"
        cfg.write_text(yaml.safe_dump(config, sort_keys=False))
        gateway = Service(
            f"switchboard-{k}",
            [interp.venv_python, "-m", "gateway", "run", "-c", str(cfg), "--port", str(port)],
            port,
            "proxy",
            LOG_DIR / f"interpreters.gateway-{k}.log",
            env={"PYTHONPATH": str(ROOT)},
        )
        gateway.start()
        gateway.wait_ready(60)
        gateways.append(gateway)
    return backend, gateways


def _ticks(service: Service) -> int:
    assert service.popen is not None
    proc = scan_procs().get(service.popen.pid)
    return proc.ticks if proc is not None else 0


def measure(args: argparse.Namespace, gateways: list[Service]) -> list[Point]:
    sessions: list[McpSession] = [
        open_session(f"http://127.0.0.1:{g.port}/mcp", timeout=30, era=args.era) for g in gateways
    ]
    points = []
    for round_no in range(args.rounds):
        order = list(range(len(gateways)))
        if round_no % 2:
            order.reverse()
        for k in order:
            for concurrency in args.concurrency:
                validate_call(sessions[k], WRK_TEXT)
                run_wrk(sessions[k], concurrency, args.warmup, 1)
                before = _ticks(gateways[k])
                result = run_wrk(sessions[k], concurrency, args.duration, 1)
                used = _ticks(gateways[k]) - before
                point = Point(
                    k,
                    concurrency,
                    result.rps,
                    result.p50_ms,
                    used * 1e6 / CLK_TCK / max(1, result.requests),
                    result.error_total,
                )
                log(
                    f"round {round_no + 1} #{k} c={concurrency}: {point.rps:8.0f} req/s  p50 {point.p50_ms:6.3f} ms  "
                    f"gateway {point.gateway_us:6.1f} µs/call" + (f"  ⚠ {point.errors} errors" if point.errors else "")
                )
                points.append(point)
    return points


def report(interps: list[Interpreter], points: list[Point], concurrencies: list[int]) -> str:
    lines = [
        "| # | interpreter | c | req/s | p50 ms | gateway CPU µs/call | CPU ÷ #0's | best round µs/call | errors |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in concurrencies:
        base_cpu = None
        for k, interp in enumerate(interps):
            mine = [p for p in points if p.interpreter == k and p.concurrency == c]
            cpu = statistics.median(p.gateway_us for p in mine)
            base_cpu = cpu if base_cpu is None else base_cpu
            errors = sum(p.errors for p in mine)
            lines.append(
                f"| {k} | {interp.label} | {c} | {statistics.median(p.rps for p in mine):,.0f} | "
                f"{statistics.median(p.p50_ms for p in mine):.3f} | {cpu:.1f} | {cpu / base_cpu:.2f} | "
                f"{min(p.gateway_us for p in mine):.1f} | {f'⚠ {errors}' if errors else 0} |"
            )
    return "\n".join(lines)


def record(args: argparse.Namespace, table: str, started: str, load_start: str) -> None:
    mi = machine_info()
    section = [
        "",
        f"## {started} — interpreters (`bench/interpreters.py`, {args.era} wire)",
        "",
        *([f"- note: {args.label}"] if args.label else []),
        f"- machine: `{mi['uname']}`, {mi['cpu_model']}, {mi['cores']} cores; load average {load_start} at start, "
        f"{loadavg()} at end",
        f"- settings: {args.rounds} rounds (alternating order), {args.duration:g} s per run after {args.warmup:g} s "
        f"of warm-up; one echo backend, one gateway per interpreter (this tree); medians",
        "",
        table,
        "",
    ]
    with RESULTS_MD.open("a") as f:
        f.write("\n".join(section))


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--python", action="append", default=[], help="an interpreter to compare (repeatable)")
    p.add_argument("--era", choices=("legacy", "modern"), default="legacy", help="the client's wire (legacy)")
    p.add_argument("--concurrency", type=_ints, default=[1, 64], help="comma-separated wrk connections (1,64)")
    p.add_argument("--duration", type=float, default=8.0, help="seconds per measured run (8)")
    p.add_argument("--warmup", type=float, default=2.0, help="seconds of warm-up before each run (2)")
    p.add_argument("--rounds", type=int, default=4, help="rounds over every interpreter, alternating order (4)")
    p.add_argument("--record", action="store_true", help="append a dated section to bench/RESULTS.md")
    p.add_argument("--label", default="", help="free-text note for the RESULTS.md section")
    args = p.parse_args(argv)
    paths = [PROJECT_PYTHON, *args.python]
    if not args.python and Path(DEBIAN_PYTHON).exists():
        paths.append(DEBIAN_PYTHON)
    started = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    load_start = loadavg()
    try:
        interps = [describe(path) for path in paths]
        for k, interp in enumerate(interps):
            interp.venv_python = PROJECT_PYTHON if k == 0 else venv_for(interp)
            log(f"#{k}: {interp.label}")
        with tempfile.TemporaryDirectory(prefix="bench-interpreters-") as tmp:
            _, gateways = start(interps, Path(tmp))
            points = measure(args, gateways)
    except (StartError, BenchError, subprocess.CalledProcessError) as exc:
        log(str(exc))
        return 1
    finally:
        stop_all()
    table = report(interps, points, args.concurrency)
    print(f"\nThe same gateway under {len(interps)} interpreters, {args.era} wire; medians of {args.rounds} rounds\n")
    print(table)
    if args.record:
        record(args, table, started, load_start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
