#!/usr/bin/env python3
"""Bytecodes per ``tools/call``, by Python function, in a whole gateway process (issue 15, ADR 0017).

callgrind (``gateway_ir.sh``) counts a call's machine instructions but cannot name the Python function
that spent them: the eval loop is one C function. This counts what the eval loop executes instead:
every bytecode of every Python function (``sys.settrace`` with ``f_trace_opcodes``), per function, over
a known number of calls after a warm-up, in a real gateway process (uvicorn, the door, the router, the
backend client) in front of ``echo_backend.py``. The counts are exact and the same run after run: a
Python-level A/B of two trees, or of the two wires, without the machine's noise. Tracing makes the
process many times slower; only the counts mean anything, not its timings. Bytecodes are not equal
in cost (a call or a dict build costs more than a load), so read them beside the instruction counts.

Run: ``.venv/bin/python bench/opcodes.py [--era legacy|modern|both] [--calls N] [--top K]``. ``both``
adds a table of the functions whose counts differ most between the wires.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import runpy
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from _typeshed import TraceFunction  # sys.settrace's own type (stub-only)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

Key = tuple[str, int, str]  # (file, first line, function)


def serve(out: str, argv: list[str]) -> None:
    """The gateway (``python -m gateway`` with ``argv``), counting bytecodes from SIGUSR1 until SIGUSR2,
    which writes them to ``out``."""
    opcodes: collections.Counter[Key] = collections.Counter()
    calls: collections.Counter[Key] = collections.Counter()

    def local(frame: FrameType, event: str, arg: Any) -> TraceFunction:
        if event == "opcode":
            code = frame.f_code
            opcodes[code.co_filename, code.co_firstlineno, code.co_name] += 1
        return local

    def tracer(frame: FrameType, event: str, arg: Any) -> TraceFunction | None:
        if event != "call":
            return None
        code = frame.f_code
        calls[code.co_filename, code.co_firstlineno, code.co_name] += 1  # a coroutine's resumption too
        frame.f_trace_opcodes = True
        return local

    def start(*_: object) -> None:
        opcodes.clear()
        calls.clear()
        sys.settrace(tracer)

    def stop(*_: object) -> None:
        sys.settrace(None)
        rows = [[list(k), opcodes[k], calls[k]] for k in opcodes.keys() | calls.keys()]
        Path(out).write_text(json.dumps(rows))

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)
    sys.argv = ["gateway", *argv]
    runpy.run_module("gateway", run_name="__main__")


def count(era: str, calls: int, warmup: int) -> dict[Key, tuple[float, float]]:
    """Bytecodes and frame entries per call, by function, for ``calls`` calls of ``era``."""
    from tools.procs import free_port, wait_for_port

    python = sys.executable
    fixed = str(ROOT / "bench" / "fixed_calls.py")
    with tempfile.TemporaryDirectory(prefix="bench-opcodes-") as tmp:
        backend_port, port = free_port(), free_port()
        cfg = Path(tmp) / "gateway.yaml"
        cfg.write_text(
            f"listen: {{host: 127.0.0.1, port: {port}}}\n"
            f'backends:\n  echo: {{transport: http, url: "http://127.0.0.1:{backend_port}/mcp"}}\n'
        )
        out = Path(tmp) / "counts.json"
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        quiet = subprocess.DEVNULL
        echo = [python, str(ROOT / "bench" / "echo_backend.py"), "--port", str(backend_port)]
        backend = subprocess.Popen(echo, stdout=quiet, stderr=quiet)
        gateway = subprocess.Popen(
            [python, __file__, "--serve", str(out), "run", "-c", str(cfg), "--port", str(port)],
            env=env,
            cwd=ROOT,
            stdout=quiet,
            stderr=quiet,
        )
        try:
            wait_for_port("127.0.0.1", backend_port, 60, backend)
            wait_for_port("127.0.0.1", port, 60, gateway)
            subprocess.run([python, fixed, str(port), str(warmup), "--era", era], check=True, timeout=300)
            gateway.send_signal(signal.SIGUSR1)
            time.sleep(0.5)
            subprocess.run([python, fixed, str(port), str(calls), "--era", era], check=True, timeout=1800)
            gateway.send_signal(signal.SIGUSR2)
            deadline = time.monotonic() + 30
            while not out.exists() and time.monotonic() < deadline:
                time.sleep(0.2)
            rows = json.loads(out.read_text())
        finally:
            for proc in (gateway, backend):
                proc.terminate()
                proc.wait(30)
    return {(f, line, name): (ops / calls, entries / calls) for (f, line, name), ops, entries in rows}


def _name(key: Key) -> str:
    path, line, name = key
    short = path.split("site-packages/")[-1].removeprefix(str(ROOT) + "/")
    return f"{short}:{line} {name}"


def table(counts: dict[Key, tuple[float, float]], top: int) -> str:
    lines = [
        f"{sum(v[0] for v in counts.values()):,.0f} bytecodes and {sum(v[1] for v in counts.values()):,.0f} "
        "frame entries per call",
        "",
        "| bytecodes | entries | function |",
        "|---:|---:|---|",
    ]
    for key in sorted(counts, key=lambda k: -counts[k][0])[:top]:
        lines.append(f"| {counts[key][0]:,.1f} | {counts[key][1]:,.1f} | `{_name(key)}` |")
    return "\n".join(lines)


def difference(legacy: dict[Key, tuple[float, float]], modern: dict[Key, tuple[float, float]], top: int) -> str:
    keys = legacy.keys() | modern.keys()

    def delta(k: Key) -> float:
        return modern.get(k, (0.0, 0.0))[0] - legacy.get(k, (0.0, 0.0))[0]

    lines = ["| legacy | 2026-07-28 | difference | function |", "|---:|---:|---:|---|"]
    for key in sorted(keys, key=lambda k: -abs(delta(k)))[:top]:
        if abs(delta(key)) < 0.5:
            break
        old, new = legacy.get(key, (0.0, 0.0))[0], modern.get(key, (0.0, 0.0))[0]
        lines.append(f"| {old:,.1f} | {new:,.1f} | {delta(key):+,.1f} | `{_name(key)}` |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args_in = sys.argv[1:] if argv is None else argv
    if args_in[:1] == ["--serve"]:
        serve(args_in[1], args_in[2:])
        return 0
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--era", choices=("legacy", "modern", "both"), default="both")
    p.add_argument("--calls", type=int, default=1000, help="calls counted (1000)")
    p.add_argument("--warmup", type=int, default=200, help="calls before counting (200)")
    p.add_argument("--top", type=int, default=40, help="rows per table (40)")
    args = p.parse_args(args_in)
    eras = ["legacy", "modern"] if args.era == "both" else [args.era]
    results = {era: count(era, args.calls, args.warmup) for era in eras}
    for era, counts in results.items():
        print(f"\n## {era}: {args.calls} calls after {args.warmup}\n")
        print(table(counts, args.top))
    if len(results) == 2:
        print("\n## where the two wires differ\n")
        print(difference(results["legacy"], results["modern"], args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
