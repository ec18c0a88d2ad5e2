"""The issue's goals, judged from the measurements.

Each goal compares measurements of one run at one concurrency (or every measured one): a ratio of two
targets, the latency one adds to the other, or one target's own number against a bound. A goal is
"met" only when every measurement it reads ran without errors (in any round); it is "n/a" (with the reason)
when a target it needs was not run, was skipped or failed, or the concurrency was not measured.

With `--rounds N` each goal's number is computed within each round that measured every target it reads,
then medianed over those rounds (bench/roundtrip/rounds.py says why): a ratio to `direct` is then the same
number as the table's "x baseline" column, which is paired the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from bench.roundtrip.measure import Measurement, TargetOutcome
from bench.roundtrip.rounds import median_of, rounds_note

# Goals from the issue.
GOAL_RATIO_DIRECT_C64 = 0.40
GOAL_X_SUPERGATEWAY_C64 = 3.0
GOAL_X_MCP_PROXY_C64 = 9.0
GOAL_ADDED_P50_C1_MS = 0.25
GOAL_RATIO_SDK = 0.95  # in front of the official SDK server and server-everything, at every concurrency
GOAL_MODERN_RPS_X_LEGACY = 0.95  # "2026-07-28 as fast as legacy", req/s at c=64
GOAL_MODERN_CPU_X_LEGACY = 1.05  # ... and the gateway's CPU per call within 5 % of legacy's
GOAL_P99_X_DIRECT_C64 = 2.0
GOAL_PROXY_CPU_US_C64 = 80.0

SWITCHBOARDS = ("switchboard", "switchboard-modern")  # the two eras in front of the same echo backend

Metric = Callable[[Measurement], float | None]


def _rps(m: Measurement) -> float | None:
    return m.rps


def _p99(m: Measurement) -> float | None:
    return m.p99_ms


def _proxy_cpu(m: Measurement) -> float | None:
    return m.proxy_cpu_us_per_call


def _get(outcomes: dict[str, TargetOutcome], target: str, conc: int) -> Measurement | None:
    o = outcomes.get(target)
    if o is None:
        return None
    return next((m for m in o.measurements if m.concurrency == conc), None)


@dataclass
class Goal:
    goal: str
    measured: str
    status: str  # "met", "not met", "n/a"


Value = Callable[[list[Measurement]], float | None]  # one round's measurements of the targets -> the number
Verdict = Callable[[float], tuple[str, bool]]  # the median number -> (what the table shows, met?)


def _paired(rounds: list[dict[str, TargetOutcome]], targets: list[str], conc: int) -> list[list[Measurement]]:
    """Per round that measured every one of `targets` at `conc`: their measurements, in `targets`' order."""
    paired = []
    for r in rounds:
        found = [m for m in (_get(r, t, conc) for t in targets) if m is not None]
        if len(found) == len(targets):
            paired.append(found)
    return paired


@dataclass(slots=True)
class _Judge:
    outcomes: dict[str, TargetOutcome]  # aggregated over the rounds: what is missing, what is flagged
    concurrencies: list[int]
    rounds: list[dict[str, TargetOutcome]]  # each round's own outcomes: the numbers

    def judge(self, label: str, targets: list[str], conc: int, value: Value, verdict: Verdict) -> Goal:
        """`value` reads one round's measurements of `targets` at `conc` (None: a number it needs is missing);
        `verdict` judges the median of the rounds' values."""
        found = [_get(self.outcomes, t, conc) for t in targets]
        ms = [m for m in found if m is not None]
        if len(ms) != len(targets):
            return Goal(label, _why_missing(self.outcomes, targets, conc, self.concurrencies), "n/a")
        median, n = median_of(value(r) for r in _paired(self.rounds, targets, conc))
        if median is None:
            return Goal(label, "not measured for this target", "n/a")
        measured, ok = verdict(median)
        flagged = any(m.flagged for m in ms)
        measured += rounds_note(n, len(self.rounds)) + (" (errors flagged)" if flagged else "")
        return Goal(label, measured, "met" if ok and not flagged else "not met")

    def ratio(self, label: str, a: str, b: str, conc: int, metric: Metric, want: float, at_least: bool) -> Goal:
        """metric(a) ÷ metric(b) at `conc`, ≥ `want` (`at_least`) or ≤ `want`."""

        def value(ms: list[Measurement]) -> float | None:
            x, y = metric(ms[0]), metric(ms[1])
            return None if x is None or y is None or y <= 0 else x / y

        def verdict(r: float) -> tuple[str, bool]:
            return f"{r:.2f}x", r >= want if at_least else r <= want

        return self.judge(label, [a, b], conc, value, verdict)

    def added_p50(self, label: str, a: str, b: str, conc: int, want_ms: float) -> Goal:
        def verdict(added: float) -> tuple[str, bool]:
            return f"{added:+.3f} ms", added <= want_ms

        return self.judge(label, [a, b], conc, lambda ms: ms[0].p50_ms - ms[1].p50_ms, verdict)

    def at_most(self, label: str, target: str, conc: int, metric: Metric, bound: float, unit: str) -> Goal:
        def verdict(v: float) -> tuple[str, bool]:
            return f"{v:.0f} {unit}", v <= bound

        return self.judge(label, [target], conc, lambda ms: metric(ms[0]), verdict)


