"""The issue's goals, judged from the measurements."""

from __future__ import annotations

from dataclasses import dataclass

from bench.roundtrip.measure import Measurement, TargetOutcome

# Goals from the issue.
GOAL_RATIO_DIRECT_C64 = 0.40
GOAL_X_SUPERGATEWAY_C64 = 3.0
GOAL_X_MCP_PROXY_C64 = 9.0
GOAL_ADDED_P50_C1_MS = 0.25
GOAL_RATIO_SDK = 0.95


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


def evaluate_goals(outcomes: dict[str, TargetOutcome], concurrencies: list[int]) -> list[Goal]:
    goals: list[Goal] = []

    def na(label: str, why: str) -> Goal:
        return Goal(label, why, "n/a")

    def note_errors(*ms: Measurement | None) -> str:
        return " (errors flagged)" if any(m is not None and m.flagged for m in ms) else ""

    def status(ok: bool, m: Measurement) -> str:
        return "met" if ok and not m.flagged else "not met"

    sb64 = _get(outcomes, "switchboard", 64)
    at_c64 = [
        ("direct", GOAL_RATIO_DIRECT_C64, f"switchboard ≥ {GOAL_RATIO_DIRECT_C64:.2f}x direct req/s at c=64"),
        *(
            (peer, want, f"switchboard ≈ {want:.0f}x {peer} req/s at c=64")
            for peer, want in (("supergateway", GOAL_X_SUPERGATEWAY_C64), ("mcp-proxy", GOAL_X_MCP_PROXY_C64))
        ),
    ]
    for other, want, label in at_c64:
        o64 = _get(outcomes, other, 64)
        if sb64 and o64:
            r = sb64.rps / o64.rps
            goals.append(Goal(label, f"{r:.2f}x{note_errors(sb64, o64)}", status(r >= want, sb64)))
        else:
            goals.append(na(label, _why_missing(outcomes, ["switchboard", other], 64, concurrencies)))

    sb1, d1 = _get(outcomes, "switchboard", 1), _get(outcomes, "direct", 1)
    label = f"switchboard adds ≤ {GOAL_ADDED_P50_C1_MS:.2f} ms p50 at c=1"
    if sb1 and d1:
        added = sb1.p50_ms - d1.p50_ms
        goals.append(Goal(label, f"+{added:.3f} ms{note_errors(sb1, d1)}", status(added <= GOAL_ADDED_P50_C1_MS, sb1)))
    else:
        goals.append(na(label, _why_missing(outcomes, ["switchboard", "direct"], 1, concurrencies)))

    label = f"switchboard-sdk ≥ {GOAL_RATIO_SDK:.2f}x sdk-direct req/s (every concurrency)"
    pairs = [(c, _get(outcomes, "switchboard-sdk", c), _get(outcomes, "sdk-direct", c)) for c in concurrencies]
    if pairs and all(s and d for _, s, d in pairs):
        ratios = [(c, s.rps / d.rps, s) for c, s, d in pairs if s and d]
        ok = all(r >= GOAL_RATIO_SDK and not s.flagged for _, r, s in ratios)
        measured = ", ".join(f"c{c}: {r:.2f}x" for c, r, _ in ratios)
        goals.append(Goal(label, measured + note_errors(*[s for _, _, s in ratios]), "met" if ok else "not met"))
    else:
        goals.append(na(label, _why_missing(outcomes, ["switchboard-sdk", "sdk-direct"], None, concurrencies)))
    return goals


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
