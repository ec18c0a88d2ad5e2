"""Metrics kept on the loop's thread (gateway/loop_metrics.py): what a scrape shows."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from gateway.loop_metrics import LoopCounter, LoopHistogram
from gateway.metrics import Metrics


def test_duration_histogram_exposition() -> None:
    registry = CollectorRegistry()
    durations = LoopHistogram("mcp_server_operation_duration_seconds", "doc", ["mcp_method_name", "error_type"])
    registry.register(durations)
    for seconds in (0.0004, 0.001, 0.003, 0.7, 400.0):
        durations.observe(("tools/call", ""), seconds)
    durations.observe(("tools/call", "-32601"), 0.002)
    text = generate_latest(registry).decode()
    series = 'mcp_server_operation_duration_seconds_bucket{error_type="",le="%s",mcp_method_name="tools/call"} %s'
    assert series % ("0.0005", "1.0") in text
    assert series % ("0.001", "2.0") in text, "a value on a boundary counts in its bucket (le)"
    assert series % ("0.005", "3.0") in text
    assert series % ("1.0", "4.0") in text
    assert series % ("300.0", "4.0") in text
    assert series % ("+Inf", "5.0") in text
    assert 'mcp_server_operation_duration_seconds_count{error_type="",mcp_method_name="tools/call"} 5.0' in text
    assert 'mcp_server_operation_duration_seconds_sum{error_type="",mcp_method_name="tools/call"} 400.7044' in text
    assert 'mcp_server_operation_duration_seconds_count{error_type="-32601",mcp_method_name="tools/call"} 1.0' in text
    assert "# TYPE mcp_server_operation_duration_seconds histogram" in text


def test_counter_exposition() -> None:
    registry = CollectorRegistry()
    requests = LoopCounter("switchboard_requests_total", "doc", ["method", "outcome"])
    registry.register(requests)
    requests.inc(("tools/call", "ok"))
    requests.inc(("tools/call", "ok"), 2)
    requests.inc(("ping", "denied"))
    text = generate_latest(registry).decode()
    assert "# TYPE switchboard_requests_total counter" in text
    assert 'switchboard_requests_total{method="tools/call",outcome="ok"} 3.0' in text
    assert 'switchboard_requests_total{method="ping",outcome="denied"} 1.0' in text
    assert registry.get_sample_value("switchboard_requests_total", {"method": "ping", "outcome": "denied"}) == 1.0


def test_the_gateways_request_metrics_are_scraped() -> None:
    metrics = Metrics()
    metrics.observe_request("tools/call", "echo", "ok", 0.002)
    metrics.observe_request("tools/call", "gateway", "denied", None)
    text = metrics.render().decode()
    assert 'switchboard_requests_total{backend="echo",method="tools/call",outcome="ok"} 1.0' in text
    assert 'switchboard_requests_total{backend="gateway",method="tools/call",outcome="denied"} 1.0' in text
    assert 'switchboard_request_duration_seconds_bucket{backend="echo",le="0.0025",method="tools/call"} 1.0' in text
    assert 'switchboard_request_duration_seconds_count{backend="gateway"' not in text, "a refusal has no latency"


def test_observe_call_is_observe_request_and_observe_server_in_one() -> None:
    one, two = Metrics(), Metrics()
    for method, backend, outcome, error_type, seconds in [
        ("tools/call", "echo", "ok", "", 0.002),
        ("tools/call", "echo", "ok", "", 0.0004),
        ("tools/call", "echo", "error", "-32601", 0.3),
        ("other", "gateway", "denied", "-32093", 12.0),
        ("tools/call", "echo", "ok", "tool_error", 0.001),
    ]:
        one.observe_call(method, backend, outcome, error_type, seconds)
        two.observe_request(method, backend, outcome, seconds)
        two.observe_server(method, error_type, seconds)

    def exposed(metrics: Metrics) -> list[str]:  # without the counters' creation times
        return [line for line in metrics.render().decode().splitlines() if "_created" not in line]

    assert exposed(one) == exposed(two)
    assert 'switchboard_requests_total{backend="echo",method="tools/call",outcome="ok"} 3.0' in exposed(one)


def test_counter_cells_and_histogram_series_are_the_live_values() -> None:
    requests = LoopCounter("switchboard_requests_total", "doc", ["method"])
    cell = requests.cell(("ping",))
    cell[0] += 2
    requests.inc(("ping",))
    assert requests.cell(("ping",)) is cell and cell[0] == 3.0
    durations = LoopHistogram("d", "doc", ["method"])
    series = durations.series(("ping",))
    durations.observe(("ping",), 0.003)
    assert durations.series(("ping",)) is series and series[-1] == 0.003 and sum(series[:-1]) == 1