def evaluate_goals(
    outcomes: dict[str, TargetOutcome],
    concurrencies: list[int],
    rounds: list[dict[str, TargetOutcome]] | None = None,
) -> list[Goal]:
    """`outcomes`: aggregated over `rounds` (each round's own outcomes; None: `outcomes` is the one round)."""
    rounds = rounds if rounds is not None else [outcomes]
    j = _Judge(outcomes, concurrencies, rounds)
    goals = [
        j.ratio(
            f"{sb} ≥ {GOAL_RATIO_DIRECT_C64:.2f}x direct req/s at c=64",
            sb,
            "direct",
            64,
            _rps,
            GOAL_RATIO_DIRECT_C64,
            at_least=True,
        )
        for sb in SWITCHBOARDS
    ]
    goals += [
        j.ratio(f"switchboard ≈ {want:.0f}x {peer} req/s at c=64", "switchboard", peer, 64, _rps, want, at_least=True)
        for peer, want in (("supergateway", GOAL_X_SUPERGATEWAY_C64), ("mcp-proxy", GOAL_X_MCP_PROXY_C64))
    ]
    goals += [
        j.added_p50(f"{sb} adds ≤ {GOAL_ADDED_P50_C1_MS:.2f} ms p50 at c=1", sb, "direct", 1, GOAL_ADDED_P50_C1_MS)
        for sb in SWITCHBOARDS
    ]
    goals += [
        j.ratio(
            f"2026-07-28 as fast as legacy: switchboard-modern ≥ {GOAL_MODERN_RPS_X_LEGACY:.2f}x switchboard "
            "req/s at c=64",
            "switchboard-modern",
            "switchboard",
            64,
            _rps,
            GOAL_MODERN_RPS_X_LEGACY,
            at_least=True,
        ),
        j.ratio(
            f"2026-07-28 as fast as legacy: switchboard-modern proxy CPU µs/call ≤ {GOAL_MODERN_CPU_X_LEGACY:.2f}x "
            "switchboard's at c=64",
            "switchboard-modern",
            "switchboard",
            64,
            _proxy_cpu,
            GOAL_MODERN_CPU_X_LEGACY,
            at_least=False,
        ),
    ]
    goals += [
        j.ratio(
            f"{sb} p99 ≤ {GOAL_P99_X_DIRECT_C64:.0f}x direct p99 at c=64",
            sb,
            "direct",
            64,
            _p99,
            GOAL_P99_X_DIRECT_C64,
            at_least=False,
        )
        for sb in SWITCHBOARDS
    ]
    goals += [
        j.at_most(
            f"{sb} proxy CPU ≤ {GOAL_PROXY_CPU_US_C64:.0f} µs/call at c=64",
            sb,
            64,
            _proxy_cpu,
            GOAL_PROXY_CPU_US_C64,
            "µs",
        )
        for sb in SWITCHBOARDS
    ]
    # "never the bottleneck" in front of a real server: the official SDK one and server-everything
    goals += [
        _every_concurrency(j, proxy, direct, GOAL_RATIO_SDK)
        for proxy, direct in (("switchboard-sdk", "sdk-direct"), ("switchboard-everything", "everything-direct"))
    ]
    return goals


def _every_concurrency(j: _Judge, target: str, baseline: str, want: float) -> Goal:
    """`target` req/s ÷ `baseline` req/s ≥ `want` at every measured concurrency (each a median of per-round ratios)."""
    label = f"{target} ≥ {want:.2f}x {baseline} req/s (every concurrency)"
    pairs = [(c, _get(j.outcomes, target, c), _get(j.outcomes, baseline, c)) for c in j.concurrencies]
    found = [(c, t, b) for c, t, b in pairs if t is not None and b is not None]
    ratios = [(c, median_of(_rps_ratio(ms) for ms in _paired(j.rounds, [target, baseline], c))) for c, _, _ in found]
    if not pairs or len(found) != len(pairs) or any(r is None for _, (r, _) in ratios):
        return Goal(label, _why_missing(j.outcomes, [target, baseline], None, j.concurrencies), "n/a")
    flagged = any(t.flagged or b.flagged for _, t, b in found)
    ok = all(r is not None and r >= want for _, (r, _) in ratios) and not flagged
    fewest = min(n for _, (_, n) in ratios)  # the note names the fewest rounds any concurrency's median had
    measured = ", ".join(f"c{c}: {r:.2f}x" for c, (r, _) in ratios if r is not None)
    measured += rounds_note(fewest, len(j.rounds)) + (" (errors flagged)" if flagged else "")
    return Goal(label, measured, "met" if ok else "not met")


def _rps_ratio(ms: list[Measurement]) -> float | None:
    return ms[0].rps / ms[1].rps if ms[1].rps > 0 else None


def _why_missing(
    outcomes: dict[str, TargetOutcome], targets: list[str], conc: int | None, concurrencies: list[int]
) -> str:
    if conc is not None and conc not in concurrencies:
        return f"c={conc} not measured"
    for t in targets:
        o = outcomes.get(t)
        if o is None:
            return f"{t} not run"
        if o.status != "ok":
            return f"{t} {o.status}"
    return "missing data"
