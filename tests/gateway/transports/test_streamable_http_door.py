"""The Streamable HTTP door in-process (httpx's ASGI transport, no sockets): statuses and the entrance rule.

A door bug shows up here without a gateway process. JSON answers only: the ASGI transport buffers
whole responses, so SSE streaming stays with the e2e tests.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
from base64 import urlsafe_b64encode
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from gateway import errors
from gateway.app import build_app
from gateway.config import Config
from gateway.core import Gateway

pytestmark = pytest.mark.timeout(30)

BASE = "http://127.0.0.1:8787"
HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
SECRET = "door-test-secret"
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
}


def b64(data: bytes) -> str:
    return urlsafe_b64encode(data).rstrip(b"=").decode()


def jwt(claims: dict[str, Any]) -> str:
    head, body = b64(b'{"alg":"HS256"}'), b64(json.dumps({"exp": time.time() + 60, **claims}).encode())
    return f"{head}.{body}.{b64(hmac.new(SECRET.encode(), f'{head}.{body}'.encode(), hashlib.sha256).digest())}"


def rpc(method: str, params: dict[str, Any] | None = None, rpc_id: Any = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": params or {}}


INIT = rpc(
    "initialize", {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
)


async def client_for(config: dict[str, Any]) -> AsyncIterator[httpx.AsyncClient]:
    cfg = Config.model_validate({"backends": {"demo": {"transport": "builtin"}}, **config})
    gateway = Gateway(cfg)
    app = build_app(cfg, gateway)
    await gateway.start()
    try:
        assert await gateway.connections["demo"].wait_ready(10)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE) as client:
            yield client
    finally:
        await gateway.stop()


@pytest.fixture
async def open_door() -> AsyncIterator[httpx.AsyncClient]:
    async for client in client_for({"limits": {"max_body_bytes": 4096, "max_inflight_per_session": 4}}):
        yield client


@pytest.fixture
async def auth_door() -> AsyncIterator[httpx.AsyncClient]:
    config = {
        "auth": {"jwt": {"hs256_secret": SECRET}},
        "principals": {"carol": {"capabilities": ["mcp/*"]}},
    }
    async for client in client_for(config):
        yield client


async def session(client: httpx.AsyncClient, token: str | None = None) -> dict[str, str]:
    auth = {"authorization": f"Bearer {token}"} if token else {}
    response = await client.post("/mcp", headers={**HEADERS, **auth}, json=INIT)
    assert response.status_code == 200, response.text
    headers = {
        **HEADERS,
        **auth,
        "mcp-session-id": response.headers["mcp-session-id"],
        "mcp-protocol-version": "2025-11-25",
    }
    note = await client.post("/mcp", headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert note.status_code == 202
    return headers


async def test_a_legacy_session_calls_a_tool(open_door: httpx.AsyncClient) -> None:
    headers = await session(open_door)
    answer = await open_door.post(
        "/mcp", headers=headers, json=rpc("tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}}, 5)
    )
    assert answer.status_code == 200 and answer.json()["result"]["structuredContent"] == {"sum": 3}


async def test_a_modern_request_maps_errors_to_statuses_by_the_one_table(open_door: httpx.AsyncClient) -> None:
    headers = {**HEADERS, "mcp-protocol-version": "2026-07-28", "mcp-method": "vendor/unknown"}
    answer = await open_door.post("/mcp", headers=headers, json=rpc("vendor/unknown", {"_meta": MODERN_META}))
    code = answer.json()["error"]["code"]
    assert answer.status_code == errors.http_status(code, modern=True) == 404


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"origin": "null"}, 403),
        ({"origin": "http://evil.example"}, 403),
        ({"origin": "http://localhost:8787@evil.example"}, 403),
        ({"host": "evil.example"}, 421),
        ({"content-type": "text/plain"}, 415),
        ({"accept": "text/html"}, 406),
        ({"mcp-session-id": "no-such-session"}, 404),
    ],
)
async def test_refusals_have_their_statuses(open_door: httpx.AsyncClient, headers: dict[str, str], status: int) -> None:
    body = rpc("tools/list") if "mcp-session-id" in headers else INIT
    answer = await open_door.post("/mcp", headers={**HEADERS, **headers}, json=body)
    assert answer.status_code == status, answer.text
    assert answer.json()["error"]["code"] == errors.INVALID_REQUEST


async def test_oversize_bodies_and_batches_are_refused(open_door: httpx.AsyncClient) -> None:
    too_big = await open_door.post("/mcp", headers=HEADERS, content=b'{"x":"' + b"a" * 5000 + b'"}')
    assert too_big.status_code == 413
    headers = await session(open_door)
    batch = [rpc("ping", rpc_id=i) for i in range(5)]
    assert (await open_door.post("/mcp", headers=headers, json=batch)).status_code == 400
    answered = await open_door.post("/mcp", headers=headers, json=batch[:4])
    assert [a["id"] for a in answered.json()] == [0, 1, 2, 3]


async def test_a_session_is_bound_to_its_principal_and_each_request_to_its_token(auth_door: httpx.AsyncClient) -> None:
    headers = await session(auth_door, jwt({"sub": "carol"}))
    narrow = {**headers, "authorization": f"Bearer {jwt({'sub': 'carol', 'capabilities': ['mcp/request:tools/list']})}"}
    call = rpc("tools/call", {"name": "echo", "arguments": {"text": "x"}}, 2)
    assert (await auth_door.post("/mcp", headers=narrow, json=call)).json()["error"]["code"] == errors.CAPABILITY_DENIED
    other = {**headers, "authorization": f"Bearer {jwt({'sub': 'dave'})}"}
    refused = await auth_door.post("/mcp", headers=other, json=call)
    assert refused.status_code == 401 and refused.headers["www-authenticate"].startswith("Bearer")
    assert "result" in (await auth_door.post("/mcp", headers=headers, json=call)).json()


async def test_malformed_credentials_are_401_with_a_challenge(auth_door: httpx.AsyncClient) -> None:
    nested = b64(b"[" * 2000 + b"]" * 2000) + "." + b64(b"{}") + "." + b64(b"x")
    for token in (nested, "a.b.c", "garbage", "x" * 20000):
        answer = await auth_door.post("/mcp", headers={**HEADERS, "authorization": f"Bearer {token}"}, json=INIT)
        assert answer.status_code == 401, token[:40]
        assert 'error="invalid_token"' in answer.headers["www-authenticate"]


async def test_sessions_beyond_the_limit_are_refused_with_503() -> None:
    async for client in client_for({"limits": {"max_sessions": 1}}):
        await session(client)
        refused = await client.post("/mcp", headers=HEADERS, json=INIT)
        assert refused.status_code == 503
        assert refused.json()["error"] == {"code": errors.INTERNAL_ERROR, "message": "Too many sessions"}


async def test_a_refused_initialize_leaves_no_session_behind() -> None:
    """Refused initializes do not use up the session limit, and the id the refusal carried names nothing."""
    async for client in client_for({"limits": {"max_sessions": 1}}):
        bad = rpc("initialize", {**INIT["params"], "capabilities": "none"})
        for _ in range(3):
            refused = await client.post("/mcp", headers=HEADERS, json=bad)
            assert refused.json()["error"]["code"] == errors.INVALID_PARAMS
        gone = {**HEADERS, "mcp-session-id": refused.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
        assert (await client.post("/mcp", headers=gone, json=rpc("tools/list"))).status_code == 404
        await session(client)  # the one session the limit allows is still to be had


async def test_calls_beyond_the_in_flight_limit_are_refused_and_the_running_one_finishes() -> None:
    async for client in client_for({"limits": {"max_inflight_per_session": 1}}):
        headers = await session(client)
        slow = asyncio.create_task(
            client.post(
                "/mcp",
                headers=headers,
                json=rpc("tools/call", {"name": "slow_count", "arguments": {"n": 1, "delay_s": 1}}, 7),
            )
        )
        await asyncio.sleep(0.3)
        refused = await client.post(
            "/mcp", headers=headers, json=rpc("tools/call", {"name": "echo", "arguments": {"text": "x"}}, 8)
        )
        assert refused.json()["error"]["code"] == errors.SESSION_OVERLOADED
        assert "limit 1" in refused.json()["error"]["message"]
        finished = await slow
        assert finished.status_code == 200 and '"id":7' in finished.text.replace(" ", "")


async def test_the_drafts_exit_request_is_answered_and_ends_the_session(open_door: httpx.AsyncClient) -> None:
    headers = await session(open_door)
    answer = await open_door.post("/mcp", headers=headers, json={"jsonrpc": "2.0", "id": 8, "method": "exit"})
    assert answer.status_code == 200 and answer.json() == {"jsonrpc": "2.0", "id": 8, "result": None}
    assert (await open_door.post("/mcp", headers=headers, json=rpc("ping"))).status_code == 404
    headers = await session(open_door)
    batch = [rpc("ping", rpc_id=1), {"jsonrpc": "2.0", "id": 2, "method": "exit"}]
    answered = await open_door.post("/mcp", headers=headers, json=batch)
    assert sorted(a["id"] for a in answered.json()) == [1, 2]
    assert (await open_door.post("/mcp", headers=headers, json=rpc("ping"))).status_code == 404


async def test_a_get_stream_ended_by_the_gateway_completes_its_response() -> None:
    """Shutdown ends every session: the standalone stream ends its response (more_body=False), as
    an ASGI server requires, instead of returning mid-body. Driven by hand: httpx buffers a GET."""
    cfg = Config.model_validate({"backends": {"demo": {"transport": "builtin"}}})
    gateway = Gateway(cfg)
    app = build_app(cfg, gateway)
    await gateway.start()
    gone = asyncio.Event()
    try:
        assert await gateway.connections["demo"].wait_ready(10)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE) as client:
            headers = await session(client)
        sent: list[dict[str, Any]] = []
        opened = asyncio.Event()

        async def receive() -> dict[str, Any]:
            await gone.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)
            if message["type"] == "http.response.body":
                opened.set()

        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "GET",
            "scheme": "http",
            "path": "/mcp",
            "raw_path": b"/mcp",
            "query_string": b"",
            "root_path": "",
            "headers": [
                (b"host", b"127.0.0.1:8787"),
                (b"accept", b"text/event-stream"),
                (b"mcp-session-id", headers["mcp-session-id"].encode()),
                (b"mcp-protocol-version", b"2025-11-25"),
            ],
            "client": ("127.0.0.1", 40000),
            "server": ("127.0.0.1", 8787),
        }
        task = asyncio.create_task(app(scope, receive, send))
        async with asyncio.timeout(5):
            await opened.wait()
        assert sent[0]["status"] == 200
        [held] = [s for s in gateway.sessions if s.id == headers["mcp-session-id"]]
        gateway.sessions.end(held)  # what Gateway.stop() does to every session
        async with asyncio.timeout(5):
            await task
        last = sent[-1]
        assert last["type"] == "http.response.body" and not last.get("more_body", False), "the body was never ended"
    finally:
        gone.set()
        await gateway.stop()
