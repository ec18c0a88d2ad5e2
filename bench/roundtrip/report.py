"""Reporting: the Markdown tables, the machine and versions, and the dated section of bench/RESULTS.md."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

from bench.roundtrip.common import (
    EVERYTHING_JS,
    MCP_PROXY_VENV,
    MODERN_PROTOCOL_VERSION,
    PROTOCOL_VERSION,
    RESULTS_MD,
    ROOT,
    SUPERGATEWAY_JS,
    StartError,
    log,
)
from bench.roundtrip.goals import Goal
from bench.roundtrip.measure import Measurement, TargetOutcome
from bench.roundtrip.targets import node_binary


def _fmt(v: float | None, spec: str, signed: bool = False) -> str:
    if v is None:
        return "—"
    return format(v, ("+" if signed else "") + spec)


def markdown_table(outcomes: dict[str, TargetOutcome], rounds: int = 1) -> str:
    """The results table; with `rounds` > 1 a line above it says they are medians, a column how many rounds
    measured each row, and req/s and the proxy's CPU per call carry their min-max over those rounds."""
    several = rounds > 1
    head = (
        "| target | conc |"
        + (" rounds | req/s (min-max) |" if several else " req/s |")
        + " x baseline | p50 ms | p99 ms | +p50 ms | +p99 ms | errors "
        + ("| proxy CPU µs/call (min-max) |" if several else "| proxy CPU µs/call |")
        + " backend CPU µs/call |"
    )
    ncols = 12 if several else 11
    rows = [head, "|" + "---|" * ncols]
    for o in outcomes.values():
        rows += [_row(o.name, m, several) for m in o.measurements]
        if o.status != "ok":
            rows.append(f"| {o.name} | — | {_status(o)} |" + " |" * (ncols - 3))
    if not several:
        return "\n".join(rows)
    heading = (
        f"Medians of {rounds} rounds (order alternating canonical / reversed; each ratio and added latency "
        "paired with its baseline within a round, then medianed); req/s and proxy CPU: median (min-max)."
    )
    return heading + "\n\n" + "\n".join(rows)


def _row(name: str, m: Measurement, several: bool) -> str:
    ratio = f"{m.ratio_to_baseline:.2f}x {m.baseline}" if m.ratio_to_baseline is not None else "—"
    errors = f"**{m.errors} ⚠**" if m.flagged else "0"
    rps = f"{m.rps:,.0f}" + (_spread(m, "rps", ",.0f") if several else "")
    proxy = _fmt(m.proxy_cpu_us_per_call, ".0f") + (_spread(m, "proxy_cpu_us_per_call", ".0f") if several else "")
    return (
        f"| {name} | {m.concurrency} |"
        + (f" {m.rounds} |" if several else "")
        + f" {rps} | {ratio} | {m.p50_ms:.3f} | {m.p99_ms:.3f} "
        f"| {_fmt(m.added_p50_ms, '.3f', True)} | {_fmt(m.added_p99_ms, '.3f', True)} | {errors} "
        f"| {proxy} | {_fmt(m.backend_cpu_us_per_call, '.0f')} |"
    )


def _spread(m: Measurement, name: str, spec: str) -> str:
    lo_hi = m.spread.get(name)
    return f" ({format(lo_hi[0], spec)}-{format(lo_hi[1], spec)})" if lo_hi else ""


def _status(o: TargetOutcome) -> str:
    """'failed', or with rounds which of them: 'failed in round 2' (the others' medians are above it)."""
    bad = [str(k) for k, status in enumerate(o.round_status, 1) if status != "ok"]
    if not bad:
        return o.status
    return f"{o.status} in round{'s' if len(bad) > 1 else ''} {', '.join(bad)} of {len(o.round_status)}"


def goals_table(goals: list[Goal]) -> str:
    rows = ["| goal | measured | status |", "|---|---|---|"]
    for g in goals:
        status = {"met": "✅ met", "not met": "❌ not met"}.get(g.status, g.status)
        rows.append(f"| {g.goal} | {g.measured} | {status} |")
    return "\n".join(rows)


def _cmd_output(argv: list[str], cwd: Path | None = None) -> str:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, cwd=cwd, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "unavailable"
    text = (proc.stdout or proc.stderr).strip()
    return text.splitlines()[0] if text else "unavailable"


