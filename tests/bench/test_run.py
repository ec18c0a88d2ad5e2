"""bench/run.py with --rounds, its targets faked: the ABBA order, the failed round named, exit status 1."""

from __future__ import annotations

import argparse
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from bench import run
from bench.roundtrip.measure import TargetOutcome
from tests.bench.roundtrip.test_rounds import _m, _outcome


def _fake_run_target(ran: list[str]) -> Callable[[argparse.Namespace, str, Path], TargetOutcome]:
    """Each target measured at once; switchboard's second run fails at c=16."""

    def fake(args: argparse.Namespace, name: str, tmp: Path) -> TargetOutcome:
        ran.append(name)
        if name == "switchboard" and ran.count(name) == 2:
            return _outcome(name, _m(name, 1, 900.0), status="failed", reason="c=16: boom\nlog tail")
        return _outcome(name, *(_m(name, c, 1000.0 if name == "direct" else 500.0) for c in (1, 16)))

    return fake


def test_rounds_alternate_the_order_and_a_failed_round_fails_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ran: list[str] = []
    monkeypatch.setattr(run, "_run_target", _fake_run_target(ran))
    monkeypatch.setattr(run, "_install_signal_handlers", lambda: None)
    monkeypatch.setattr(run, "versions", dict)
    monkeypatch.setattr(shutil, "which", lambda _: "/usr/bin/wrk")  # run.py checks for wrk first
    out_json = tmp_path / "latest.json"
    argv = ["--rounds", "3", "--targets", "switchboard,direct", "--concurrency", "1,16", "--json", str(out_json)]

    assert run.main(argv) == 1

    assert ran == ["direct", "switchboard", "switchboard", "direct", "direct", "switchboard"]
    out = capsys.readouterr().out
    assert "Medians of 3 rounds" in out
    assert "| switchboard | 16 | 2 | 500 (500-500) | 0.50x direct |" in out  # round 2 never reached c=16
    assert "| switchboard | — | failed in round 2 of 3 |" in out
    assert "- switchboard failed: round 2 failed: c=16: boom" in out
    report = json.loads(out_json.read_text())
    assert report["settings"]["rounds"] == 3
    canonical, reversed_ = ["direct", "switchboard"], ["switchboard", "direct"]
    assert [r["order"] for r in report["rounds"]] == [canonical, reversed_, canonical]
    assert [t["round_status"] for t in report["targets"]] == [["ok"] * 3, ["ok", "failed", "ok"]]
