"""The fixture backend, tested directly (no gateway in between).

The conformance test proves the fixture is a valid reference backend: every scenario of the
official suite's 2025-11-25 server requirement set must pass against it, so any failure seen
later through the gateway is the gateway's doing. The smoke tests cover what the suite cannot:
the --stdio mode and the 2026-07-28 era on the same HTTP endpoint.
"""

from __future__ import annotations

import sys
from pathlib import Path

import mcp_types as types
import pytest
from mcp.client import Client, ClientRequestContext
from mcp.client.stdio import StdioServerParameters

from tests.conformance.conftest import FIXTURE_MODULE
from tests.conformance.runner import PROJECT_ROOT, required_scenarios, run_conformance

REQUIREMENTS = "2025-11-25"


@pytest.mark.conformance
@pytest.mark.timeout(900)
def test_fixture_passes_2025_11_25_server_requirements(
    conformance_suite: tuple[Path, Path], fixture_backend_url: str
) -> None:
    report = run_conformance(fixture_backend_url, REQUIREMENTS, timeout_s=600, scenario_timeout_s=30)
    print(report.summary())
    for scenario, messages in report.warnings.items():
        print(f"warning in {scenario}: {messages}")

    required = required_scenarios(REQUIREMENTS)
    assert len(required) == 30, f"unexpected size of the {REQUIREMENTS} server set: {required}"
    missing = sorted(set(required) - set(report.scenarios))
    assert not missing, f"required scenarios that did not run: {missing}\n{report.raw_output}"
    # Every scenario that ran must pass, including the ones the requirement set does not score.
    assert not report.failed, f"conformance failures:\n{report.format_failures()}"
    assert set(required) <= set(report.passed)


async def _sampling(ctx: ClientRequestContext, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
    return types.CreateMessageResult(
        role="assistant",
        content=types.TextContent(text="sampled!"),
        model="test-model",
        stop_reason="endTurn",
    )


async def _elicitation(ctx: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={"username": "u", "email": "u@example.com"})


def _text_of(result: types.CallToolResult) -> str:
    return " ".join(c.text for c in result.content if isinstance(c, types.TextContent))


@pytest.mark.timeout(60)
@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")  # logging is 2026-deprecated
async def test_fixture_over_stdio() -> None:
    logs: list[types.LoggingMessageNotificationParams] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logs.append(params)

    params = StdioServerParameters(
        command=sys.executable, args=["-m", FIXTURE_MODULE, "--stdio"], cwd=str(PROJECT_ROOT)
    )
    async with Client(
        params,
        mode="legacy",
        sampling_callback=_sampling,
        elicitation_callback=_elicitation,
        logging_callback=on_log,
        read_timeout_seconds=20,
    ) as client:
        tools = {t.name for t in (await client.list_tools()).tools}
        assert {"test_simple_text", "test_sampling", "test_elicitation", "test_tool_with_logging"} <= tools

        result = await client.call_tool("test_simple_text", {})
        assert _text_of(result) == "This is a simple text response for testing."

        result = await client.call_tool("test_sampling", {"prompt": "hi"})
        assert _text_of(result) == "LLM response: sampled!"

        result = await client.call_tool("test_elicitation", {"message": "who are you?"})
        assert "action=accept" in _text_of(result)

        await client.set_logging_level("warning")  # info logs must now be filtered out
        await client.call_tool("test_tool_with_logging", {})
        assert logs == []
        await client.set_logging_level("debug")
        await client.call_tool("test_tool_with_logging", {})
        assert [entry.data for entry in logs] == [
            "Tool execution started",
            "Tool processing data",
            "Tool execution completed",
        ]


@pytest.mark.timeout(60)
async def test_fixture_serves_2026_era_on_same_endpoint(fixture_backend_url: str) -> None:
    # mode="auto" probes server/discover first, so this exercises the stateless 2026-07-28 path.
    async with Client(fixture_backend_url, mode="auto", read_timeout_seconds=20) as client:
        assert client.session.protocol_version == "2026-07-28"
        result = await client.call_tool("test_simple_text", {})
        assert _text_of(result) == "This is a simple text response for testing."
        contents = (await client.read_resource("test://static-text")).contents
        assert isinstance(contents[0], types.TextResourceContents)
        assert contents[0].text == "This is the content of the static text resource."