def machine_info() -> dict[str, Any]:
    cpu_model = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    return {
        "uname": _cmd_output(["uname", "-srm"]),
        "cpu_model": cpu_model,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
    }


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def versions() -> dict[str, str]:
    v: dict[str, str] = {}
    v["wrk"] = _cmd_output(["wrk", "-v"]).split(" [")[0].removeprefix("wrk ")
    try:
        node = node_binary()
        v["node"] = _cmd_output([node, "--version"])
    except StartError:
        v["node"] = "missing"
    for key, js in (("supergateway", SUPERGATEWAY_JS), ("server-everything", EVERYTHING_JS)):
        with contextlib.suppress(OSError, ValueError, KeyError):
            v[key] = json.loads((js.parent.parent / "package.json").read_text())["version"]
    mp_py = MCP_PROXY_VENV / "bin" / "python"
    if mp_py.exists():
        for dist, key in (("mcp-proxy", "mcp-proxy"), ("mcp", "mcp (mcp-proxy venv)")):
            code = f"import importlib.metadata as m; print(m.version({dist!r}))"
            v[key] = _cmd_output([str(mp_py), "-c", code])
    import importlib.metadata as md

    for dist in ("mcp", "uvicorn", "httptools", "uvloop", "orjson"):
        with contextlib.suppress(md.PackageNotFoundError):
            v[f"{dist} (project venv)"] = md.version(dist)
    dists = md.packages_distributions().get("gateway", [])
    for dist in dists:
        with contextlib.suppress(md.PackageNotFoundError):
            v[f"switchboard ({dist})"] = md.version(dist)
    v["switchboard git"] = _cmd_output(["git", "describe", "--always", "--dirty"], cwd=ROOT)
    return v


def write_results_md(report: dict[str, Any], table: str, goals_md: str) -> None:
    skipped = [o for o in report["targets"] if o["status"] != "ok"]
    sb_ok = all(o["status"] == "ok" for o in report["targets"] if o["name"].startswith("switchboard"))
    sb_ran = any(o["name"].startswith("switchboard") for o in report["targets"])
    kind = "full run" if sb_ok and sb_ran else "peers-only baseline (Switchboard not measured)"
    mi = report["machine"]
    st = report["settings"]
    warm = (
        f"each target first warmed {st['target_warmup_s']:g} s at c={st['target_warmup_concurrency']}, "
        if st.get("target_warmup_s")
        else ""
    )
    rounds = st.get("rounds", 1)
    rounds_note = (
        f"{rounds} rounds of the whole target list (odd rounds in this order, even ones reversed; medians), "
        if rounds > 1
        else ""
    )
    lines = [
        "",
        f"## {report['started_at']} — {kind}",
        "",
        *([f"- note: {report['label']}"] if report.get("label") else []),
        f"- machine: `{mi['uname']}`, {mi['cpu_model']}, {mi['cores']} cores "
        "(wrk, proxy and backend share them; no pinning)",
        f"- other load: load average {mi['loadavg_start']} at start, {mi['loadavg_end']} at end; "
        f"processes other than wrk, proxy and backend used up to {mi['max_other_load_cores']:.2f} cores "
        "during the measured runs",
        f"- settings: {rounds_note}{st['duration_s']:g} s per run after a {st['warmup_s']:g} s warm-up, {warm}"
        f"concurrency {', '.join(map(str, st['concurrency']))}, wrk threads {st['wrk_threads']}, "
        f"protocol {PROTOCOL_VERSION} sessions (switchboard-modern: stateless {MODERN_PROTOCOL_VERSION} "
        "requests), SDK server answers "
        f"{'JSON' if st['sdk_json_response'] else 'SSE (SDK default)'}",
        "- versions: " + ", ".join(f"{k} {val}" for k, val in report["versions"].items()),
    ]
    for o in skipped:
        reason = o["reason"].splitlines()[0] if o["reason"] else ""
        lines.append(f"- **{o['name']} {o['status']}**: {reason}")
    lines += ["", table, "", goals_md, ""]
    if not RESULTS_MD.exists():
        RESULTS_MD.write_text(
            "# Benchmark results\n\nAppended by `bash bench/run.sh --record` (see bench/README.md for "
            "what the numbers mean and the topology of each peer).\n"
        )
    with RESULTS_MD.open("a") as fh:
        fh.write("\n".join(lines))
    log(f"appended a section to {RESULTS_MD.relative_to(ROOT)}")
