"""One target measured at each concurrency (validate, warm up, wrk, CPU before and after), and the ratios to
its baseline."""

from __future__ import annotations

import secrets
import subprocess
from dataclasses import dataclass, field
from typing import Any

import httpx

from bench.roundtrip.client import open_session, validate_call
from bench.roundtrip.common import BenchError, StartError, log
from bench.roundtrip.services import CLK_TCK, CpuSnapshot, cpu_snapshot
from bench.roundtrip.targets import BASELINE_OF, TargetSpec
from bench.roundtrip.wrk import WrkResult, run_wrk

# The once-per-target warm-up's concurrency: high enough that a slow target still serves thousands of calls
# (a JIT compiles by calls served, not by seconds), at a level where every target keeps up with its backend.
TARGET_WARMUP_CONCURRENCY = 16
OTHER_LOAD_WARN = 0.25  # cores of CPU used by other processes during a run worth a warning


@dataclass
class Measurement:
    target: str
    concurrency: int
    rps: float
    requests: int
    duration_s: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    p999_ms: float
    mean_ms: float
    max_ms: float
    non2xx: int
    socket_errors: int
    timeouts: int
    bad_bodies: int
    errors: int
    proxy_cpu_us_per_call: float | None
    backend_cpu_us_per_call: float | None
    wrk_cpu_us_per_call: float | None
    # Cores' worth of CPU used during the run by anything but wrk, the proxy and the backend:
    # other load on the machine, which skews the numbers when well above 0.
    other_load_cores: float
    baseline: str | None = None
    ratio_to_baseline: float | None = None
    added_p50_ms: float | None = None
    added_p99_ms: float | None = None
    wrk_raw: dict[str, Any] = field(default_factory=dict)
    # With --rounds N (bench/roundtrip/rounds.py): how many rounds measured this target at this concurrency,
    # and the min-max over them of the key columns (by field name; empty when one round measured it).
    rounds: int = 1
    spread: dict[str, list[float]] = field(default_factory=dict)

    @property
    def flagged(self) -> bool:
        return self.errors > 0 or self.requests == 0


@dataclass
class TargetOutcome:
    name: str
    status: str  # "ok", "skipped", "failed"
    description: str
    reason: str = ""
    server_info: dict[str, Any] = field(default_factory=dict)
    session_id: str | None = None
    protocol_version: str | None = None
    era: str = "legacy"  # "modern": stateless 2026-07-28 requests (no session)
    measurements: list[Measurement] = field(default_factory=list)
    # With --rounds N > 1: each round's status, in round order (empty for a single round).
    round_status: list[str] = field(default_factory=list)


