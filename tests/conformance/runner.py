"""Runs the official MCP conformance suite (server side) against a URL and parses its results.

    report = run_conformance("http://127.0.0.1:8123/mcp")              # whole 2025-11-25 server set
    report = run_conformance(url, scenarios=["tools-call-sampling"])   # selected scenarios only
    assert not report.failed, report.format_failures()

CLI: python -m tests.conformance.runner --url URL [--requirements 2025-11-25] [--scenario S ...]

How the suite reports (0.2.0-alpha.12), and what is parsed here:
- Each scenario produces a list of checks, each with a `status` of SUCCESS / FAILURE /
  WARNING / INFO / SKIPPED, an `id`, a `description` and, when not successful, an
  `errorMessage`. A scenario fails iff one of its checks is FAILURE; WARNING never fails it.
  Every scenario also gets a `wire-schema-valid` check: all JSON-RPC messages the server sent
  are validated against the spec's JSON schema for the negotiated version.
- With `-o DIR`, each scenario's checks are written to `DIR/server-<scenario>-<timestamp>/checks.json`
  (timestamp = ISO time with ':' and '.' replaced by '-'). These give the failure messages.
- A whole-set run (`--requirements REV`) prints `=== SUMMARY ===` followed by one line per
  scenario, `✓ <scenario>: N passed, M failed` (✗ when M > 0), then `Total: N passed, M failed`,
  then possibly `Not scored for REV: ...` with one `  ✓|✗ <scenario> (<reason>)` line per scenario
  that was run but is not part of the scored set. The exit code is non-zero iff a *scored*
  scenario failed. These summary lines are the authoritative per-scenario verdicts (a scenario
  that crashed the harness has no checks.json but still gets a summary line).
- `--requirements` cannot be combined with `--scenario`, so selected scenarios are run one at a
  time as `--scenario S --spec-version REV --force` (what `--requirements` does internally) and
  judged from their checks.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

CONFORMANCE_DIR = Path(__file__).resolve().parent
PROJECT_ROOT = CONFORMANCE_DIR.parent.parent
INSTALL_SCRIPT = CONFORMANCE_DIR / "install.sh"

_SUMMARY_LINE = re.compile(r"^([✓✗]) (\S+): (\d+) passed, (\d+) failed\s*$")
_NOT_SCORED_LINE = re.compile(r"^\s+([✓✗]) (\S+) \(([^)]*)\)\s*$")
_RUNNING_LINE = re.compile(r"^=== Running scenario: (\S+) ===")
_RESULT_DIR = re.compile(r"^server-(?P<scenario>.+)-\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}-\d{3}Z$")


class ConformanceError(RuntimeError):
    """The suite could not be run at all (not installed, server unreachable, harness crashed...)."""


class ConformanceTimeout(ConformanceError):
    """The suite did not finish within the hard timeout; it was killed."""


@dataclass
class ConformanceReport:
    passed: list[str]
    """Scenarios whose checks contain no FAILURE, in run order."""
    failed: dict[str, list[str]]
    """Failing scenarios -> one `<check id>: <message>` line per failing check."""
    raw_output: str
    """Combined stdout/stderr of the suite (of every invocation, for per-scenario runs)."""
    requirements: str = "2025-11-25"
    not_scored: dict[str, str] = field(default_factory=dict)
    """Scenarios the requirement set runs but does not score -> reason (e.g. 'pending')."""
    warnings: dict[str, list[str]] = field(default_factory=dict)
    """Scenarios with WARNING checks (these do not fail a scenario) -> messages."""
    checks: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """Raw checks per scenario, as written by the suite to checks.json."""
    exit_code: int = 0

    @property
    def scenarios(self) -> list[str]:
        return [*self.passed, *self.failed]

    @property
    def scored_failures(self) -> dict[str, list[str]]:
        """Failures that count against conformance for the requirement set."""
        return {s: m for s, m in self.failed.items() if s not in self.not_scored}

    def format_failures(self) -> str:
        lines: list[str] = []
        for scenario, messages in self.failed.items():
            note = f" [not scored: {self.not_scored[scenario]}]" if scenario in self.not_scored else ""
            lines.append(f"✗ {scenario}{note}")
            lines.extend(f"    - {m}" for m in messages)
        return "\n".join(lines)

    def summary(self) -> str:
        scored = [s for s in self.scenarios if s not in self.not_scored]
        ok = [s for s in self.passed if s not in self.not_scored]
        text = (
            f"conformance {self.requirements}: {len(ok)}/{len(scored)} scored scenarios passed"
            f", {len(self.scored_failures)} failed"
        )
        if self.not_scored:
            ns_ok = sum(1 for s in self.not_scored if s in self.passed)
            text += f"; not scored: {ns_ok}/{len(self.not_scored)} passed"
        if self.failed:
            text += "\n" + self.format_failures()
        return text


# --------------------------------------------------------------------------------------
# Installation
# --------------------------------------------------------------------------------------


def ensure_installed(timeout_s: float = 300) -> tuple[Path, Path]:
    """Runs install.sh (idempotent, instant when already installed); returns (node, entry point)."""
    if shutil.which("bash") is None:
        raise ConformanceError("bash is required to run tests/conformance/install.sh")
    try:
        proc = subprocess.run(
            ["bash", str(INSTALL_SCRIPT)],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise ConformanceError(f"install.sh did not finish within {timeout_s:.0f}s") from exc
    if proc.returncode != 0:
        raise ConformanceError(f"install.sh failed (exit {proc.returncode}):\n{proc.stderr.strip()}")
    lines = proc.stdout.strip().splitlines()
    entry = Path(lines[-1]) if lines else Path()
    # entry = <prefix>/node_modules/@modelcontextprotocol/conformance/dist/index.js
    node = entry.parents[3] / ".bin" / "node" if len(entry.parents) > 3 else Path()
    if not entry.is_file() or not node.is_file():
        raise ConformanceError(f"install.sh succeeded but did not yield a usable suite: {proc.stdout!r}")
    return node, entry


def required_scenarios(requirements: str = "2025-11-25", leg: str = "server") -> list[str]:
    """The scored scenarios of a requirement set, read from the installed suite's YAML."""
    _, entry = ensure_installed()
    path = entry.parents[1] / "requirements" / f"{requirements}.yaml"
    if not path.is_file():
        raise ConformanceError(f"no requirement set {requirements!r} at {path}")
    names: list[str] = []
    in_leg = False
    # Tiny subset parser: a top-level `leg:` key followed by `  - name` items.
    for line in path.read_text().splitlines():
        if line and not line[0].isspace() and not line.startswith("#"):
            in_leg = line.rstrip() == f"{leg}:"
            continue
        item = re.match(r"^\s+-\s+(\S+)\s*$", line)
        if in_leg and item:
            names.append(item.group(1))
    return names


