"""`--rounds N`: the order of each round, and the rounds folded into one outcome per target.

On a shared 2-core VM one run's req/s and CPU per call move by ±20 % with no code change, so a target
measured minutes after its baseline can meet or miss a goal by chance. Measuring the whole target list N
times, in alternating order (canonical, reversed, canonical, ...: an ABBA design, so a drift of the machine
that is linear in time weighs on a target and its baseline alike), and taking medians, steadies the verdicts.

Ratios and added latencies are paired within a round (a target with its baseline measured in the same
round, `measure.add_derived` run on each round) and only then medianed: the median of per-round ratios,
not the ratio of the medians, which would pair a target's good round with its baseline's bad one.

Pure functions (no processes, no I/O): tests/bench/roundtrip/test_rounds.py.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import fields
from typing import Any

from bench.roundtrip.measure import Measurement, TargetOutcome

# Error counters are summed, not medianed: an error in any round must still flag the aggregate.
SUMMED_FIELDS = frozenset({"non2xx", "socket_errors", "timeouts", "bad_bodies", "errors"})
# The key columns whose min-max over the rounds the table shows next to the median.
SPREAD_FIELDS = ("rps", "proxy_cpu_us_per_call")
# Not numbers to median: identity, the baseline's name, wrk's raw output, and the fields set here.
_NOT_MEDIANED = frozenset({"target", "concurrency", "baseline", "wrk_raw", "rounds", "spread"})
# The aggregate's status is its worst round's: one failed round fails the target (run.py exits 1).
_STATUS_RANK = {"ok": 0, "skipped": 1, "failed": 2}


def round_order(targets: list[str], round_no: int) -> list[str]:
    """Round 1, 3, ...: the canonical order; round 2, 4, ...: reversed (ABBA)."""
    return list(targets) if round_no % 2 == 1 else list(reversed(targets))


def median_of(values: Iterable[float | None]) -> tuple[float | None, int]:
    """(median of the values that are not None, how many there were); (None, 0) when none."""
    present = [v for v in values if v is not None]
    return (statistics.median(present) if present else None), len(present)


def rounds_note(n: int, total: int) -> str:
    """The suffix that says a value is a median (empty for a single round, so N=1 reads as before)."""
    if total <= 1:
        return ""
    return f" (median of {n} rounds)" if n == total else f" (median of {n} of {total} rounds)"


def aggregate(rounds: list[dict[str, TargetOutcome]]) -> dict[str, TargetOutcome]:
    """One outcome per target from each round's outcomes (each already through `add_derived`).

    A target's measurement at a concurrency is the median over the rounds that measured it there (a round
    that skipped or failed before that level contributes nothing; `rounds` says how many did). With one
    round the result equals that round's outcomes field for field.
    """
    names: dict[str, None] = {}
    for r in rounds:
        names.update(dict.fromkeys(r))
    return {name: _aggregate_outcome(name, rounds) for name in names}


def _aggregate_outcome(name: str, rounds: list[dict[str, TargetOutcome]]) -> TargetOutcome:
    seen = [(k, r[name]) for k, r in enumerate(rounds, 1) if name in r]
    outcomes = [o for _, o in seen]
    worst = max(outcomes, key=lambda o: _STATUS_RANK.get(o.status, 2))
    # Session and server details from the first round that ran through (they are per-round anyway).
    base = next((o for o in outcomes if o.status == "ok"), outcomes[0])
    agg = TargetOutcome(
        name,
        worst.status,
        base.description,
        reason=_reason(seen) if len(rounds) > 1 else worst.reason,
        server_info=base.server_info,
        session_id=base.session_id,
        protocol_version=base.protocol_version,
        era=base.era,
    )
    if len(rounds) > 1:
        agg.round_status = [r[name].status if name in r else "not run" for r in rounds]
    by_conc: dict[int, list[Measurement]] = {}
    for o in outcomes:
        for m in o.measurements:
            by_conc.setdefault(m.concurrency, []).append(m)
    agg.measurements = [aggregate_measurements(ms) for ms in by_conc.values()]
    return agg


def _reason(seen: list[tuple[int, TargetOutcome]]) -> str:
    """One line naming each round that did not run through (the full reasons stay in each round's JSON)."""
    parts = []
    for k, o in seen:
        if o.status != "ok":
            first = o.reason.splitlines()[0] if o.reason else ""
            parts.append(f"round {k} {o.status}: {first}")
    return "; ".join(parts)


def aggregate_measurements(ms: list[Measurement]) -> Measurement:
    """Medians of one target's measurements at one concurrency over rounds; error counters summed."""
    values: dict[str, Any] = {}
    for f in fields(Measurement):
        if f.name in _NOT_MEDIANED:
            continue
        column = [getattr(m, f.name) for m in ms]
        values[f.name] = sum(column) if f.name in SUMMED_FIELDS else median_of(column)[0]
    values["requests"] = round(values["requests"])  # an even count of rounds medians to a half
    spread = {}
    for name in SPREAD_FIELDS:
        column = [getattr(m, name) for m in ms if getattr(m, name) is not None]
        if len(column) > 1:
            spread[name] = [min(column), max(column)]
    return Measurement(
        target=ms[0].target,
        concurrency=ms[0].concurrency,
        baseline=next((m.baseline for m in ms if m.baseline is not None), None),
        # wrk's raw numbers belong to one run: kept for a single round, else only in each round's JSON.
        wrk_raw=ms[0].wrk_raw if len(ms) == 1 else {},
        rounds=len(ms),
        spread=spread,
        **values,
    )