def measure_target(
    spec: TargetSpec,
    concurrencies: list[int],
    duration: float,
    warmup: float,
    threads: int,
    target_warmup: float = 0.0,
) -> TargetOutcome:
    outcome = TargetOutcome(spec.name, "ok", spec.description, era=spec.era)
    try:
        for svc in spec.services:
            log(f"{spec.name}: starting {svc.name} on 127.0.0.1:{svc.port}")
            svc.start()
            svc.wait_ready(spec.startup_timeout)
        try:
            session = open_session(spec.url, timeout=spec.startup_timeout, era=spec.era, echo=spec.echo)
        except BenchError as exc:
            tails = "\n".join(f"  {s.name} log:\n{s.log_tail()}" for s in spec.services)
            raise BenchError(f"{exc}\n{tails}") from exc
    except StartError as exc:
        outcome.status, outcome.reason = "skipped", str(exc)
        return outcome
    except BenchError as exc:
        outcome.status, outcome.reason = "failed", str(exc)
        return outcome

    outcome.server_info = session.server_info
    outcome.session_id = session.session_id
    outcome.protocol_version = session.protocol_version
    sid = session.session_id or "(none: stateless)"
    log(f"{spec.name}: {session.era} era, session {sid}, protocol {session.protocol_version}")
    if target_warmup > 0:
        # Before the first level (c=1): a fresh node backend is still compiling for its first ~20 s, and at c=1
        # a proxied target, slower per call, would serve fewer warm-up calls than its baseline and meet a colder
        # backend (measured on 2026-11-24: server-everything spent 1,003-1,056 us of CPU per call behind the
        # gateway after 2 s at c=1 against 872 direct; 861 behind the gateway after 10 s). Warmed at c=16, both
        # serve about as many calls before c=1.
        try:
            run_wrk(session, TARGET_WARMUP_CONCURRENCY, target_warmup, threads)
        except (BenchError, subprocess.TimeoutExpired) as exc:
            outcome.status, outcome.reason = "failed", f"warm-up at c={TARGET_WARMUP_CONCURRENCY}: {exc}"
            return outcome
    for conc in concurrencies:
        try:
            validate_call(session, f"validate-{spec.name}-c{conc}-{secrets.token_hex(6)}")
            if warmup > 0:
                run_wrk(session, conc, warmup, threads)
            before = cpu_snapshot(spec.services)
            res = run_wrk(session, conc, duration, threads)
            after = cpu_snapshot(spec.services)
        except (BenchError, httpx.HTTPError, subprocess.TimeoutExpired) as exc:
            outcome.status = "failed"
            outcome.reason = f"c={conc}: {exc}"
            log(f"{spec.name}: FAILED at c={conc}: {exc}")
            break
        has_proxy = any(s.role == "proxy" for s in spec.services)
        per_call = 1e6 / CLK_TCK / res.requests if res.requests else 0.0
        m = Measurement(
            target=spec.name,
            concurrency=conc,
            rps=res.rps,
            requests=res.requests,
            duration_s=res.duration_s,
            p50_ms=res.p50_ms,
            p90_ms=res.p90_ms,
            p99_ms=res.p99_ms,
            p999_ms=res.p999_ms,
            mean_ms=res.mean_ms,
            max_ms=res.max_ms,
            non2xx=res.non2xx,
            socket_errors=res.socket_errors,
            timeouts=res.timeouts,
            bad_bodies=res.bad_bodies,
            errors=res.error_total,
            proxy_cpu_us_per_call=(after.proxy - before.proxy) * per_call if has_proxy else None,
            backend_cpu_us_per_call=(after.backend - before.backend) * per_call,
            wrk_cpu_us_per_call=res.wrk_cpu_s * 1e6 / res.requests if res.requests else None,
            other_load_cores=_other_load(before, after, res),
            wrk_raw=res.raw,
        )
        outcome.measurements.append(m)
        flag = f"  ** {m.errors} ERRORS **" if m.flagged else ""
        if m.other_load_cores >= OTHER_LOAD_WARN:
            flag += f"  (other load on the machine: {m.other_load_cores:.2f} cores)"
        log(f"{spec.name} c={conc}: {m.rps:,.0f} req/s, p50 {m.p50_ms:.3f} ms, p99 {m.p99_ms:.3f} ms{flag}")
    return outcome


def _other_load(before: CpuSnapshot, after: CpuSnapshot, res: WrkResult) -> float:
    if res.duration_s <= 0:
        return 0.0
    ours = (after.proxy - before.proxy) + (after.backend - before.backend)
    busy = after.machine_busy - before.machine_busy
    return max(0.0, ((busy - ours) / CLK_TCK - res.wrk_cpu_s) / res.duration_s)


def add_derived(outcomes: dict[str, TargetOutcome]) -> None:
    for outcome in outcomes.values():
        base_name = BASELINE_OF.get(outcome.name)
        base = outcomes.get(base_name) if base_name else None
        for m in outcome.measurements:
            if base is None:
                continue
            b = next((x for x in base.measurements if x.concurrency == m.concurrency), None)
            if b is None or b.rps <= 0:
                continue
            m.baseline = base_name
            m.ratio_to_baseline = m.rps / b.rps
            m.added_p50_ms = m.p50_ms - b.p50_ms
            m.added_p99_ms = m.p99_ms - b.p99_ms
