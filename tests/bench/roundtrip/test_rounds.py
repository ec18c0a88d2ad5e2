"""`make bench --rounds N`: the ABBA order and the rounds folded into one measurement per target and concurrency."""

from __future__ import annotations

import copy

import pytest

from bench.roundtrip.measure import Measurement, TargetOutcome, add_derived
from bench.roundtrip.rounds import aggregate, median_of, round_order, rounds_note


def _m(
    target: str, conc: int, rps: float, p50: float = 1.0, proxy_cpu: float | None = None, errors: int = 0
) -> Measurement:
    return Measurement(
        target=target,
        concurrency=conc,
        rps=rps,
        requests=int(rps * 10),
        duration_s=10.0,
        p50_ms=p50,
        p90_ms=p50 * 2,
        p99_ms=p50 * 3,
        p999_ms=p50 * 4,
        mean_ms=p50 * 1.1,
        max_ms=p50 * 10,
        non2xx=errors,
        socket_errors=0,
        timeouts=0,
        bad_bodies=0,
        errors=errors,
        proxy_cpu_us_per_call=proxy_cpu,
        backend_cpu_us_per_call=20.0,
        wrk_cpu_us_per_call=5.0,
        other_load_cores=0.1,
        wrk_raw={"rps": rps},
    )


def _outcome(name: str, *ms: Measurement, status: str = "ok", reason: str = "") -> TargetOutcome:
    return TargetOutcome(name, status, f"{name} target", reason=reason, measurements=list(ms))


def _round(**outcomes: TargetOutcome) -> dict[str, TargetOutcome]:
    r = {name.replace("_", "-"): o for name, o in outcomes.items()}
    add_derived(r)
    return r


def test_odd_rounds_run_the_canonical_order_even_rounds_the_reverse() -> None:
    targets = ["direct", "switchboard", "switchboard-modern"]
    assert round_order(targets, 1) == targets
    assert round_order(targets, 2) == ["switchboard-modern", "switchboard", "direct"]
    assert round_order(targets, 3) == targets


def test_median_of_skips_missing_values_and_counts_the_rest() -> None:
    assert median_of([3.0, None, 1.0, 2.0]) == (2.0, 3)
    assert median_of([None]) == (None, 0)


def test_rounds_note_is_empty_for_one_round() -> None:
    assert rounds_note(1, 1) == ""
    assert rounds_note(3, 3) == " (median of 3 rounds)"
    assert rounds_note(2, 3) == " (median of 2 of 3 rounds)"


def test_three_rounds_give_medians_spreads_and_summed_errors() -> None:
    rounds = [
        _round(switchboard=_outcome("switchboard", _m("switchboard", 64, 100.0, p50=3.0, proxy_cpu=70.0))),
        _round(switchboard=_outcome("switchboard", _m("switchboard", 64, 300.0, p50=1.0, proxy_cpu=90.0, errors=2))),
        _round(switchboard=_outcome("switchboard", _m("switchboard", 64, 200.0, p50=2.0, proxy_cpu=60.0))),
    ]
    agg = aggregate(rounds)["switchboard"]
    (m,) = agg.measurements
    assert (m.rps, m.requests, m.p50_ms, m.p99_ms, m.proxy_cpu_us_per_call) == (200.0, 2000, 2.0, 6.0, 70.0)
    assert m.backend_cpu_us_per_call == 20.0 and m.other_load_cores == 0.1
    # An error in one round flags the aggregate even though the median round had none.
    assert (m.errors, m.non2xx, m.flagged) == (2, 2, True)
    assert m.rounds == 3
    assert m.spread == {"rps": [100.0, 300.0], "proxy_cpu_us_per_call": [60.0, 90.0]}
    assert m.wrk_raw == {}  # one run's raw numbers: only in each round's JSON
    assert (agg.status, agg.round_status, agg.reason) == ("ok", ["ok", "ok", "ok"], "")