# --------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------


def _check_reachable(url: str, timeout_s: float = 5.0) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConformanceError(f"not an http(s) URL: {url!r}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname, port), timeout=timeout_s):
            pass
    except OSError as exc:
        raise ConformanceError(f"server under test is not reachable at {parts.hostname}:{port}: {exc}") from exc


def _run_suite(cmd: list[str], deadline: float) -> tuple[int, str]:
    """Runs one suite invocation, killing its whole process group at the deadline."""
    env = {**os.environ, "NO_COLOR": "1", "FORCE_COLOR": "0"}
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            out.seek(0)
            output = out.read().decode("utf-8", "replace")
            running = _RUNNING_LINE.findall(output)
            where = f" (while running scenario {running[-1]!r})" if running else ""
            raise ConformanceTimeout(
                f"conformance suite killed after hitting the hard timeout{where}\n--- output ---\n{output}"
            ) from None
        out.seek(0)
        return proc.returncode, out.read().decode("utf-8", "replace")


def _check_message(check: dict[str, Any]) -> str:
    message = check.get("errorMessage") or check.get("description") or ""
    return f"{check.get('id', '?')}: {message}".strip()


def _load_checks(output_dir: Path) -> dict[str, list[dict[str, Any]]]:
    checks: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(output_dir.glob("*/checks.json")):
        match = _RESULT_DIR.match(path.parent.name)
        if match is None:
            continue
        try:
            checks[match["scenario"]] = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
    return checks


def _parse_summary(output: str) -> tuple[dict[str, bool], dict[str, str]]:
    verdicts: dict[str, bool] = {}
    not_scored: dict[str, str] = {}
    lines = output.splitlines()
    try:
        start = lines.index("=== SUMMARY ===")
    except ValueError:
        return verdicts, not_scored
    in_not_scored = False
    for line in lines[start + 1 :]:
        if line.startswith("Not scored for "):
            in_not_scored = True
            continue
        if in_not_scored:
            match = _NOT_SCORED_LINE.match(line)
            if match:
                not_scored[match[2]] = match[3]
            continue
        match = _SUMMARY_LINE.match(line)
        if match:
            verdicts[match[2]] = match[1] == "✓" and match[4] == "0"
    return verdicts, not_scored


def _build_report(
    order: list[str],
    verdicts: dict[str, bool],
    checks: dict[str, list[dict[str, Any]]],
    output: str,
    requirements: str,
    not_scored: dict[str, str],
    exit_code: int,
) -> ConformanceReport:
    report = ConformanceReport(
        passed=[],
        failed={},
        raw_output=output,
        requirements=requirements,
        not_scored=not_scored,
        checks=checks,
        exit_code=exit_code,
    )
    for scenario in order:
        scenario_checks = checks.get(scenario, [])
        failures = [_check_message(c) for c in scenario_checks if c.get("status") == "FAILURE"]
        warnings = [_check_message(c) for c in scenario_checks if c.get("status") == "WARNING"]
        if warnings:
            report.warnings[scenario] = warnings
        ok = verdicts.get(scenario, bool(scenario_checks) and not failures)
        if ok and not failures:
            report.passed.append(scenario)
        else:
            report.failed[scenario] = failures or [
                "scenario failed without a FAILURE check on record (harness error?); see raw_output"
            ]
    return report


def run_conformance(
    url: str,
    requirements: str = "2025-11-25",
    scenarios: list[str] | None = None,
    timeout_s: float = 600,
    scenario_timeout_s: float = 30,
) -> ConformanceReport:
    """Runs the conformance suite's server scenarios against `url` (the MCP endpoint).

    `scenarios=None` runs the whole requirement set (scored plus not-scored scenarios);
    otherwise only the named scenarios, at the requirement set's protocol version.
    `timeout_s` is a hard limit for the whole run; `scenario_timeout_s` is the suite's own
    per-scenario limit (a timed-out scenario fails with a `scenario-timeout` check).

    Raises ConformanceError if the suite cannot run at all, ConformanceTimeout on the hard limit.
    """
    deadline = time.monotonic() + timeout_s
    _check_reachable(url)
    node, entry = ensure_installed()
    base = [str(node), str(entry), "server", "--url", url, "--timeout", str(int(scenario_timeout_s * 1000))]

    with tempfile.TemporaryDirectory(prefix="conformance-") as tmp:
        out_dir = Path(tmp)
        if scenarios is None:
            code, output = _run_suite([*base, "--requirements", requirements, "-o", str(out_dir)], deadline)
            verdicts, not_scored = _parse_summary(output)
            if not verdicts:
                raise ConformanceError(f"conformance suite produced no results (exit {code}):\n{output}")
            checks = _load_checks(out_dir)
            return _build_report(list(verdicts), verdicts, checks, output, requirements, not_scored, code)

        outputs: list[str] = []
        worst = 0
        for scenario in scenarios:
            cmd = [
                *base,
                "--scenario",
                scenario,
                "--spec-version",
                requirements,
                "--force",
                "-o",
                str(out_dir),
            ]
            code, output = _run_suite(cmd, deadline)
            outputs.append(f"$ {' '.join(cmd)}\n{output}")
            worst = max(worst, code)
            if "Test Results:" not in output:
                raise ConformanceError(
                    f"conformance suite could not run scenario {scenario!r} (exit {code}):\n{output}"
                )
        checks = _load_checks(out_dir)
        return _build_report(list(scenarios), {}, checks, "\n".join(outputs), requirements, {}, worst)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run the MCP conformance suite's server scenarios.")
    parser.add_argument("--url", required=True, help="MCP endpoint, e.g. http://127.0.0.1:8123/mcp")
    parser.add_argument("--requirements", default="2025-11-25")
    parser.add_argument("--scenario", action="append", help="run only this scenario (repeatable)")
    parser.add_argument("--timeout", type=float, default=600, help="hard timeout for the whole run, seconds")
    parser.add_argument("--scenario-timeout", type=float, default=30, help="per-scenario timeout, seconds")
    parser.add_argument("--raw", action="store_true", help="also print the suite's own output")
    args = parser.parse_args(argv)
    try:
        report = run_conformance(args.url, args.requirements, args.scenario, args.timeout, args.scenario_timeout)
    except ConformanceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.raw:
        print(report.raw_output)
    print(report.summary())
    return 1 if report.scored_failures else 0


if __name__ == "__main__":
    sys.exit(main())
