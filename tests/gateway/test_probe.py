"""``switchboard check --probe`` (gateway/probe.py) against real backends: the builtin demo, the
conformance fixture over stdio and over HTTP (the official SDK), the MCPL, MGP and MCPC test peers,
a port nobody listens on, a backend too slow to start, and a stubborn stdio child that ignores
SIGTERM (the probe must still leave no process behind)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.config import Config
from gateway.probe import probe
from tests.support import PROJECT_ROOT, crashy_backend, fixture_stdio_backend, free_port, stdio_backend
from tools.procs import alive


def _config(backends: dict[str, Any], prefix: str = "conditional") -> Config:
    return Config.model_validate({"backends": backends, "federation": {"prefix": prefix}})


def _check(
    tmp_path: Path, config: dict[str, Any], *extra: str, timeout_s: float = 60
) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return subprocess.run(
        [sys.executable, "-m", "gateway", "check", "-c", str(path), "--probe", *extra],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


async def test_probe_reports_reachable_backends_and_an_unreachable_required_one(
    tmp_path: Path, modern_fixture_url: str
) -> None:
    pid_file = tmp_path / "crashy.pid"
    grandchild_file = tmp_path / "grandchild.pid"
    dead_port = free_port()  # nobody listens there
    config = _config(
        {
            "demo": {"transport": "builtin"},
            "fixture": fixture_stdio_backend(),
            "modern": {"transport": "http", "url": modern_fixture_url},
            # Ignores SIGTERM and the end of stdin, and leaves a grandchild: only SIGKILL of its group ends it.
            "stubborn": crashy_backend(
                env={
                    "CRASHY_PID_FILE": str(pid_file),
                    "CRASHY_STUBBORN": "1",
                    "CRASHY_GRANDCHILD_PID_FILE": str(grandchild_file),
                }
            ),
            "gone": {"transport": "http", "url": f"http://127.0.0.1:{dead_port}/mcp", "required": True},
        }
    )
    started = time.monotonic()
    report = await probe(config, timeout_s=15)
    elapsed = time.monotonic() - started
    by_name = {b.name: b for b in report.backends}

    assert by_name["demo"].reachable and by_name["demo"].counts == {
        "tools": 3,
        "prompts": 1,
        "resources": 1,
        "resourceTemplates": 0,
    }
    fixture = by_name["fixture"]
    assert fixture.reachable and fixture.era == "legacy", fixture  # over stdio initialize goes first
    assert fixture.server["name"] == "switchboard-conformance-fixture"
    assert fixture.counts["tools"] > 10 and fixture.counts["prompts"] > 0 and fixture.dialects == {}
    modern = by_name["modern"]
    assert modern.reachable and modern.era == "modern" and modern.protocol == "2026-07-28", modern
    assert modern.counts["tools"] == fixture.counts["tools"]
    assert by_name["stubborn"].reachable and by_name["stubborn"].counts == {"tools": 4}

    gone = by_name["gone"]
    assert not gone.reachable and gone.required
    assert gone.error is not None and "cannot connect" in gone.error and str(dead_port) in gone.error
    assert report.unreachable_required == ["gone"] and not report.ok and report.collisions == []
    assert report.notes == []

    # Everything it started is stopped before it returns: the stubborn child and its grandchild too. The
    # grandchild is not the probe's to reap: SIGKILL was sent to its group, and on a loaded machine the
    # kernel may take a moment to end it, so it gets a bounded grace.
    for path in (pid_file, grandchild_file):
        pid = int(path.read_text())
        for _ in range(60):  # 3 s at most
            if not alive(pid):
                break
            await asyncio.sleep(0.05)
        assert not alive(pid), f"{path.name}: process {pid} outlived the probe"
    assert elapsed < 40, elapsed  # a refused port is reported at once, the stubborn child needs SIGKILL (~5 s)
    lines = "\n".join(report.lines())
    assert "backend gone (http, required): UNREACHABLE: " in lines
    assert "probe: FAILED: required backend(s) unreachable: gone" in lines


async def test_probe_detects_mcpl_mgp_and_mcpc() -> None:
    config = _config(
        {
            "memory": stdio_backend("tests.e2e.backends.mcpl_server", "--role", "memory"),
            "guarded": stdio_backend("tests.e2e.backends.mgp_server", "shell.execute"),
            "tasks": {
                "transport": "stdio",
                "command": sys.executable,
                "args": [str(PROJECT_ROOT / "tests" / "mcpc_peers" / "old_server.py"), "--version", "0.2.4"],
            },
        },
        prefix="always",
    )
    report = await probe(config, timeout_s=15)
    by_name = {b.name: b for b in report.backends}
    assert set(by_name["memory"].dialects) == {"MCPL"}, by_name["memory"]
    assert by_name["memory"].dialects["MCPL"]["feature_sets"], "an MCPL server declares feature sets"
    assert set(by_name["guarded"].dialects) == {"MGP"}, by_name["guarded"]
    assert by_name["tasks"].dialects == {
        "MCPC": {"version": "0.2.4", "provider": by_name["tasks"].dialects["MCPC"]["provider"]}
    }
    # The MCPC handshake tools are the gateway's business: not counted among the backend's tools.
    assert by_name["tasks"].counts["tools"] == 6
    assert report.ok and report.collisions == []
    assert "  dialects: MCPC 0.2.4" in report.lines()


def test_check_probe_exits_non_zero_on_a_collision_between_two_real_backends(
    tmp_path: Path, fixture_backend_url: str
) -> None:
    """The fixture over stdio and over HTTP offer the same names: under prefix never, /mcp withholds them."""
    backends = {"http": {"transport": "http", "url": fixture_backend_url}, "local": fixture_stdio_backend()}
    collided = _check(tmp_path, {"backends": backends, "federation": {"prefix": "never"}}, "--json")
    assert collided.returncode == 1, collided.stderr
    report = json.loads(collided.stdout)
    assert not report["ok"] and report["unreachable_required"] == []
    tools = {c["name"]: c["backends"] for c in report["collisions"] if c["kind"] == "tools"}
    assert len(tools) == report["backends"]["local"]["counts"]["tools"] > 10
    assert set(map(tuple, tools.values())) == {("http", "local")}
    assert {c["kind"] for c in report["collisions"]} >= {"tools", "prompts", "resources"}

    # The same backends prefixed (conditional with two backends): no collision, exit 0, a readable report.
    fine = _check(tmp_path, {"backends": backends}, "--timeout", "15")
    assert fine.returncode == 0, fine.stdout + fine.stderr
    assert "backend http (http): reachable" in fine.stdout and "backend local (stdio): reachable" in fine.stdout
    assert fine.stdout.rstrip().endswith("probe: ok"), fine.stdout
    assert fine.stderr == "", "the gateway's own log stays quiet without --verbose"


def test_check_probe_bounds_a_backend_that_does_not_answer(tmp_path: Path) -> None:
    """A stdio backend that takes 60 s to start is reported after --timeout; not required, so exit 0."""
    slow = crashy_backend(env={"CRASHY_START_DELAY_S": "60"})
    started = time.monotonic()
    result = _check(tmp_path, {"backends": {"slow": slow}}, "--timeout", "1", "--json")
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stdout + result.stderr
    slow_report = json.loads(result.stdout)["backends"]["slow"]
    assert not slow_report["reachable"] and slow_report["error"].startswith("no answer within 1s"), slow_report
    assert elapsed < 25, elapsed  # 1 s of probing, then the child is stopped (SIGTERM at the latest after 2 s)


@pytest.mark.parametrize("required", [True, False])
def test_check_probe_exit_code_follows_required(tmp_path: Path, required: bool) -> None:
    gone = {"transport": "http", "url": f"http://127.0.0.1:{free_port()}/mcp", "required": required}
    result = _check(tmp_path, {"backends": {"gone": gone, "demo": {"transport": "builtin"}}})
    assert result.returncode == (1 if required else 0), result.stdout + result.stderr
    assert "backend gone (http" in result.stdout and "UNREACHABLE" in result.stdout
