#!/usr/bin/env python3
"""`make bench`: tools/call round-trip benchmark of Switchboard and its peers.

For every target (a server, or a proxy in front of an echo backend) the driver
starts the processes on free 127.0.0.1 ports, opens one MCP session
(`initialize` + `notifications/initialized`; for switchboard-modern none: its
requests are stateless 2026-07-28 ones, `server/discover` + `tools/list`),
checks that one `tools/call` of `echo` really comes back with the echoed text,
then for each concurrency level runs wrk (bench/wrk/tools_call.lua, or
tools_call_modern.lua for the 2026-07-28 wire) for a warm-up and a measured
run while sampling the CPU time of the proxy and backend processes from /proc.

With --rounds N the whole target list is measured N times, in the canonical order in odd rounds and
reversed in even ones (ABBA), and the table and goals read medians over the rounds of values paired within
each round (bench/roundtrip/rounds.py).

Results: a Markdown table on stdout, raw JSON in bench/results/latest.json (every round's measurements and
the aggregate) and, with --record, a dated section appended to bench/RESULTS.md.

See bench/README.md for what each number means and the topology of each peer.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from types import FrameType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.roundtrip.common import LOG_DIR, MODERN_PROTOCOL_VERSION, PROTOCOL_VERSION, RESULTS_DIR, StartError, log
from bench.roundtrip.goals import Goal, evaluate_goals
from bench.roundtrip.measure import TARGET_WARMUP_CONCURRENCY, TargetOutcome, add_derived, measure_target
from bench.roundtrip.report import goals_table, loadavg, machine_info, markdown_table, versions, write_results_md
from bench.roundtrip.rounds import aggregate, round_order
from bench.roundtrip.services import stop_all
from bench.roundtrip.targets import ALL_TARGETS, TargetSpec, build_target


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    return float(raw) if raw else default


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="tools/call round-trip benchmark (see bench/README.md)")
    p.add_argument(
        "--duration",
        type=float,
        default=_env_float("BENCH_DURATION", 10.0),
        help="seconds per measured run (env BENCH_DURATION, default 10)",
    )
    p.add_argument(
        "--warmup",
        type=float,
        default=_env_float("BENCH_WARMUP", 2.0),
        help="seconds of warm-up before each run (env BENCH_WARMUP, default 2)",
    )
    p.add_argument(
        "--target-warmup",
        type=float,
        default=_env_float("BENCH_TARGET_WARMUP", 5.0),
        help=f"seconds of warm-up at c={TARGET_WARMUP_CONCURRENCY} once per target, before its first level: a JIT "
        "(node) or a cache warms by calls served, so every target gets as many as its speed at c=16 allows "
        "before c=1 is measured (env BENCH_TARGET_WARMUP, default 5; 0: none)",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=int(os.environ.get("BENCH_ROUNDS", "1")),
        help="measure the whole target list N times, reversing the order every other round, and report medians "
        "of values paired within a round (env BENCH_ROUNDS, default 1)",
    )
    p.add_argument(
        "--concurrency",
        default=os.environ.get("BENCH_CONCURRENCY", "1,16,64"),
        help="comma-separated wrk connection counts (env BENCH_CONCURRENCY)",
    )
    p.add_argument(
        "--targets",
        default=os.environ.get("BENCH_TARGETS", ",".join(ALL_TARGETS)),
        help=f"comma-separated subset of {','.join(ALL_TARGETS)} (env BENCH_TARGETS)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=int(os.environ.get("BENCH_WRK_THREADS", "1")),
        help="wrk threads (env BENCH_WRK_THREADS, default 1: wrk shares the 2 cores)",
    )
    p.add_argument(
        "--sdk-json-response",
        action="store_true",
        help="run the SDK echo server with json_response=True instead of SSE answers",
    )
    p.add_argument("--record", action="store_true", help="append a dated section to bench/RESULTS.md")
    p.add_argument("--label", default="", help="free-text note for the RESULTS.md section")
    p.add_argument("--json", type=Path, default=RESULTS_DIR / "latest.json", help="where to write raw JSON")
    args = p.parse_args(argv)
    args.concurrency_list = [int(c) for c in args.concurrency.split(",") if c.strip()]
    args.target_list = [t.strip() for t in args.targets.split(",") if t.strip()]
    unknown = [t for t in args.target_list if t not in ALL_TARGETS]
    if unknown:
        p.error(f"unknown target(s): {', '.join(unknown)}")
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    # The canonical order (baselines first); even rounds run it reversed, and ratios are computed after
    # each round, so the order does not matter to them.
    args.target_list = [t for t in ALL_TARGETS if t in args.target_list]
    return args


def _install_signal_handlers() -> None:
    def handler(signum: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGHUP, handler)


@contextlib.contextmanager
def _cleanup() -> Iterator[None]:
    try:
        yield
    finally:
        stop_all()


def _plan(args: argparse.Namespace) -> str:
    per_round = len(args.target_list) * (
        len(args.concurrency_list) * (args.duration + args.warmup) + args.target_warmup
    )
    rounds = f"{args.rounds} rounds (order reversed every other round) of " if args.rounds > 1 else ""
    return (
        f"{rounds}targets: {', '.join(args.target_list)}; concurrency {args.concurrency_list}; "
        f"{args.duration:g}s + {args.warmup:g}s warm-up each (≈{args.rounds * per_round / 60:.1f} min of load)"
    )


def _run_round(args: argparse.Namespace, round_no: int, order: list[str], tmp: Path) -> dict[str, TargetOutcome]:
    """Every target of `order`, each started, measured and stopped (its own warm-up), then the ratios to
    the baselines of this round. Returned in the canonical order, whatever order they ran in."""
    where = f" in round {round_no}" if args.rounds > 1 else ""
    if args.rounds > 1:
        log(f"round {round_no} of {args.rounds}: {', '.join(order)}")
    tmp.mkdir(parents=True, exist_ok=True)
    outcomes: dict[str, TargetOutcome] = {}
    for name in order:
        outcome = _run_target(args, name, tmp)
        if outcome.status == "skipped":
            log(f"SKIPPED {name}{where}: {outcome.reason}")
        elif outcome.status == "failed":
            log(f"FAILED {name}{where}: {outcome.reason}")
        outcomes[name] = outcome
    add_derived(outcomes)
    return {name: outcomes[name] for name in args.target_list}


def _run_target(args: argparse.Namespace, name: str, tmp: Path) -> TargetOutcome:
    spec: TargetSpec | None = None
    try:
        spec = build_target(name, tmp, args.sdk_json_response)
        return measure_target(spec, args.concurrency_list, args.duration, args.warmup, args.threads, args.target_warmup)
    except StartError as exc:
        return TargetOutcome(name, "skipped", "", reason=str(exc))
    finally:
        if spec is not None:
            for svc in reversed(spec.services):
                svc.stop()


def _report(
    args: argparse.Namespace,
    started: dt.datetime,
    load_start: str,
    outcomes: dict[str, TargetOutcome],
    rounds: list[dict[str, TargetOutcome]],
    goals: list[Goal],
) -> dict[str, Any]:
    finished = dt.datetime.now(dt.UTC)
    all_ms = [m for r in rounds for o in r.values() for m in o.measurements]  # every round's own runs
    return {
        "started_at": started.strftime("%Y-%m-%d %H:%M UTC"),
        "finished_at": finished.strftime("%Y-%m-%d %H:%M:%S UTC"),
        "wall_time_s": round((finished - started).total_seconds(), 1),
        "machine": {
            **machine_info(),
            "loadavg_start": load_start,
            "loadavg_end": loadavg(),
            "max_other_load_cores": round(max((m.other_load_cores for m in all_ms), default=0.0), 2),
        },
        "versions": versions(),
        "settings": {
            "duration_s": args.duration,
            "warmup_s": args.warmup,
            "target_warmup_s": args.target_warmup,
            "target_warmup_concurrency": TARGET_WARMUP_CONCURRENCY,
            "concurrency": args.concurrency_list,
            "wrk_threads": args.threads,
            "protocol_version": PROTOCOL_VERSION,
            "modern_protocol_version": MODERN_PROTOCOL_VERSION,  # switchboard-modern's stateless requests
            "sdk_json_response": args.sdk_json_response,
            "rounds": args.rounds,  # odd rounds in the canonical order, even ones reversed
        },
        "label": args.label,
        # The aggregate (medians over the rounds; with one round, that round), which the tables and goals read.
        "targets": [asdict(o) for o in outcomes.values()],
        # Every round's raw measurements (targets in the canonical order; `order`: the order they ran in).
        "rounds": [
            {"round": k, "order": round_order(args.target_list, k), "targets": [asdict(o) for o in r.values()]}
            for k, r in enumerate(rounds, 1)
        ],
        "goals": [asdict(g) for g in goals],
    }


def _print_summary(
    report: dict[str, Any], outcomes: dict[str, TargetOutcome], rounds: list[dict[str, TargetOutcome]]
) -> None:
    for o in outcomes.values():
        if o.status != "ok":
            print(f"- {o.name} {o.status}: {o.reason.splitlines()[0] if o.reason else ''}")
    flagged = [
        f"{m.target}@c{m.concurrency}" + (f" (round {k})" if len(rounds) > 1 else "")
        for k, r in enumerate(rounds, 1)
        for o in r.values()
        for m in o.measurements
        if m.flagged
    ]
    if flagged:
        print(f"- ⚠ errors during: {', '.join(flagged)}")
    mi = report["machine"]
    print(
        f"- load average {mi['loadavg_start']} at start, {mi['loadavg_end']} at end; other processes used up "
        f"to {mi['max_other_load_cores']:.2f} cores during the measured runs"
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if shutil.which("wrk") is None:
        log("wrk not found: run `bash bench/run.sh` (it installs Debian's wrk)")
        return 2
    _install_signal_handlers()
    started = dt.datetime.now(dt.UTC)
    load_start = loadavg()
    log(_plan(args))
    rounds: list[dict[str, TargetOutcome]] = []
    with _cleanup(), tempfile.TemporaryDirectory(prefix="switchboard-bench-") as tmp:
        for k in range(1, args.rounds + 1):
            rounds.append(_run_round(args, k, round_order(args.target_list, k), Path(tmp) / f"round-{k}"))

    outcomes = aggregate(rounds)
    goals = evaluate_goals(outcomes, args.concurrency_list, rounds)
    table = markdown_table(outcomes, args.rounds)
    goals_md = goals_table(goals)
    report = _report(args, started, load_start, outcomes, rounds, goals)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")

    print()
    print(table)
    print()
    print(goals_md)
    print()
    _print_summary(report, outcomes, rounds)
    print(f"\nraw results: {args.json}  (process logs: {LOG_DIR}; wall time {report['wall_time_s']} s)")
    if args.record:
        write_results_md(report, table, goals_md)
    # One failed round fails the target's aggregate (rounds.py), so the exit status is as for one run.
    failed = [o.name for o in outcomes.values() if o.status == "failed"]
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        log("interrupted; all benchmark processes were stopped")
        sys.exit(130)
