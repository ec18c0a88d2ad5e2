"""MGP streaming through the gateway (gateway/mgp/streaming.py, MGP_COMMUNICATION.md §12), driven
through ``Router.handle`` of a real Gateway: the builtin demo backend (plain MCP: progress and log
lines) and a real subprocess MGP backend that streams itself (tests/e2e/backends/mgp_stream_server.py).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from adapters.mgp import streaming as wire
from gateway import jsonrpc
from gateway.channels import Channel
from gateway.config import Config
from gateway.core import Gateway
from gateway.mgp import streaming
from gateway.routing.call import CallSink
from gateway.sessions import ClientSession
from tests.gateway.mgp.demo_gateway import ask, mgp_session_of, rpc, session_of
from tests.support import stdio_backend

pytestmark = pytest.mark.timeout(30)

STREAM = {"stream": True}


def count(n: int, delay_s: float = 0.01, **extra: Any) -> dict[str, Any]:
    return {"name": "slow_count", "arguments": {"n": n, "delay_s": delay_s}, **extra}


def generate(n: int, delay_s: float = 0.01, **extra: Any) -> dict[str, Any]:
    return {"name": "generate", "arguments": {"n": n, "delay_s": delay_s}, **extra}


@pytest.fixture
async def gw() -> AsyncIterator[Gateway]:
    """The demo backend (plain MCP) and the streaming MGP backend."""
    config = Config.model_validate(
        {
            "backends": {
                "demo": {"transport": "builtin"},
                "streamer": stdio_backend("tests.e2e.backends.mgp_stream_server", required=True),
            },
            "federation": {"prefix": "never"},
        }
    )
    gateway = Gateway(config)
    await gateway.start()
    try:
        for conn in gateway.connections.values():
            assert await conn.wait_ready(10), conn.last_error
        yield gateway
    finally:
        await gateway.stop()


async def streaming_client(gw: Gateway, extensions: list[str] | None = None) -> ClientSession:
    session, result = await mgp_session_of(gw, "0.8.0", extensions or ["streaming", "progress"])
    assert "streaming" in result["capabilities"]["mgp"]["extensions"]
    return session


def channel() -> Channel:
    return Channel("call", 10_000, 10_000)


async def call_on(gw: Gateway, session: ClientSession, message: dict[str, Any], on: Channel) -> dict[str, Any]:
    answer = await gw.router.handle(session, message, jsonrpc.Shape.REQUEST, on)
    assert answer is not None
    return answer


def seen(on: Channel, method: str) -> list[dict[str, Any]]:
    return [m["params"] for _, m in on._log if m.get("method") == method]


async def until(on: Channel, method: str, enough: Callable[[list[dict[str, Any]]], bool]) -> list[dict[str, Any]]:
    after = 0
    async with asyncio.timeout(10):
        while not enough(found := seen(on, method)):
            batch = await on.read(after)  # waits for the next message
            after = batch[-1][0] if batch else after
    return found


async def calls_received(gw: Gateway, session: ClientSession) -> dict[str, Any]:
    answer = await ask(gw, session, rpc("tools/call", {"name": "received", "arguments": {}}, "r"))
    received: dict[str, Any] = json.loads(answer["result"]["content"][0]["text"])
    return received


# ---- a plain MCP backend: the gateway synthesizes the stream ---------------------------------------


async def test_a_plain_backends_progress_and_logs_become_the_stream(gw: Gateway) -> None:
    session = await streaming_client(gw)
    on = channel()
    answer = await call_on(gw, session, rpc("tools/call", count(3, _mgp=STREAM), 7), on)
    result = answer["result"]
    assert result["content"][0]["text"] == "counted to 3"
    progress = seen(on, wire.PROGRESS)
    assert [p["request_id"] for p in progress] == [7, 7, 7]
    assert [p["progress"] for p in progress] == pytest.approx([1 / 3, 2 / 3, 1.0], abs=1e-5)
    assert progress[0]["message"] == "step 1" and "estimated_remaining_ms" in progress[0]
    chunks = seen(on, wire.CHUNK)
    assert [(c["request_id"], c["index"], c["content"]["text"]) for c in chunks] == [
        (7, 0, "count 1/3"),
        (7, 1, "count 2/3"),
        (7, 2, "count 3/3"),
    ]
    assert seen(on, "notifications/progress") == [], "the gateway's own progress token is not the client's"
    marker = result["_mgp"]
    assert marker["streamed"] is True and marker["chunks_sent"] == 3 and marker["duration_ms"] >= 0


async def test_a_clients_own_progress_token_still_gets_mcp_progress(gw: Gateway) -> None:
    session = await streaming_client(gw)
    on = channel()
    params = count(2, _mgp=STREAM, _meta={"progressToken": "mine"})
    answer = await call_on(gw, session, rpc("tools/call", params, "c1"), on)
    assert [p["progressToken"] for p in seen(on, "notifications/progress")] == ["mine", "mine"]
    assert [p["request_id"] for p in seen(on, wire.PROGRESS)] == ["c1", "c1"]
    assert answer["result"]["_mgp"]["chunks_sent"] == 2


async def test_without_the_streaming_extension_a_call_is_not_streamed(gw: Gateway) -> None:
    session, _ = await mgp_session_of(gw, "0.8.0", ["tool_security"])
    on = channel()
    answer = await call_on(gw, session, rpc("tools/call", count(2, _mgp=STREAM), 1), on)
    assert "_mgp" not in answer["result"]
    assert seen(on, wire.CHUNK) == [] and seen(on, wire.PROGRESS) == []


async def test_a_plain_clients_mgp_param_never_reaches_a_backend_nor_streams(gw: Gateway) -> None:
    session = await session_of(gw)
    on = channel()
    answer = await call_on(gw, session, rpc("tools/call", generate(2, _mgp={"stream": True, "x": 1}), 1), on)
    assert "_mgp" not in answer["result"], "a plain client sees no MGP field"
    assert seen(on, wire.CHUNK) == []
    received = await calls_received(gw, session)
    assert "_mgp" not in received["calls"][-2]


async def test_an_mgp_clients_stream_flag_goes_only_to_a_backend_that_streams(gw: Gateway) -> None:
    session, _ = await mgp_session_of(gw, "0.8.0", ["tool_security"])  # no streaming
    await call_on(gw, session, rpc("tools/call", generate(1, _mgp={"stream": True, "trace_id": "t"}), 1), channel())
    received = await calls_received(gw, session)
    assert received["calls"][-2]["_mgp"] == {"trace_id": "t"}, "other _mgp fields go to an MGP backend"


# ---- an MGP backend that streams itself ------------------------------------------------------------


async def test_a_streaming_backends_chunks_are_relayed_under_the_clients_id(gw: Gateway) -> None:
    session = await streaming_client(gw)
    on = channel()
    answer = await call_on(gw, session, rpc("tools/call", generate(4, _mgp=STREAM), "s-1"), on)
    chunks = seen(on, wire.CHUNK)
    assert [(c["request_id"], c["index"], c["content"]["text"]) for c in chunks] == [
        ("s-1", i, f"part{i} ") for i in range(4)
    ]
    assert chunks[-1]["done"] is True
    result = answer["result"]
    assert result["content"][0]["text"] == "part0 part1 part2 part3 "
    marker = result["_mgp"]
    assert marker["streamed"] is True and marker["chunks_sent"] == 4, "the backend's own fields kept"
    assert "duration_ms" in marker, "the gateway adds what the backend left out"
    received = await calls_received(gw, session)
    assert received["calls"][-2]["_mgp"] == {"stream": True}
    assert "progressToken" not in (received["calls"][-2].get("_meta") or {}), "no synthesized progress"
    assert gw.mgp.streams.in_flight == 0


async def test_cancel_stops_a_streaming_backend_and_returns_what_arrived(gw: Gateway) -> None:
    session = await streaming_client(gw)
    on = channel()
    task = asyncio.create_task(call_on(gw, session, rpc("tools/call", generate(200, 0.02, _mgp=STREAM), 5), on))
    await until(on, wire.CHUNK, lambda c: len(c) >= 2)
    cancel = await ask(gw, session, rpc("mgp/stream/cancel", {"request_id": 5, "reason": "user_cancelled"}, 6))
    partial = cancel["result"]["partial_result"]
    assert cancel["result"]["cancelled"] is True
    text = partial["content"][0]["text"]
    assert text.startswith("part0 part1 ") and len(partial["content"]) == 1
    original = await task
    assert original["id"] == 5 and original["error"]["code"] == jsonrpc.REQUEST_CANCELLED
    sent = len(seen(on, wire.CHUNK))
    await asyncio.sleep(0.1)
    assert len(seen(on, wire.CHUNK)) == sent, "nothing relayed after the cancel"
    received = await calls_received(gw, session)
    assert "mgp/stream/cancel" in received["methods"], "§12.7 toward the backend"
    assert gw.mgp.streams.in_flight == 0


async def test_cancel_of_a_plain_backends_call_via_the_kernel_tool(gw: Gateway) -> None:
    session = await streaming_client(gw)
    on = channel()
    task = asyncio.create_task(call_on(gw, session, rpc("tools/call", count(100, 0.02, _mgp=STREAM), 9), on))
    await until(on, wire.CHUNK, lambda c: len(c) >= 2)
    cancel = await ask(
        gw, session, rpc("tools/call", {"name": "mgp.stream.cancel", "arguments": {"request_id": 9}}, 10)
    )
    structured = cancel["result"]["structuredContent"]
    assert structured["cancelled"] is True
    assert structured["partial_result"]["content"][0]["text"].startswith("count 1/100count 2/100")
    assert (await task)["error"]["code"] == jsonrpc.REQUEST_CANCELLED


async def test_a_session_cannot_cancel_another_sessions_stream(gw: Gateway) -> None:
    owner, other = await streaming_client(gw), await streaming_client(gw)
    on = channel()
    task = asyncio.create_task(call_on(gw, owner, rpc("tools/call", generate(5, 0.02, _mgp=STREAM), 3), on))
    await until(on, wire.CHUNK, lambda c: len(c) >= 1)
    refused = await ask(gw, other, rpc("mgp/stream/cancel", {"request_id": 3}, 4))
    assert "error" in refused
    answer = await task
    assert answer["result"]["_mgp"]["chunks_sent"] == 5, "the owner's stream went on to the end"


async def test_cancel_with_a_bad_or_unknown_id_is_a_clear_error(gw: Gateway) -> None:
    session = await streaming_client(gw)
    for params in ({}, {"request_id": [1]}, {"request_id": True}, {"request_id": 404}):
        answer = await ask(gw, session, rpc("mgp/stream/cancel", params, 1))
        assert "error" in answer, params


# ---- the client's side of a stream: gap (§12.9) and pace (§12.8) ------------------------------------


async def test_a_gap_is_filled_from_what_the_gateway_kept(gw: Gateway) -> None:
    session = await streaming_client(gw)
    on = channel()
    task = asyncio.create_task(call_on(gw, session, rpc("tools/call", generate(100, 0.02, _mgp=STREAM), "g"), on))
    await until(on, wire.CHUNK, lambda c: len(c) >= 3)
    handled = gw.mgp.streams.on_client_notification(session, wire.GAP, {"request_id": "g", "missing_indices": [1, 999]})
    assert handled
    again = [c for c in seen(on, wire.CHUNK) if c["index"] == 1]
    assert len(again) == 2 and again[1]["content"]["text"] == "part1 "
    lost = [c for c in seen(on, wire.CHUNK) if c.get("gap_unrecoverable")]
    assert lost and lost[0]["missing_indices"] == [999] and lost[0]["request_id"] == "g"
    assert gw.mgp.streams.on_client_notification(
        session, wire.PACE, {"request_id": "g", "max_chunks_per_second": 5, "reason": "client_busy"}
    )
    await ask(gw, session, rpc("mgp/stream/cancel", {"request_id": "g"}, 12))
    await task
    received = await calls_received(gw, session)
    assert received["paces"] and received["paces"][0]["max_chunks_per_second"] == 5
    assert isinstance(received["paces"][0]["request_id"], int), "under the gateway's upstream id"
    assert not gw.mgp.streams.on_client_notification(session, "notifications/other", {})


# ---- where chunks arrive, and the bounds ------------------------------------------------------------


async def test_chunks_on_the_calls_own_stream_are_relayed_too(gw: Gateway) -> None:
    """An HTTP backend's chunks ride the call's response stream (the §12 era note): they reach the
    call's sink, not MgpNews, and are relayed the same way."""
    session = await streaming_client(gw)
    on = channel()
    task = asyncio.create_task(call_on(gw, session, rpc("tools/call", generate(100, 0.02, _mgp=STREAM), "h"), on))
    await until(on, wire.CHUNK, lambda c: len(c) >= 1)
    stream = gw.mgp.streams._own(session, "h")
    assert stream is not None and stream.sink is not None and stream.pending is not None
    upstream = stream.pending.upstream_id
    text = {"type": "text", "text": "over http"}
    stream.sink.deliver(jsonrpc.notification(wire.CHUNK, {"request_id": upstream, "index": 500, "content": text}))
    stream.sink.deliver(jsonrpc.notification(wire.PROGRESS, {"request_id": upstream, "progress": 0.5}))
    assert [c["request_id"] for c in seen(on, wire.CHUNK) if c["index"] == 500] == ["h"]
    assert seen(on, wire.PROGRESS) == [{"request_id": "h", "progress": 0.5}]
    await ask(gw, session, rpc("mgp/stream/cancel", {"request_id": "h"}, "x"))
    await task


