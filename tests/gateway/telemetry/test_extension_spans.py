"""Spans of the extensions through a real gateway process: MCPx envelopes routed in a topic (real
WebSocket participants) and MCPL context hooks fanned out to a real MCPL backend (a real MCPL host in
front), exported to a real OTLP/HTTP receiver."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the [otel] extra is not installed")
pytest.importorskip("opentelemetry.proto", reason="the [otel] extra is not installed")

from tests.e2e.mcpl_host import McplHost
from tests.e2e.mcpl_support import enable, mcpl_backend, stats, ws_url as mcpl_ws_url
from tests.e2e.mcpx_client import ADMIN, Peer, tool_call
from tests.e2e.test_mcpx_topics import wait_for_backend
from tests.gateway.telemetry.receivers import HttpReceiver, Span
from tests.support import run_gateway

pytestmark = [pytest.mark.timeout(90)]

PARENT_TRACE, PARENT_SPAN = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
TRACEPARENT = f"00-{PARENT_TRACE}-{PARENT_SPAN}-01"
OTHER_TRACE = "1af7651916cd43dd8448eb211c80319d"
OTHER_TRACEPARENT = f"00-{OTHER_TRACE}-c7ad6b7169203332-01"


def one_named(receiver: HttpReceiver, name: str, kind: str | None = None) -> Span:
    spans = receiver.named(name, kind)
    assert len(spans) == 1, spans
    return spans[0]


@pytest.fixture(autouse=True)
def _quick_export(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")


@pytest.fixture
def receiver() -> Iterator[HttpReceiver]:
    rx = HttpReceiver()
    with rx.running():
        yield rx


async def test_mcpx_envelopes_are_spans_that_continue_the_senders_trace(receiver: HttpReceiver) -> None:
    config = {
        "backends": {"demo": {"transport": "builtin", "required": True}},
        "principals": {
            "alice": {"tokens": ["alice-token"], "capabilities": ["mcp/*", "chat"]},
            "bob": {"tokens": ["bob-token"], "capabilities": ["mcp/*", "chat"]},
        },
        "auth": {"admin_token": ADMIN},
        "mcpx": {"topics": {"lab": {"participants": ["demo"]}}},  # the demo backend sits in the topic
        "telemetry": {"otlp_endpoint": receiver.endpoint},
    }
    with run_gateway(config) as gw:
        wait_for_backend(gw, "lab", "demo")
        alice = await Peer.join(gw.url, "lab", "alice-token")
        bob = await Peer.join(gw.url, "lab", "bob-token")
        try:
            request = tool_call("echo", {"text": "hi"})
            request["params"]["_meta"] = {"traceparent": TRACEPARENT}
            sent = await alice.send("mcp/request:tools/call:echo", request, to=["bob"])
            got = await bob.recv_kind("mcp/request:tools/call:echo")
            assert got["id"] == sent["id"]
            chat = await bob.send("chat", {"text": "hello"})
            await alice.recv_kind("chat")
            add = tool_call("add", {"a": 2, "b": 3}, rpc_id=7)
            add["params"]["_meta"] = {"traceparent": OTHER_TRACEPARENT}
            asked = await alice.send("mcp/request:tools/call:add", add, to=["demo"])
            answer = await alice.recv_kind("mcp/response:tools/call:add", timeout=10)
            assert answer["correlation_id"] == asked["id"], answer
        finally:
            await alice.close()
            await bob.close()
        await receiver.wait_for(lambda _s: len(receiver.named("mcpx chat")) == 1)
        await receiver.wait_for(lambda _s: len(receiver.named("mcpx mcp/request:tools/call")) == 2)

    (envelope,) = [s for s in receiver.named("mcpx mcp/request:tools/call") if s.trace_id == PARENT_TRACE]
    assert envelope.kind == "producer"
    assert (envelope.trace_id, envelope.parent_span_id) == (PARENT_TRACE, PARENT_SPAN)
    assert envelope.attributes["mcpx.topic"] == "lab"
    assert envelope.attributes["mcpx.kind"] == "mcp/request:tools/call:echo"
    assert envelope.attributes["mcpx.from"] == "alice"
    assert envelope.attributes["mcpx.to"] == ["bob"]
    assert envelope.attributes["mcpx.envelope.id"] == sent["id"]
    assert envelope.attributes["mcpx.delivered"] == 1
    assert envelope.attributes["mcp.method.name"] == "tools/call"
    assert envelope.attributes["gen_ai.tool.name"] == "echo"
    said = receiver.named("mcpx chat")[0]
    assert said.parent_span_id == "" and said.attributes["mcpx.from"] == "bob"
    assert said.attributes["mcpx.envelope.id"] == chat["id"]

    # A backend in the topic: its call is a CLIENT span under the request envelope's span, and its
    # answer, routed back as an envelope, is one more span of the same trace.
    await receiver.wait_for(lambda _s: len(receiver.named("mcpx mcp/response:tools/call")) == 1)
    (asked_span,) = [s for s in receiver.named("mcpx mcp/request:tools/call") if s.trace_id == OTHER_TRACE]
    call = one_named(receiver, "tools/call add", "client")
    assert (call.trace_id, call.parent_span_id) == (OTHER_TRACE, asked_span.span_id)
    assert call.attributes["switchboard.backend"] == "demo" and call.attributes["gen_ai.tool.name"] == "add"
    answered = one_named(receiver, "mcpx mcp/response:tools/call")
    assert answered.trace_id == OTHER_TRACE and answered.attributes["mcpx.from"] == "demo"


async def test_mcpl_hooks_are_client_spans_under_the_hosts_request(receiver: HttpReceiver) -> None:
    config = {
        "backends": {"mem1": mcpl_backend("memory", "--name", "mem1")},
        "telemetry": {"otlp_endpoint": receiver.endpoint},
    }
    with run_gateway(config) as gw:
        async with McplHost.connect(mcpl_ws_url(gw)) as host:
            await enable(host, "stats", ["memory.retrieval"])  # one backend: bare names
            params = {
                "inferenceId": "inf_1",
                "conversationId": "conv_1",
                "turnIndex": 1,
                "userMessage": "What do you remember?",
                "_meta": {"traceparent": TRACEPARENT},
            }
            response = await host.request("context/beforeInference", params)
            assert "result" in response, response
            seen = (await stats(host, "stats"))["hooks"][-1]
        await receiver.wait_for(lambda _s: len(receiver.named("context/beforeInference", "client")) == 1)

    server = receiver.named("context/beforeInference", "server")[0]
    hook = receiver.named("context/beforeInference", "client")[0]
    assert (server.trace_id, server.parent_span_id) == (PARENT_TRACE, PARENT_SPAN)
    assert (hook.trace_id, hook.parent_span_id) == (PARENT_TRACE, server.span_id)
    assert hook.attributes["switchboard.backend"] == "mem1"
    assert hook.attributes["mcp.method.name"] == "context/beforeInference"
    assert hook.attributes["network.transport"] == "pipe"
    # The backend got the hook's own context (the host's trace, the gateway's CLIENT span as parent).
    assert seen["_meta"]["traceparent"].split("-")[1:3] == [PARENT_TRACE, hook.span_id]
