"""The official MCP conformance suite, run against the gateway instead of a server.

Fronting the fixture backend, every scenario of the 2025-11-25 server requirement set must pass
*through* Switchboard: logging, progress, sampling and elicitation on the call's own stream, SSE
priming and resumption, DNS-rebinding protection by the gateway itself. Against the embedded
default, the scenarios that need no fixture must pass too.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conformance.runner import required_scenarios, run_conformance
from tests.support import RunningGateway, run_gateway

REQUIREMENTS = "2025-11-25"
# Scenarios that exercise only the gateway and the MCP core, so any compliant server passes them.
NO_FIXTURE = ["server-initialize", "ping", "tools-list", "resources-list", "prompts-list", "dns-rebinding-protection"]


@pytest.fixture(scope="module")
def gateway_over_fixture(fixture_backend_url: str) -> Iterator[RunningGateway]:
    config = {"backends": {"conf": {"transport": "http", "url": fixture_backend_url, "required": True}}}
    with run_gateway(config) as gw:
        yield gw


@pytest.mark.conformance
@pytest.mark.timeout(900)
def test_every_2025_11_25_scenario_passes_through_the_gateway(
    conformance_suite: tuple[Path, Path], gateway_over_fixture: RunningGateway
) -> None:
    report = run_conformance(gateway_over_fixture.mcp, REQUIREMENTS, timeout_s=600, scenario_timeout_s=30)
    print(report.summary())
    required = required_scenarios(REQUIREMENTS)
    missing = sorted(set(required) - set(report.scenarios))
    assert not missing, f"required scenarios that did not run: {missing}\n{report.raw_output}"
    assert not report.failed, f"conformance failures through the gateway:\n{report.format_failures()}"
    assert set(required) <= set(report.passed)


@pytest.mark.conformance
@pytest.mark.timeout(600)
def test_single_server_route_passes_too(
    conformance_suite: tuple[Path, Path], gateway_over_fixture: RunningGateway
) -> None:
    """/servers/NAME/mcp is the plain network-proxy use: the same suite, no federation."""
    report = run_conformance(gateway_over_fixture.server("conf"), REQUIREMENTS, timeout_s=600, scenario_timeout_s=30)
    print(report.summary())
    assert not report.failed, f"conformance failures on /servers/conf/mcp:\n{report.format_failures()}"
    assert set(required_scenarios(REQUIREMENTS)) <= set(report.passed)


@pytest.mark.conformance
@pytest.mark.timeout(600)
def test_embedded_default_passes_the_fixture_free_scenarios(conformance_suite: tuple[Path, Path]) -> None:
    with run_gateway(None) as gw:
        report = run_conformance(gw.mcp, REQUIREMENTS, scenarios=NO_FIXTURE, timeout_s=300, scenario_timeout_s=30)
    print(report.summary())
    assert not report.failed, f"failures against the embedded default:\n{report.format_failures()}"
    assert set(NO_FIXTURE) <= set(report.passed)
