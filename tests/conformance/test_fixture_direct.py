"""The fixture backend, tested directly (no gateway in between).

The conformance tests prove the fixture is a valid reference backend in every era it can
serve: the official suite's 2025-11-25 server requirement set (30 scored scenarios) and its
2026-07-28 set (37) must pass against the dual-era fixture, the 2025-11-25 set against
`--era legacy` and the 2026-07-28 set against `--era modern`, so any failure seen later through
the gateway is the gateway's doing. The other tests cover what the suite cannot: which SDK
client modes reach which era (over HTTP and stdio), the exact wire answers a gateway's era
detection keys off, and the multi-round-trip tools behaving the same in both eras.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx
import mcp_types as types
import pytest
from mcp.client import Client, ClientRequestContext
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import ToolsListChanged

from tests.conformance.conftest import FIXTURE_MODULE
from tests.conformance.runner import PROJECT_ROOT, required_scenarios, run_conformance
from tests.support import (
    JSON_HEADERS as _LEGACY_HEADERS,
    initialize_request,
    modern_headers as _modern_headers,
    modern_meta,
)

LEGACY_REQUIREMENTS = "2025-11-25"
MODERN_REQUIREMENTS = "2026-07-28"
SCORED_COUNT = {LEGACY_REQUIREMENTS: 30, MODERN_REQUIREMENTS: 37}
URL_FIXTURE = {"dual": "fixture_backend_url", "legacy": "legacy_fixture_url", "modern": "modern_fixture_url"}
META = modern_meta("probe")
# The codes that positively identify a 2026-07-28 server when it rejects a request.
MODERN_REJECTION_CODES = {-32020, -32021, -32022}


# --------------------------------------------------------------------------------------
# The official suite
# --------------------------------------------------------------------------------------


@pytest.mark.conformance
@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("era", "requirements"),
    [
        ("dual", LEGACY_REQUIREMENTS),
        ("dual", MODERN_REQUIREMENTS),
        ("legacy", LEGACY_REQUIREMENTS),
        ("modern", MODERN_REQUIREMENTS),
    ],
)
def test_fixture_passes_server_requirements(
    conformance_suite: tuple[Path, Path], request: pytest.FixtureRequest, era: str, requirements: str
) -> None:
    url = request.getfixturevalue(URL_FIXTURE[era])
    report = run_conformance(url, requirements, timeout_s=240, scenario_timeout_s=30)
    print(report.summary())
    for scenario, messages in report.warnings.items():
        print(f"warning in {scenario}: {messages}")

    required = required_scenarios(requirements)
    assert len(required) == SCORED_COUNT[requirements], f"unexpected size of the {requirements} server set: {required}"
    missing = sorted(set(required) - set(report.scenarios))
    assert not missing, f"required scenarios that did not run: {missing}\n{report.raw_output}"
    if requirements == LEGACY_REQUIREMENTS:
        # Every scenario that ran must pass, including the ones the requirement set does not score.
        assert not report.failed, f"conformance failures:\n{report.format_failures()}"
    else:
        # 2026-07-28 also runs the tasks extension and pending SEP-2243 scenarios unscored; the
        # fixture implements neither (no tasks, no x-mcp-header tool), so only scored ones count.
        assert not report.scored_failures, f"conformance failures:\n{report.format_failures()}"
    assert set(required) <= set(report.passed)


# --------------------------------------------------------------------------------------
# Era gates on the wire (what a gateway's era detection sees)
# --------------------------------------------------------------------------------------


_INITIALIZE = initialize_request(1, client="probe")
_DISCOVER = {"jsonrpc": "2.0", "id": 2, "method": "server/discover", "params": {"_meta": META}}


def _body(response: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC message of a response, whether sent as JSON or as one SSE event."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        for line in response.text.splitlines():
            if line.startswith("data:") and line[5:].strip():
                return json.loads(line[5:])
        raise AssertionError(f"no message in the SSE body: {response.text!r}")
    return response.json()


def test_legacy_era_answers_modern_requests_like_a_legacy_only_server(legacy_fixture_url: str) -> None:
    with httpx.Client(timeout=10) as http:
        # The 2026-07-28 probe: a legacy-only server knows neither the header nor the method,
        # and without a session id it refuses the request before looking at it.
        response = http.post(legacy_fixture_url, json=_DISCOVER, headers=_modern_headers("server/discover"))
        assert response.status_code == 400
        error = _body(response)["error"]
        assert error["code"] == -32600 and error["code"] not in MODERN_REJECTION_CODES
        assert "Missing session ID" in error["message"]

        # The handshake still works, and it negotiates down to a handshake-era version.
        response = http.post(legacy_fixture_url, json=_INITIALIZE, headers=_LEGACY_HEADERS)
        assert response.status_code == 200
        session_id = response.headers["mcp-session-id"]
        assert _body(response)["result"]["protocolVersion"] == "2025-11-25"
        session = {**_LEGACY_HEADERS, "Mcp-Session-Id": session_id, "MCP-Protocol-Version": "2025-11-25"}
        http.post(legacy_fixture_url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)

        # On the session, server/discover does not exist...
        response = http.post(legacy_fixture_url, json=_DISCOVER, headers=session)
        assert _body(response)["error"]["code"] == -32601
        # ...and a 2026-07-28 version header is an unsupported version, said the legacy way.
        response = http.post(
            legacy_fixture_url,
            json={"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {"_meta": META}},
            headers={**session, "MCP-Protocol-Version": MODERN_REQUIREMENTS},
        )
        assert response.status_code == 400
        assert _body(response)["error"]["code"] == -32600
        http.delete(legacy_fixture_url, headers=session)


def test_modern_era_refuses_the_handshake(modern_fixture_url: str) -> None:
    with httpx.Client(timeout=10) as http:
        response = http.post(modern_fixture_url, json=_INITIALIZE, headers=_LEGACY_HEADERS)
        assert response.status_code == 404
        assert "mcp-session-id" not in response.headers
        assert response.json() == {
            "jsonrpc": "2.0",
            "id": 1,
            "error": {"code": -32601, "message": "Method not found", "data": "initialize"},
        }

        response = http.post(
            modern_fixture_url,
            json={"jsonrpc": "2.0", "id": 4, "method": "tools/list"},
            headers={**_LEGACY_HEADERS, "MCP-Protocol-Version": "2025-11-25"},
        )
        assert response.status_code == 400
        error = response.json()["error"]
        assert error["code"] == -32022
        assert error["data"] == {"supported": [MODERN_REQUIREMENTS], "requested": "2025-11-25"}

        assert http.get(modern_fixture_url, headers={"Accept": "text/event-stream"}).status_code == 405

        response = http.post(modern_fixture_url, json=_DISCOVER, headers=_modern_headers("server/discover"))
        assert response.status_code == 200
        assert response.json()["result"]["supportedVersions"] == [MODERN_REQUIREMENTS]


def test_dual_era_serves_both_on_one_endpoint(fixture_backend_url: str) -> None:
    with httpx.Client(timeout=10) as http:
        response = http.post(fixture_backend_url, json=_DISCOVER, headers=_modern_headers("server/discover"))
        assert response.status_code == 200 and "mcp-session-id" not in response.headers
        assert _body(response)["result"]["resultType"] == "complete"

        response = http.post(fixture_backend_url, json=_INITIALIZE, headers=_LEGACY_HEADERS)
        assert response.status_code == 200
        session_id = response.headers["mcp-session-id"]
        http.delete(fixture_backend_url, headers={"Mcp-Session-Id": session_id, "MCP-Protocol-Version": "2025-11-25"})


async def _stdio_answer(era: str, message: dict[str, Any]) -> dict[str, Any]:
    """Send one JSON-RPC line to a fresh `--stdio --era ERA` fixture and return its answer."""
    command = [sys.executable, "-m", FIXTURE_MODULE, "--stdio", "--era", era]
    async with await anyio.open_process(command, cwd=PROJECT_ROOT, stderr=subprocess.DEVNULL) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        await proc.stdin.send((json.dumps(message) + "\n").encode())
        buffer = b""
        with anyio.fail_after(20):
            while b"\n" not in buffer:
                buffer += await proc.stdout.receive()
        await proc.stdin.aclose()
    return json.loads(buffer.split(b"\n", 1)[0])


@pytest.mark.timeout(60)
async def test_stdio_era_gates() -> None:
    answer = await _stdio_answer("legacy", _DISCOVER)
    assert answer["id"] == 2 and answer["error"]["code"] == -32601
    answer = await _stdio_answer("modern", _INITIALIZE)
    assert answer["id"] == 1 and answer["error"]["code"] == -32601
    answer = await _stdio_answer("modern", _DISCOVER)
    assert answer["result"]["supportedVersions"] == [MODERN_REQUIREMENTS]


# --------------------------------------------------------------------------------------
# SDK clients against each era
# --------------------------------------------------------------------------------------

# (fixture era, client mode) -> negotiated protocol version, or None when connecting must fail.
ERA_MATRIX: list[tuple[str, str, str | None]] = [
    ("dual", "auto", MODERN_REQUIREMENTS),
    ("dual", "legacy", LEGACY_REQUIREMENTS),
    ("legacy", "auto", LEGACY_REQUIREMENTS),  # server/discover refused -> falls back to initialize
    ("legacy", "legacy", LEGACY_REQUIREMENTS),
    ("modern", "auto", MODERN_REQUIREMENTS),
    ("modern", "legacy", None),  # initialize is -32601 Method not found
]


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in _leaves(sub)]
    return [exc]


def _text_of(result: types.CallToolResult) -> str:
    return " ".join(c.text for c in result.content if isinstance(c, types.TextContent))


async def _check_client(target: str | StdioServerParameters, mode: str, expected: str | None) -> None:
    client = Client(target, mode=mode, read_timeout_seconds=20)
    if expected is None:
        # The SDK surfaces the refused handshake as MCPError(-32601) inside its task-group ExceptionGroups.
        with anyio.fail_after(30), pytest.raises(Exception) as caught:
            async with client:
                pass
        errors = [e for e in _leaves(caught.value) if isinstance(e, MCPError)]
        assert errors and errors[0].code == -32601, f"expected -32601 Method not found, got {caught.value!r}"
        return
    with anyio.fail_after(30):
        async with client:
            assert client.session.protocol_version == expected
            result = await client.call_tool("test_simple_text", {})
            assert _text_of(result) == "This is a simple text response for testing."


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("era", "mode", "expected"), ERA_MATRIX)
async def test_sdk_client_modes_over_http(
    request: pytest.FixtureRequest, era: str, mode: str, expected: str | None
) -> None:
    await _check_client(request.getfixturevalue(URL_FIXTURE[era]), mode, expected)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("era", "mode", "expected"), ERA_MATRIX)
async def test_sdk_client_modes_over_stdio(era: str, mode: str, expected: str | None) -> None:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", FIXTURE_MODULE, "--stdio", "--era", era], cwd=str(PROJECT_ROOT)
    )
    await _check_client(params, mode, expected)


# --------------------------------------------------------------------------------------
# Behaviour beyond the suite
# --------------------------------------------------------------------------------------


async def _sampling(ctx: ClientRequestContext, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
    return types.CreateMessageResult(
        role="assistant",
        content=types.TextContent(text="sampled!"),
        model="test-model",
        stop_reason="endTurn",
    )


_FORM_ANSWERS: dict[str, Any] = {
    "name": "Alice",
    "color": "blue",
    "ok": True,
    "context": "fixture tests",
    "username": "u",
    "email": "u@example.com",
}


async def _elicitation(ctx: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
    assert isinstance(params, types.ElicitRequestFormParams)
    fields = params.requested_schema.get("properties", {})
    return types.ElicitResult(action="accept", content={k: v for k, v in _FORM_ANSWERS.items() if k in fields})


async def _roots(ctx: ClientRequestContext) -> types.ListRootsResult:
    return types.ListRootsResult(roots=[types.Root(uri="file:///test/root", name="Test Root")])


@pytest.mark.timeout(60)
@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")  # roots is 2026-deprecated
async def test_client_input_tools_give_the_same_answers_in_both_eras(fixture_backend_url: str) -> None:
    """2026-07-28: input_required + retry (driven by the SDK client); legacy: real server requests."""
    calls: list[tuple[str, dict[str, Any]]] = [
        ("test_input_required_result_multi_round", {}),
        ("test_input_required_result_multiple_inputs", {}),
        ("test_input_required_result_request_state", {}),
        ("test_input_required_result_list_roots", {}),
        ("test_sampling", {"prompt": "hi"}),
        ("test_elicitation", {"message": "who are you?"}),
    ]
    answers: dict[str, list[str]] = {}
    for mode in ("auto", "legacy"):
        async with Client(
            fixture_backend_url,
            mode=mode,
            sampling_callback=_sampling,
            elicitation_callback=_elicitation,
            list_roots_callback=_roots,
            read_timeout_seconds=20,
        ) as client:
            texts = [_text_of(await client.call_tool(name, args)) for name, args in calls]
            prompt = await client.get_prompt("test_input_required_result_prompt")
            texts.append(str(getattr(prompt.messages[0].content, "text", "")))
            answers[client.session.protocol_version] = texts
    assert (
        answers[MODERN_REQUIREMENTS]
        == answers[LEGACY_REQUIREMENTS]
        == [
            "Alice's favorite color is blue",
            "name=Alice, greeting=sampled!, roots=file:///test/root",
            "state-ok: confirmed=true",
            "Client roots: file:///test/root",
            "LLM response: sampled!",
            'User response: action=accept, content={"username": "u", "email": "u@example.com"}',
            "Answer using this context: fixture tests",
        ]
    )


@pytest.mark.timeout(60)
@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")  # logging is 2026-deprecated
async def test_modern_log_level_travels_per_request(modern_fixture_url: str) -> None:
    for level, expected in (
        (None, []),
        ("warning", ["warning", "error"]),
        ("debug", ["debug", "info", "warning", "error"]),
    ):
        logs: list[str] = []

        async def on_log(params: types.LoggingMessageNotificationParams, sink: list[str] = logs) -> None:
            sink.append(params.level)

        async with Client(modern_fixture_url, mode="auto", logging_callback=on_log, log_level=level) as client:
            await client.call_tool("test_logging_tool", {})
        assert logs == expected, f"log_level={level}"


@pytest.mark.timeout(60)
async def test_modern_listen_stream_carries_change_notifications(modern_fixture_url: str) -> None:
    async with Client(modern_fixture_url, mode="auto", read_timeout_seconds=20) as client:
        assert client.server_capabilities.tools is not None and client.server_capabilities.tools.list_changed
        async with client.listen(tools_list_changed=True) as subscription:
            await client.call_tool("test_trigger_tool_change", {})
            with anyio.fail_after(10):
                event = await subscription.__anext__()
        assert isinstance(event, ToolsListChanged)


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
