"""The 2026-07-28 (stateless) side of ``/mcp`` in-process: credentials per request, rate limits and shapes,
and streams that last (``subscriptions/listen``, a call whose client goes away).

A real Gateway with the builtin demo backend behind httpx's ASGI transport (no sockets, no
subprocess); helpers in modern_door_support.py, fixtures in conftest.py.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from adapters import mcp_modern
from gateway import errors
from gateway.app import build_app
from gateway.core import Gateway
from gateway.sse import SSEParser
from tests.gateway.transports.modern_door_support import (
    BASE,
    META,
    SECRET,
    WAIT_S,
    assert_error,
    client_for,
    headers_for,
    jwt,
    rpc,
)

pytestmark = pytest.mark.timeout(30)


# ---- credentials, per request ------------------------------------------------------------------


async def test_a_request_without_credentials_is_401_with_a_challenge(auth_door: httpx.AsyncClient) -> None:
    answer = await auth_door.post("/mcp", headers=headers_for("tools/list"), json=rpc("tools/list", rpc_id=11))
    error = assert_error(answer, 401, errors.INVALID_REQUEST, 11)
    assert "Unauthorized" in error["message"]
    assert answer.headers["www-authenticate"].startswith("Bearer ")


async def test_a_bad_token_is_401_invalid_token(auth_door: httpx.AsyncClient) -> None:
    headers = headers_for("tools/list", authorization="Bearer a.b.c")
    answer = await auth_door.post("/mcp", headers=headers, json=rpc("tools/list"))
    assert answer.status_code == 401
    assert 'error="invalid_token"' in answer.headers["www-authenticate"]


async def test_each_request_is_held_to_its_own_token(auth_door: httpx.AsyncClient) -> None:
    call = rpc("tools/call", {"name": "add", "arguments": {"a": 1, "b": 1}}, 12)
    broad = headers_for("tools/call", "add", authorization=f"Bearer {jwt({'sub': 'carol'})}")
    allowed = await auth_door.post("/mcp", headers=broad, json=call)
    assert allowed.status_code == 200 and allowed.json()["result"]["structuredContent"] == {"sum": 2}
    narrow_token = jwt({"sub": "carol", "capabilities": ["mcp/request:tools/list", "mcp/request:tools/call:echo"]})
    narrow = headers_for("tools/call", "add", authorization=f"Bearer {narrow_token}")
    denied = await auth_door.post("/mcp", headers=narrow, json=call)
    assert_error(denied, 200, errors.CAPABILITY_DENIED, 12)
    listed = await auth_door.post(
        "/mcp", headers={**narrow, "mcp-method": "tools/list"}, json=rpc("tools/list", rpc_id=13)
    )
    assert listed.status_code == 200
    assert [t["name"] for t in listed.json()["result"]["tools"]] == ["echo"], "lists show only what may be called"
    # The next request with the broad token is not held to the narrow one: nothing is remembered.
    again = await auth_door.post("/mcp", headers=broad, json=call)
    assert again.status_code == 200 and "result" in again.json()


# ---- rate limits and shapes ----------------------------------------------------------------------


@pytest.fixture
async def limited_door() -> AsyncIterator[httpx.AsyncClient]:
    config = {"rate_limits": {"per_tool": {"add": {"per_s": 0.01, "burst": 1}}}}
    async for client, _ in client_for(config):
        yield client


async def test_a_rate_limited_call_is_429_with_retry_after(limited_door: httpx.AsyncClient) -> None:
    call = rpc("tools/call", {"name": "add", "arguments": {"a": 1, "b": 1}}, 20)
    first = await limited_door.post("/mcp", headers=headers_for("tools/call", "add"), json=call)
    assert first.status_code == 200 and "result" in first.json()
    second = await limited_door.post("/mcp", headers=headers_for("tools/call", "add"), json={**call, "id": 21})
    assert_error(second, 429, errors.RATE_LIMITED, 21)
    retry = second.headers["retry-after"]
    assert retry.isdigit() and int(retry) >= 1
    other = rpc("tools/call", {"name": "echo", "arguments": {"text": "x"}}, 22)
    assert (await limited_door.post("/mcp", headers=headers_for("tools/call", "echo"), json=other)).status_code == 200


async def test_a_batch_without_a_session_is_refused(door: httpx.AsyncClient) -> None:
    batch = [rpc("tools/list", rpc_id=1), rpc("tools/list", rpc_id=2)]
    answer = await door.post("/mcp", headers=headers_for("tools/list"), json=batch)
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == errors.INVALID_REQUEST


async def test_a_response_from_the_client_is_received_with_202(door: httpx.AsyncClient) -> None:
    answer = await door.post(
        "/mcp", headers=headers_for("tools/list"), json={"jsonrpc": "2.0", "id": 3, "result": {"_meta": META}}
    )
    assert answer.status_code == 202 and answer.content == b""


# ---- subscriptions/listen (a stream that lasts: driven by hand, not through httpx) ----------------


class HeldPost:
    """One POST on the ASGI app whose response may stream forever; the test decides when the client leaves."""

    def __init__(self, app: Any, message: dict[str, Any], headers: dict[str, str]) -> None:
        self._body = json.dumps(message).encode()
        self.scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": "/mcp",
            "raw_path": b"/mcp",
            "query_string": b"",
            "root_path": "",
            "headers": [(b"host", b"127.0.0.1:8787")] + [(k.encode(), v.encode()) for k, v in headers.items()],
            "client": ("127.0.0.1", 40000),
            "server": ("127.0.0.1", 8787),
        }
        self._app = app
        self._sent_body = False
        self._gone = asyncio.Event()
        self._parser = SSEParser()
        self.events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.start: dict[str, Any] | None = None
        self.raw = bytearray()
        self.sent_messages: list[dict[str, Any]] = []
        self.task = asyncio.create_task(app(self.scope, self._receive, self._send))

    async def _receive(self) -> dict[str, Any]:
        if not self._sent_body:
            self._sent_body = True
            return {"type": "http.request", "body": self._body, "more_body": False}
        await self._gone.wait()
        return {"type": "http.disconnect"}

    async def _send(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.start = message
            return
        self.sent_messages.append(message)
        body = message.get("body", b"")
        self.raw += body
        for event in self._parser.feed(body):
            if event.data:
                self.events.put_nowait(json.loads(event.data))

    async def next(self) -> dict[str, Any]:
        async with asyncio.timeout(WAIT_S):
            return await self.events.get()

    async def leave(self) -> None:
        self._gone.set()
        async with asyncio.timeout(WAIT_S):
            await self.task


async def test_a_listen_stream_is_acknowledged_tagged_filtered_and_ends_with_the_client(
    door_and_gateway: tuple[httpx.AsyncClient, Gateway],
) -> None:
    _, gateway = door_and_gateway
    app = build_app(gateway.config, gateway)
    before = len(gateway.sessions)
    listen = rpc("subscriptions/listen", {"notifications": {"toolsListChanged": True}}, "L1")
    held = HeldPost(app, listen, headers_for("subscriptions/listen"))
    ack = await held.next()
    assert held.start is not None and held.start["status"] == 200
    assert dict(held.start["headers"])[b"content-type"] == b"text/event-stream"
    assert ack["method"] == "notifications/subscriptions/acknowledged"
    assert ack["params"]["notifications"] == {"toolsListChanged": True}
    assert ack["params"]["_meta"] == {mcp_modern.SUBSCRIPTION_ID_KEY: "L1"}
    [listener] = [s for s in gateway.sessions if s.transport == "modern-listen"]
    # What the stream was not asked for is filtered out; what it was is tagged with its id.
    listener.standalone.push({"jsonrpc": "2.0", "method": "notifications/prompts/list_changed"})
    listener.standalone.push({"jsonrpc": "2.0", "method": "notifications/tools/list_changed", "params": {}})
    changed = await held.next()
    assert changed == {
        "jsonrpc": "2.0",
        "method": "notifications/tools/list_changed",
        "params": {"_meta": {mcp_modern.SUBSCRIPTION_ID_KEY: "L1"}},
    }
    await held.leave()
    assert len(gateway.sessions) == before, "the listener's session ends with its stream"


async def test_a_listen_request_without_a_filter_is_400(door: httpx.AsyncClient) -> None:
    answer = await door.post(
        "/mcp", headers=headers_for("subscriptions/listen"), json=rpc("subscriptions/listen", {}, "L2")
    )
    error = assert_error(answer, 400, errors.INVALID_PARAMS, "L2")
    assert "notifications" in error["message"]


@pytest.fixture
async def auth_gateway() -> AsyncIterator[Gateway]:
    config = {
        "auth": {"jwt": {"hs256_secret": SECRET}},
        "principals": {"carol": {"capabilities": ["mcp/*"]}},
    }
    async for _, gateway in client_for(config):
        yield gateway


async def test_a_listen_stream_reports_what_the_callers_token_may_not_hear(auth_gateway: Gateway) -> None:
    app = build_app(auth_gateway.config, auth_gateway)
    token = jwt({"sub": "carol", "capabilities": ["mcp/request:subscriptions/listen", "mcp/request:tools/list"]})
    wanted = {"toolsListChanged": True, "promptsListChanged": True}
    headers = headers_for("subscriptions/listen", authorization=f"Bearer {token}")
    held = HeldPost(app, rpc("subscriptions/listen", {"notifications": wanted}, 3), headers)
    ack = await held.next()
    assert ack["params"]["notifications"] == {"toolsListChanged": True}
    [refused] = ack["params"]["_meta"]["io.switchboard/refused"]
    assert refused["promptsListChanged"] is True and refused["code"] == errors.CAPABILITY_DENIED
    await held.leave()


async def test_a_listen_stream_needs_its_own_capability(auth_gateway: Gateway) -> None:
    token = jwt({"sub": "carol", "capabilities": ["mcp/request:tools/list"]})
    headers = headers_for("subscriptions/listen", authorization=f"Bearer {token}")
    app = build_app(auth_gateway.config, auth_gateway)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE) as client:
        listen = rpc("subscriptions/listen", {"notifications": {"toolsListChanged": True}}, 4)
        answer = await client.post("/mcp", headers=headers, json=listen)
    assert_error(answer, 200, errors.CAPABILITY_DENIED, 4)
    assert not [s for s in auth_gateway.sessions if s.transport == "modern-listen"], "no listener left behind"


async def test_a_client_that_closes_its_stream_cancels_the_call_upstream(
    door_and_gateway: tuple[httpx.AsyncClient, Gateway],
) -> None:
    _, gateway = door_and_gateway
    app = build_app(gateway.config, gateway)
    meta = {**META, "progressToken": "p"}
    call = rpc("tools/call", {"name": "slow_count", "arguments": {"n": 200, "delay_s": 0.05}}, "long", meta=meta)
    held = HeldPost(app, call, headers_for("tools/call", "slow_count"))
    first = await held.next()
    assert first["method"] == "notifications/progress" and first["params"]["progressToken"] == "p"
    demo = gateway.connections["demo"]
    assert demo.inflight == 1
    await held.leave()  # the modern era's only cancellation: the client closes the stream
    assert held.task.exception() is None
    for _ in range(int(WAIT_S / 0.01)):
        if not demo.inflight:
            break
        await asyncio.sleep(0.01)
    assert demo.inflight == 0, "the backend call was abandoned"
    assert b'"id":"long"' not in held.raw, "nobody is left to answer"


async def test_a_listen_stream_ended_by_the_gateway_completes_its_response(
    door_and_gateway: tuple[httpx.AsyncClient, Gateway],
) -> None:
    _, gateway = door_and_gateway
    app = build_app(gateway.config, gateway)
    listen = rpc("subscriptions/listen", {"notifications": {"toolsListChanged": True}}, "L1")
    held = HeldPost(app, listen, headers_for("subscriptions/listen"))
    await held.next()
    [listener] = [s for s in gateway.sessions if s.transport == "modern-listen"]
    gateway.sessions.end(listener)  # what Gateway.stop() does to every session
    async with asyncio.timeout(WAIT_S):
        await held.task
    last = held.sent_messages[-1]
    assert last["type"] == "http.response.body" and not last.get("more_body", False), "the body was never ended"
