"""The results table with N rounds: medians, their min-max, and which round of a target failed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench.roundtrip import report
from bench.roundtrip.report import markdown_table
from bench.roundtrip.rounds import aggregate
from tests.bench.roundtrip.test_rounds import _m, _outcome, _round


def test_several_rounds_show_medians_spreads_and_the_failed_round() -> None:
    rounds = [
        _round(
            direct=_outcome("direct", _m("direct", 64, 1000.0)),
            switchboard=_outcome("switchboard", _m("switchboard", 64, 500.0, proxy_cpu=70.0)),
        ),
        _round(
            direct=_outcome("direct", _m("direct", 64, 2000.0)),
            switchboard=_outcome("switchboard", status="failed", reason="c=64: boom"),
        ),
    ]
    lines = markdown_table(aggregate(rounds), 2).splitlines()
    assert lines[0].startswith("Medians of 2 rounds")
    assert "| rounds | req/s (min-max) |" in lines[2]
    assert lines[4].startswith("| direct | 64 | 2 | 1,500 (1,000-2,000) | — |")
    # switchboard: its one measuring round, paired with direct's round 1 (0.50x), no spread to show
    assert lines[5].startswith("| switchboard | 64 | 1 | 500 | 0.50x direct |")
    assert lines[5].endswith("| 0 | 70 | 20 |")
    assert lines[6] == "| switchboard | — | failed in round 2 of 2 |" + " |" * 9


def test_one_round_has_no_heading_and_no_rounds_column() -> None:
    one = _round(
        direct=_outcome("direct", _m("direct", 1, 1000.0)), sdk_direct=_outcome("sdk-direct", status="skipped")
    )
    lines = markdown_table(aggregate([one])).splitlines()
    assert lines[0].startswith("| target | conc | req/s | x baseline |")
    assert lines[2] == "| direct | 1 | 1,000 | — | 1.000 | 3.000 | — | — | 0 | — | 20 |"
    assert lines[3] == "| sdk-direct | — | skipped | | | | | | | | |"


def test_the_recorded_section_says_how_many_rounds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    results = tmp_path / "RESULTS.md"
    monkeypatch.setattr(report, "RESULTS_MD", results)
    monkeypatch.setattr(report, "ROOT", tmp_path)
    settings: dict[str, Any] = {
        "duration_s": 10.0,
        "warmup_s": 2.0,
        "target_warmup_s": 5.0,
        "target_warmup_concurrency": 16,
    }
    settings |= {"concurrency": [1, 64], "wrk_threads": 1, "sdk_json_response": False, "rounds": 3}
    machine = {"uname": "Linux", "cpu_model": "cpu", "cores": 2, "loadavg_start": "0", "loadavg_end": "0"}
    rep = {
        "started_at": "2026-11-25 10:00 UTC",
        "machine": {**machine, "max_other_load_cores": 0.1},
        "settings": settings,
        "versions": {"wrk": "4"},
        "targets": [{"name": "switchboard", "status": "failed", "reason": "round 2 failed: c=64: boom\n"}],
    }
    report.write_results_md(rep, "TABLE", "GOALS")
    text = results.read_text()
    assert "- settings: 3 rounds of the whole target list (odd rounds in this order, even ones reversed; " in text
    assert "- **switchboard failed**: round 2 failed: c=64: boom" in text
