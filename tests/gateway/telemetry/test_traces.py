"""OpenTelemetry through a real gateway process: the official MCP SDK client, a real HTTP backend that
echoes the trace context it received, and a real OTLP receiver (HTTP here and gRPC) decoding what the
gateway exports.

What a platform team relies on: the client's trace continues through the gateway (client span →
gateway SERVER span → gateway CLIENT span → the backend, in ``params._meta`` and HTTP headers), span
names and attributes follow the MCP semantic conventions, errors carry ``error.type``, JSON log
lines carry the ids of the request they were written for, ``sample_ratio: 0`` exports nothing of a
new trace, and the MCP duration histograms appear in /metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the [otel] extra is not installed")
pytest.importorskip("opentelemetry.proto", reason="the [otel] extra is not installed")
pytest.importorskip("grpc", reason="the [otel] extra is not installed")

import httpx
import mcp_types as types
from mcp.client import Client
from opentelemetry import context as otel_context, trace
from opentelemetry.sdk.trace import TracerProvider

from tests.e2e.backends.header_echo import FAIL_CODE
from tests.gateway.telemetry.receivers import GrpcReceiver, HttpReceiver, Receiver, Span
from tests.support import JSON_HEADERS, RunningGateway, http_server, modern_meta, run_gateway

pytestmark = [
    pytest.mark.timeout(90),
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
]


@pytest.fixture(scope="module")
def backend_url() -> Iterator[str]:
    with http_server(lambda port: [sys.executable, "-m", "tests.e2e.backends.header_echo", str(port)]) as url:
        yield url


@pytest.fixture(autouse=True)
def _quick_export(monkeypatch: pytest.MonkeyPatch) -> None:
    # The gateway process inherits this: its batch processor exports every 50 ms instead of 5 s.
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")


def gateway_config(
    backend_url: str, rx: Receiver, protocol: str = "http/protobuf", ratio: float = 1.0
) -> dict[str, Any]:
    return {
        "backends": {"echo": {"transport": "http", "url": backend_url, "required": True}},
        "federation": {"prefix": "always"},
        "telemetry": {
            "otlp_endpoint": rx.endpoint,
            "protocol": protocol,
            "service_name": "switchboard-test",
            "sample_ratio": ratio,
        },
        "logging": {"format": "json", "level": "info"},
    }


@contextlib.contextmanager
def client_trace() -> Iterator[trace.Span]:
    """A span of the test's own (its own provider, not the global one) made current: the SDK client's
    requests carry its context in ``params._meta``."""
    span = TracerProvider().get_tracer("test").start_span("test-root")
    token = otel_context.attach(trace.set_span_in_context(span))
    try:
        yield span
    finally:
        otel_context.detach(token)
        span.end()


@contextlib.asynccontextmanager
async def sdk_client(gw: RunningGateway) -> AsyncIterator[Client]:
    async with Client(gw.mcp, mode="legacy", read_timeout_seconds=30) as client:
        yield client


def hex_ids(span: trace.Span) -> tuple[str, str]:
    ctx = span.get_span_context()
    return format(ctx.trace_id, "032x"), format(ctx.span_id, "016x")


def text_of(result: types.CallToolResult) -> str:
    return " ".join(c.text for c in result.content if isinstance(c, types.TextContent))


def one(spans: list[Span]) -> Span:
    assert len(spans) == 1, spans
    return spans[0]


async def test_a_tool_call_is_one_trace_from_client_to_backend(backend_url: str) -> None:
    rx = HttpReceiver()
    with rx.running():
        with run_gateway(gateway_config(backend_url, rx)) as gw:
            with client_trace() as root:
                async with sdk_client(gw) as client:
                    result = await client.call_tool("echo__echo_meta", {})
            trace_id, root_id = hex_ids(root)
            seen = json.loads(text_of(result))
            spans = await rx.wait_for(
                lambda s: any(x.name == "tools/call echo_meta" and x.trace_id == trace_id for x in s)
            )
            server = one([s for s in rx.named("tools/call echo__echo_meta", "server") if s.trace_id == trace_id])
            client = one([s for s in rx.named("tools/call echo_meta", "client") if s.trace_id == trace_id])

            # The chain of parents: the client's span → the gateway's SERVER span → its CLIENT span.
            assert server.parent_span_id == root_id
            assert client.parent_span_id == server.span_id
            # The backend got the CLIENT span's context, in _meta and in its HTTP headers.
            assert parsed(seen["meta"]["traceparent"]) == (trace_id, client.span_id, True)
            assert seen["traceparent"] == seen["meta"]["traceparent"]

            assert server.attributes["mcp.method.name"] == "tools/call"
            assert server.attributes["gen_ai.tool.name"] == "echo__echo_meta"
            assert server.attributes["gen_ai.operation.name"] == "execute_tool"
            assert server.attributes["jsonrpc.request.id"]
            assert server.attributes["mcp.protocol.version"]
            assert server.attributes["mcp.session.id"]
            assert server.attributes["network.transport"] == "tcp"
            assert server.attributes["switchboard.backend"] == "echo"
            assert server.attributes["switchboard.outcome"] == "allowed"
            assert not server.error and "error.type" not in server.attributes
            assert client.attributes["mcp.method.name"] == "tools/call"
            assert client.attributes["gen_ai.tool.name"] == "echo_meta"
            assert client.attributes["switchboard.backend"] == "echo"
            assert client.attributes["server.address"] == "127.0.0.1"
            assert client.attributes["network.protocol.name"] == "http"
            assert server.resource["service.name"] == "switchboard-test"

            # The session's initialize is a SERVER span of the same trace (the SDK sent the context).
            initialize = one([s for s in spans if s.name == "initialize" and s.trace_id == trace_id])
            assert initialize.kind == "server" and initialize.parent_span_id == root_id

            # JSON log lines written for the call carry its ids (the access line is one of them).
            session_id = server.attributes["mcp.session.id"]

            def call_lines(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
                return [
                    line
                    for line in lines
                    if line.get("logger") == "switchboard.access"
                    and line.get("trace_id") == trace_id
                    and line["method"] == "tools/call"
                ]

            (line,) = call_lines(await logged(gw, lambda lines: bool(call_lines(lines))))
            assert line["span_id"] == server.span_id
            assert line["session_id"] == session_id
            assert line["backend"] == "echo" and line["outcome"] == "allowed" and line["result"] == "ok"
            assert line["principal"] and line["duration_ms"] >= 0
            assert line["level"] == "info" and line["ts"].endswith("Z") and "message" in line

            async with httpx.AsyncClient(timeout=10) as http:
                metrics = (await http.get(f"{gw.url}/metrics")).text
            client_ok = (
                'mcp_client_operation_duration_seconds_count{backend="echo",error_type="",mcp_method_name="%s"} 1.0'
            )
            assert client_ok % "tools/call" in metrics
            assert (
                'mcp_server_operation_duration_seconds_count{error_type="",mcp_method_name="tools/call"} 1.0' in metrics
            )


async def test_errors_carry_error_type(backend_url: str) -> None:
    rx = HttpReceiver()
    with rx.running():
        with run_gateway(gateway_config(backend_url, rx)) as gw:
            async with sdk_client(gw) as client:
                with pytest.raises(Exception, match="deliberate failure"):
                    await client.call_tool("echo__fail", {})
                broken = await client.call_tool("echo__broken", {})
                assert broken.is_error
                with pytest.raises(Exception, match=r"(?i)unknown tool|not found"):
                    await client.call_tool("nobody__nope", {})
            await rx.wait_for(lambda _s: len(rx.named("tools/call nobody__nope", "server")) == 1)
            await rx.wait_for(lambda _s: len(rx.named("tools/call broken", "client")) == 1)

            failed = one(rx.named("tools/call echo__fail", "server"))
            assert failed.error and failed.attributes["error.type"] == str(FAIL_CODE)
            assert failed.attributes["rpc.response.status_code"] == str(FAIL_CODE)
            failed_upstream = one(rx.named("tools/call fail", "client"))
            assert failed_upstream.error and failed_upstream.attributes["error.type"] == str(FAIL_CODE)
            assert failed_upstream.parent_span_id == failed.span_id

            tool_error = one(rx.named("tools/call echo__broken", "server"))
            assert tool_error.error and tool_error.attributes["error.type"] == "tool_error"
            assert one(rx.named("tools/call broken", "client")).attributes["error.type"] == "tool_error"

            # Refused by the gateway itself: no backend call, the gateway's own error code.
            unknown = one(rx.named("tools/call nobody__nope", "server"))
            assert unknown.error and unknown.attributes["error.type"].lstrip("-").isdigit()
            assert [s for s in rx.spans if s.kind == "client" and s.trace_id == unknown.trace_id] == []

            async with httpx.AsyncClient(timeout=10) as http:
                metrics = (await http.get(f"{gw.url}/metrics")).text
            failed_count = (
                'mcp_server_operation_duration_seconds_count{error_type="%d",mcp_method_name="tools/call"} 1.0'
            )
            assert failed_count % FAIL_CODE in metrics
            assert (
                'mcp_server_operation_duration_seconds_count{error_type="tool_error",mcp_method_name="tools/call"} 1.0'
                in metrics
            )
            assert (
                'mcp_client_operation_duration_seconds_count{backend="echo",error_type="",mcp_method_name="tools/list"}'
                not in metrics
            ), "lists are answered from the catalog, not forwarded as calls"
            assert (
                f'mcp_client_operation_duration_seconds_count{{backend="echo",error_type="{FAIL_CODE}",'
                'mcp_method_name="tools/call"} 1.0' in metrics
            )
            assert (
                'mcp_server_operation_duration_seconds_bucket{error_type="",le="+Inf",mcp_method_name="initialize"}'
                in metrics
            )


async def test_http_traceparent_header_parents_the_server_span(backend_url: str) -> None:
    """A client that puts its context in the HTTP headers only (a modern, stateless request here)."""
    rx = HttpReceiver()
    with rx.running():
        with run_gateway(gateway_config(backend_url, rx)) as gw:
            parent_trace, parent_span = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
            headers = {
                **JSON_HEADERS,
                "traceparent": f"00-{parent_trace}-{parent_span}-01",
                "tracestate": "vendor=value",
                "mcp-protocol-version": "2026-07-28",
                "mcp-method": "tools/call",
                "mcp-name": "echo__echo_meta",
            }
            body = {
                "jsonrpc": "2.0",
                "id": 7,
                "method": "tools/call",
                "params": {"name": "echo__echo_meta", "arguments": {}, "_meta": modern_meta()},
            }
            async with httpx.AsyncClient(timeout=20) as http:
                answer = await http.post(gw.mcp, json=body, headers=headers)
            assert answer.status_code == 200, answer.text
            result = answer.json()["result"] if answer.headers["content-type"].startswith("application/json") else None
            assert result is not None, answer.text
            seen = json.loads(result["content"][0]["text"])
            await rx.wait_for(lambda _s: len(rx.named("tools/call echo_meta", "client")) == 1)
            server = one(rx.named("tools/call echo__echo_meta", "server"))
            client = one(rx.named("tools/call echo_meta", "client"))
            assert (server.trace_id, server.parent_span_id) == (parent_trace, parent_span)
            assert server.attributes["mcp.protocol.version"] == "2026-07-28"
            assert "mcp.session.id" not in server.attributes  # a modern client has no session
            assert parsed(seen["traceparent"]) == (parent_trace, client.span_id, True)
            assert seen["meta"]["traceparent"] == seen["traceparent"]
            assert seen["tracestate"] == "vendor=value"  # the client's trace state goes on


async def test_grpc_export_and_sampling_by_parent(backend_url: str) -> None:
    """OTLP over gRPC; ``sample_ratio: 0`` records no new trace, but a sampled parent's trace is kept."""
    rx = GrpcReceiver()
    with rx.running():
        with run_gateway(gateway_config(backend_url, rx, protocol="grpc", ratio=0.0)) as gw:
            async with sdk_client(gw) as client:
                unsampled = json.loads(text_of(await client.call_tool("echo__echo_meta", {})))
                with client_trace() as root:
                    sampled = json.loads(text_of(await client.call_tool("echo__echo_meta", {})))
            trace_id, root_id = hex_ids(root)
            await rx.wait_for(lambda _s: len(rx.named("tools/call echo_meta", "client")) == 1)
        # Stopped: the gateway flushed what it had at shutdown; still only the sampled trace is there.
        assert {s.trace_id for s in rx.spans} == {trace_id}, [(s.name, s.trace_id) for s in rx.spans]
        server = one(rx.named("tools/call echo__echo_meta", "server"))
        assert server.parent_span_id == root_id
        assert one(rx.named("tools/call echo_meta", "client")).parent_span_id == server.span_id
        # The unsampled call still passed a context on (flag 00), so the backend's spans join it.
        assert parsed(unsampled["traceparent"])[2] is False
        assert unsampled["meta"]["traceparent"] == unsampled["traceparent"]
        assert parsed(sampled["traceparent"])[0::2] == (trace_id, True)


