"""Pure parts of the dashboard's read-only pages: latency quantiles from the router's real histogram,
and the masking of URL credentials in backend errors."""

from __future__ import annotations

import pytest

from gateway.metrics import Metrics
from gateway.ui.latency import per_backend, quantile
from gateway.ui.snapshot import masked


def test_quantiles_interpolate_inside_the_bucket_like_histogram_quantile() -> None:
    cumulative = {0.1: 50.0, 0.2: 100.0, float("inf"): 100.0}
    assert quantile(0.5, cumulative) == pytest.approx(0.1)
    assert quantile(0.75, cumulative) == pytest.approx(0.15)
    assert quantile(0.5, {}) is None and quantile(0.5, {float("inf"): 0.0}) is None
    assert quantile(0.99, {1.0: 1.0, float("inf"): 10.0}) == 1.0, "beyond the last finite bucket: its bound"


def test_latency_per_backend_sums_every_method_of_the_real_histogram() -> None:
    metrics = Metrics()
    for _ in range(98):
        metrics.observe_request("tools/call", "fx", "ok", 0.002)
    metrics.observe_request("tools/list", "fx", "ok", 0.002)
    metrics.observe_request("tools/call", "fx", "ok", 4.0)
    metrics.observe_request("tools/call", "other", "ok", 0.3)
    found = per_backend(metrics.latency.collect())
    assert found["fx"]["count"] == 100 and found["other"]["count"] == 1
    assert 0.001 < (found["fx"]["p50"] or 0) <= 0.0025
    assert 0.001 < (found["fx"]["p99"] or 0) <= 0.0025, "99 of 100 calls took 2 ms"
    assert 0.25 < (found["other"]["p99"] or 0) <= 0.5


@pytest.mark.parametrize(
    ("error", "shown"),
    [
        ("connect failed: http://user:hunter2@db.example:8080/mcp", "connect failed: http://***@db.example:8080/mcp"),
        ("GET https://api.example/mcp?key=abc123&x=1 failed", "GET https://api.example/mcp?*** failed"),
        ("redis://:pw@127.0.0.1:6379/0?ssl=1 down", "redis://***@127.0.0.1:6379/0?*** down"),
        ("process exited with code 1", "process exited with code 1"),
        (None, None),
    ],
)
def test_backend_errors_lose_url_credentials(error: str | None, shown: str | None) -> None:
    assert masked(error) == shown
