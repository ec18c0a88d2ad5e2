"""p50 / p99 latency per backend, estimated from the Prometheus histogram the router already keeps.

Read only when a dashboard page asks (never on the request path): the router's
``switchboard_request_duration_seconds{method, backend}`` buckets are summed over methods, and a
quantile is interpolated linearly inside its bucket, as PromQL's ``histogram_quantile`` does. The
figures are since the process started (a histogram has no window); the page says so.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class _Buckets:
    counts: dict[float, float] = field(default_factory=dict)  # upper bound -> cumulative count

    def add(self, upper: float, count: float) -> None:
        self.counts[upper] = self.counts.get(upper, 0.0) + count


def quantile(q: float, cumulative: Mapping[float, float]) -> float | None:
    """The ``q`` quantile of a cumulative histogram (upper bound -> count); None when it is empty."""
    bounds = sorted(cumulative)
    if not bounds:
        return None
    total = cumulative[bounds[-1]]
    if total <= 0:
        return None
    rank = q * total
    lower, below = 0.0, 0.0
    for upper in bounds:
        count = cumulative[upper]
        if count >= rank:
            if math.isinf(upper):
                return lower  # beyond the last finite bucket: its bound is all that is known
            inside = count - below
            return lower + (upper - lower) * ((rank - below) / inside if inside > 0 else 1.0)
        lower, below = upper, count
    return lower


def per_backend(families: Iterable[Any]) -> dict[str, dict[str, float | None]]:
    """``{backend: {"p50": s, "p99": s, "count": n}}`` from a histogram's ``collect()``."""
    buckets: dict[str, _Buckets] = {}
    for family in families:
        for sample in family.samples:
            if not sample.name.endswith("_bucket"):
                continue
            backend = sample.labels.get("backend", "")
            buckets.setdefault(backend, _Buckets()).add(float(sample.labels["le"]), sample.value)
    out: dict[str, dict[str, float | None]] = {}
    for backend, b in buckets.items():
        count = b.counts.get(math.inf, 0.0)
        out[backend] = {"p50": quantile(0.5, b.counts), "p99": quantile(0.99, b.counts), "count": count}
    return out