async def test_spans_left_in_the_batch_are_flushed_at_shutdown(
    backend_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "600000")  # never on its own during the test
    rx = HttpReceiver()
    with rx.running():
        with run_gateway(gateway_config(backend_url, rx)) as gw:
            async with sdk_client(gw) as client:
                await client.call_tool("echo__echo_meta", {})
            assert rx.spans == []
        assert len(rx.named("tools/call echo__echo_meta", "server")) == 1
        assert len(rx.named("tools/call echo_meta", "client")) == 1


def parsed(traceparent: str) -> tuple[str, str, bool]:
    """(trace id, parent span id, sampled) of a W3C traceparent."""
    version, trace_id, span_id, flags = traceparent.split("-")
    assert version == "00"
    return trace_id, span_id, bool(int(flags, 16) & 1)


def json_lines(gw: RunningGateway) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in gw.log().splitlines() if raw.startswith("{")]


async def logged(
    gw: RunningGateway, enough: Callable[[list[dict[str, Any]]], bool], timeout_s: float = 10.0
) -> list[dict[str, Any]]:
    """The gateway's JSON log lines once ``enough`` says so (its writer thread writes every 0.2 s)."""
    deadline = time.monotonic() + timeout_s
    while not enough(lines := json_lines(gw)):
        assert time.monotonic() < deadline, gw.log()
        await asyncio.sleep(0.05)
    return lines