def test_a_round_that_failed_midway_counts_where_it_measured_and_fails_the_target() -> None:
    ok = [_m("switchboard", 1, 1000.0), _m("switchboard", 64, 3000.0)]
    failed_at_64 = _outcome("switchboard", _m("switchboard", 1, 1300.0), status="failed", reason="c=64: boom\ntail")
    rounds = [
        _round(switchboard=_outcome("switchboard", *ok)),
        _round(switchboard=failed_at_64),
        _round(switchboard=_outcome("switchboard", _m("switchboard", 1, 1100.0), _m("switchboard", 64, 4000.0))),
    ]
    agg = aggregate(rounds)["switchboard"]
    assert agg.status == "failed"  # run.py exits 1, as for a failed single run
    assert agg.round_status == ["ok", "failed", "ok"]
    assert agg.reason == "round 2 failed: c=64: boom"
    c1, c64 = agg.measurements
    assert (c1.rounds, c1.rps) == (3, 1100.0)
    # c=64: the median over the two rounds that measured it (an even count: the mean of the two).
    assert (c64.rounds, c64.rps, c64.requests) == (2, 3500.0, 35000)


def test_a_round_that_skipped_leaves_the_others_measurements() -> None:
    rounds = [
        _round(direct=_outcome("direct", status="skipped", reason="no port")),
        _round(direct=_outcome("direct", _m("direct", 1, 500.0))),
    ]
    agg = aggregate(rounds)["direct"]
    assert (agg.status, agg.reason, agg.round_status) == ("skipped", "round 1 skipped: no port", ["skipped", "ok"])
    (m,) = agg.measurements
    assert (m.rounds, m.rps, m.spread, m.wrk_raw) == (1, 500.0, {}, {"rps": 500.0})


def test_ratios_and_added_latency_are_paired_within_a_round_then_medianed() -> None:
    # (direct, switchboard) req/s per round: ratios 0.9, 0.5, 0.95 -> median 0.9; the ratio of the medians
    # (100 / 200 = 0.5) would pair switchboard's round 2 with direct's round 2 only by accident.
    pairs = [(100.0, 90.0, 1.0, 1.2), (200.0, 100.0, 0.5, 1.5), (400.0, 380.0, 2.0, 2.1)]
    rounds = [
        _round(
            direct=_outcome("direct", _m("direct", 64, d_rps, p50=d_p50)),
            switchboard=_outcome("switchboard", _m("switchboard", 64, s_rps, p50=s_p50)),
        )
        for d_rps, s_rps, d_p50, s_p50 in pairs
    ]
    agg = aggregate(rounds)
    (sb,) = agg["switchboard"].measurements
    (direct,) = agg["direct"].measurements
    assert sb.rps / direct.rps == pytest.approx(0.5)
    assert sb.ratio_to_baseline == pytest.approx(0.9)
    assert sb.baseline == "direct"
    # added p50 per round: +0.2, +1.0, +0.1 -> +0.2 (the medians' difference would be 1.5 - 1.0 = +0.5)
    assert sb.added_p50_ms == pytest.approx(0.2)
    assert sb.added_p99_ms == pytest.approx(0.6)
    assert direct.ratio_to_baseline is None


def test_one_round_aggregates_to_exactly_that_round() -> None:
    failed = _outcome("switchboard-modern", _m("switchboard-modern", 1, 800.0, proxy_cpu=90.0), status="failed")
    failed.reason = "c=16: validation failed\nlog tail"
    one = _round(
        direct=_outcome("direct", _m("direct", 1, 1000.0), _m("direct", 16, 5000.0, errors=1)),
        switchboard=_outcome("switchboard", _m("switchboard", 1, 900.0, proxy_cpu=80.0), _m("switchboard", 16, 2500.0)),
        switchboard_modern=failed,
        mcp_proxy=_outcome("mcp-proxy", status="skipped", reason="not installed"),
    )
    today = copy.deepcopy(one)
    assert aggregate([one]) == today
