"""The issue's goals judged from N rounds: per-round ratios, medianed; errors in any round flag the goal."""

from __future__ import annotations

from bench.roundtrip.goals import Goal, evaluate_goals
from bench.roundtrip.measure import TargetOutcome
from bench.roundtrip.rounds import aggregate
from tests.bench.roundtrip.test_rounds import _m, _outcome, _round

GOAL = "switchboard ≥ 0.40x direct req/s at c=64"


def _rounds(direct_rps: list[float], sb_rps: list[float], sb_errors: int = 0) -> list[dict[str, TargetOutcome]]:
    return [
        _round(
            direct=_outcome("direct", _m("direct", 64, d)),
            switchboard=_outcome("switchboard", _m("switchboard", 64, s, errors=sb_errors if k == 1 else 0)),
        )
        for k, (d, s) in enumerate(zip(direct_rps, sb_rps, strict=True))
    ]


def _goal(rounds: list[dict[str, TargetOutcome]]) -> Goal:
    goals = evaluate_goals(aggregate(rounds), [64], rounds)
    return next(g for g in goals if g.goal == GOAL)


def test_a_ratio_goal_reads_the_median_of_per_round_ratios() -> None:
    # Per-round ratios 0.45, 0.30, 0.50 -> 0.45, met; the medians' ratio (60 / 200 = 0.30) would miss it.
    g = _goal(_rounds([100.0, 200.0, 400.0], [45.0, 60.0, 200.0]))
    assert (g.measured, g.status) == ("0.45x (median of 3 rounds)", "met")


def test_errors_in_one_round_flag_the_goal() -> None:
    g = _goal(_rounds([100.0, 100.0, 100.0], [50.0, 50.0, 50.0], sb_errors=3))
    assert (g.measured, g.status) == ("0.50x (median of 3 rounds) (errors flagged)", "not met")


def test_a_round_without_the_level_is_left_out_and_named() -> None:
    rounds = _rounds([100.0, 100.0, 100.0], [50.0, 30.0, 60.0])
    rounds[1]["switchboard"] = _outcome("switchboard", status="failed", reason="c=64: boom")
    g = _goal(rounds)
    assert (g.measured, g.status) == ("0.55x (median of 2 of 3 rounds)", "met")


def test_one_round_reads_as_before() -> None:
    (one,) = _rounds([100.0], [45.0])
    goals = evaluate_goals(one, [64])
    assert next(g for g in goals if g.goal == GOAL).measured == "0.45x"
    assert goals == evaluate_goals(aggregate([one]), [64], [one])