async def test_an_mgp_client_never_gets_chunks_of_a_call_that_was_not_streamed(gw: Gateway) -> None:
    session = await streaming_client(gw)
    on = channel()
    sink = CallSink(session, on)
    sink.deliver(jsonrpc.notification(wire.CHUNK, {"request_id": 1, "index": 0, "content": None}))
    sink.deliver(jsonrpc.notification("notifications/message", {"level": "info", "data": "kept"}))
    assert seen(on, wire.CHUNK) == [] and len(seen(on, "notifications/message")) == 1
    conn = gw.connections["streamer"]
    for params in ({"request_id": [1]}, {"request_id": 12345, "index": 0}, {}):
        gw.mgp.streams.on_news(conn, jsonrpc.notification(wire.CHUNK, params))  # nothing to relay, no crash
    assert seen(on, wire.CHUNK) == [] and seen(session.standalone, wire.CHUNK) == []


async def test_beyond_the_bound_a_call_is_served_unstreamed(gw: Gateway, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(streaming, "MAX_STREAMS", 0)
    session = await streaming_client(gw)
    on = channel()
    answer = await call_on(gw, session, rpc("tools/call", count(2, _mgp=STREAM), 1), on)
    assert answer["result"]["_mgp"]["streamed"] is False and answer["result"]["_mgp"]["chunks_sent"] == 0
    assert seen(on, wire.CHUNK) == [] and seen(on, wire.PROGRESS) == []
    assert gw.mgp.streams.in_flight == 0


def test_partial_results_join_text_and_keep_other_content() -> None:
    image = {"type": "image", "data": "AA==", "mimeType": "image/png"}
    text = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}, image, {"type": "text", "text": "c"}]
    assert wire.partial_result([*text, None]) == {
        "content": [{"type": "text", "text": "ab"}, image, {"type": "text", "text": "c"}]
    }
