"""The 2026-07-28 (stateless) side of ``/mcp`` in-process: envelope, routing headers, statuses, credentials.

A real Gateway with the builtin demo backend behind httpx's ASGI transport (no sockets, no
subprocess). Every modern request carries its client envelope in ``params._meta`` and mirrors its
method (and target) in headers; whatever goes wrong is answered with the code and HTTP status of
the one error table (gateway/errors.py).
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

from adapters import mcp_modern
from gateway import errors
from gateway.app import build_app
from gateway.config import Config
from gateway.core import Gateway
from gateway.sse import SSEParser

pytestmark = pytest.mark.timeout(30)

BASE = "http://127.0.0.1:8787"
VERSION = "2026-07-28"
SECRET = "modern-door-secret"
META = {
    mcp_modern.PROTOCOL_VERSION_KEY: VERSION,
    mcp_modern.CLIENT_CAPABILITIES_KEY: {},
    mcp_modern.CLIENT_INFO_KEY: {"name": "t", "version": "1"},
}
BODY_LIMIT = 4096
WAIT_S = 5.0


def rpc(method: str, params: dict[str, Any] | None = None, rpc_id: Any = 1, meta: Any = META) -> dict[str, Any]:
    body = dict(params or {})
    if meta is not None:
        body["_meta"] = meta
    return {"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": body}


def headers_for(method: str, name: str | None = None, **extra: str) -> dict[str, str]:
    headers = {
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
        "mcp-protocol-version": VERSION,
        "mcp-method": method,
    }
    if name is not None:
        headers["mcp-name"] = name
    headers.update(extra)
    return headers


def b64(data: bytes) -> str:
    return urlsafe_b64encode(data).rstrip(b"=").decode()


def jwt(claims: dict[str, Any]) -> str:
    head, body = b64(b'{"alg":"HS256"}'), b64(json.dumps({"exp": time.time() + 60, **claims}).encode())
    return f"{head}.{body}.{b64(hmac.new(SECRET.encode(), f'{head}.{body}'.encode(), hashlib.sha256).digest())}"


async def client_for(config: dict[str, Any]) -> AsyncIterator[tuple[httpx.AsyncClient, Gateway]]:
    cfg = Config.model_validate({"backends": {"demo": {"transport": "builtin"}}, **config})
    gateway = Gateway(cfg)
    app = build_app(cfg, gateway)
    await gateway.start()
    try:
        assert await gateway.connections["demo"].wait_ready(10)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE) as client:
            yield client, gateway
    finally:
        await gateway.stop()


@pytest.fixture
async def door() -> AsyncIterator[httpx.AsyncClient]:
    async for client, _ in client_for({"limits": {"max_body_bytes": BODY_LIMIT}}):
        yield client


@pytest.fixture
async def door_and_gateway() -> AsyncIterator[tuple[httpx.AsyncClient, Gateway]]:
    async for pair in client_for({}):
        yield pair


@pytest.fixture
async def auth_door() -> AsyncIterator[httpx.AsyncClient]:
    config = {
        "auth": {"jwt": {"hs256_secret": SECRET}},
        "principals": {"carol": {"capabilities": ["mcp/*"]}},
    }
    async for client, _ in client_for(config):
        yield client


def assert_error(answer: httpx.Response, status: int, code: int, rpc_id: Any = 1) -> dict[str, Any]:
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"].startswith("application/json")
    body = answer.json()
    assert body["jsonrpc"] == "2.0" and body["id"] == rpc_id, body
    assert body["error"]["code"] == code, body
    if status not in (401, 413, 415):  # failures of the HTTP exchange itself keep their door's status
        assert errors.http_status(code, modern=True) == status, "statuses come from the one table"
    error: dict[str, Any] = body["error"]
    return error


# ---- server/discover ----------------------------------------------------------------------------


async def test_server_discover_describes_the_gateway_without_a_session(door: httpx.AsyncClient) -> None:
    answer = await door.post("/mcp", headers=headers_for("server/discover"), json=rpc("server/discover", rpc_id="d"))
    assert answer.status_code == 200, answer.text
    assert "mcp-session-id" not in answer.headers, "the modern era has no sessions"
    body = answer.json()
    assert body["id"] == "d"
    result = body["result"]
    assert result["supportedVersions"] == list(mcp_modern.MODERN_VERSIONS)
    assert result["resultType"] == "complete"
    assert result["ttlMs"] == 0 and result["cacheScope"] == "private"
    assert {"tools", "resources", "prompts"} <= set(result["capabilities"])
    assert isinstance(result["_meta"][mcp_modern.SERVER_INFO_KEY]["name"], str)


async def test_a_single_server_door_describes_that_backend(door: httpx.AsyncClient) -> None:
    answer = await door.post("/servers/demo/mcp", headers=headers_for("server/discover"), json=rpc("server/discover"))
    assert answer.status_code == 200, answer.text
    result = answer.json()["result"]
    assert result["_meta"][mcp_modern.SERVER_INFO_KEY] == {"name": "switchboard-demo", "version": "1.0.0"}
    assert result["capabilities"] == {"tools": {}, "resources": {}, "prompts": {}, "logging": {}}
    call = rpc("tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}}, 2)
    added = await door.post("/servers/demo/mcp", headers=headers_for("tools/call", "add"), json=call)
    assert added.json()["result"]["structuredContent"] == {"sum": 3}
    missing = await door.post("/servers/nope/mcp", headers=headers_for("server/discover"), json=rpc("server/discover"))
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == errors.INVALID_REQUEST


async def test_a_modern_session_is_never_left_behind(door_and_gateway: tuple[httpx.AsyncClient, Gateway]) -> None:
    door, gateway = door_and_gateway
    before = len(gateway.sessions)
    for rpc_id in range(3):
        answer = await door.post(
            "/mcp", headers=headers_for("server/discover"), json=rpc("server/discover", rpc_id=rpc_id)
        )
        assert answer.status_code == 200
        call = rpc("tools/call", {"name": "echo", "arguments": {"text": "x"}}, rpc_id)
        assert (await door.post("/mcp", headers=headers_for("tools/call", "echo"), json=call)).status_code == 200
    assert len(gateway.sessions) == before, "each exchange's session lives for that exchange only"


# ---- calls -------------------------------------------------------------------------------------


async def test_a_tool_call_with_the_envelope_is_answered_and_stamped(door: httpx.AsyncClient) -> None:
    call = rpc("tools/call", {"name": "add", "arguments": {"a": 2, "b": 40}}, "c-1")
    answer = await door.post("/mcp", headers=headers_for("tools/call", "add"), json=call)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["id"] == "c-1"
    assert body["result"]["structuredContent"] == {"sum": 42}
    assert body["result"]["resultType"] == "complete"
    assert "ttlMs" not in body["result"], "a tool result is not cacheable"


async def test_a_list_carries_caching_hints(door: httpx.AsyncClient) -> None:
    answer = await door.post("/mcp", headers=headers_for("tools/list"), json=rpc("tools/list", rpc_id=2))
    assert answer.status_code == 200, answer.text
    result = answer.json()["result"]
    assert sorted(t["name"] for t in result["tools"]) == ["add", "echo", "slow_count"]
    assert result["resultType"] == "complete"
    assert result["ttlMs"] == mcp_modern.DEFAULT_TTL_MS and result["cacheScope"] == "private"


async def test_a_resource_read_mirrors_its_uri_in_mcp_name(door: httpx.AsyncClient) -> None:
    read = rpc("resources/read", {"uri": "demo://readme"}, 3)
    answer = await door.post("/mcp", headers=headers_for("resources/read", "demo://readme"), json=read)
    assert answer.status_code == 200, answer.text
    assert answer.json()["result"]["contents"][0]["uri"] == "demo://readme"
    missing = rpc("resources/read", {"uri": "demo://nope"}, 4)
    refused = await door.post("/mcp", headers=headers_for("resources/read", "demo://nope"), json=missing)
    # The backend's "not found" is no malformed request: 200, with the backend's code.
    assert_error(refused, 200, errors.RESOURCE_NOT_FOUND, 4)


async def test_an_unknown_tool_is_the_backends_invalid_params_and_400(door: httpx.AsyncClient) -> None:
    call = rpc("tools/call", {"name": "nope", "arguments": {}}, 5)
    answer = await door.post("/mcp", headers=headers_for("tools/call", "nope"), json=call)
    error = assert_error(answer, 400, errors.INVALID_PARAMS, 5)
    assert error["message"] == "Unknown tool: nope"


async def test_progress_and_logs_stream_as_sse_under_the_clients_token(door: httpx.AsyncClient) -> None:
    meta = {**META, "progressToken": "tok", mcp_modern.LOG_LEVEL_KEY: "info"}
    call = rpc("tools/call", {"name": "slow_count", "arguments": {"n": 2, "delay_s": 0.01}}, "s", meta=meta)
    answer = await door.post("/mcp", headers=headers_for("tools/call", "slow_count"), json=call)
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "text/event-stream"
    events = [json.loads(line[len("data: ") :]) for line in answer.text.splitlines() if line.startswith("data: ")]
    progress = [e["params"] for e in events if e.get("method") == "notifications/progress"]
    assert [(p["progressToken"], p["progress"]) for p in progress] == [("tok", 1), ("tok", 2)]
    logs = [e["params"]["data"] for e in events if e.get("method") == "notifications/message"]
    assert logs == ["count 1/2", "count 2/2"]
    assert events[-1] == {
        "jsonrpc": "2.0",
        "id": "s",
        "result": {"content": [{"type": "text", "text": "counted to 2"}], "resultType": "complete"},
    }


async def test_without_a_log_level_no_log_reaches_the_client(door: httpx.AsyncClient) -> None:
    call = rpc("tools/call", {"name": "slow_count", "arguments": {"n": 2, "delay_s": 0.01}}, "q")
    answer = await door.post("/mcp", headers=headers_for("tools/call", "slow_count"), json=call)
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "application/json", "nothing preceded the result"
    assert answer.json()["result"]["content"][0]["text"] == "counted to 2"


async def test_notifications_and_responses_are_received_with_202(door: httpx.AsyncClient) -> None:
    note = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1, "_meta": META}}
    answer = await door.post("/mcp", headers=headers_for("notifications/cancelled"), json=note)
    assert answer.status_code == 202 and answer.content == b""


# ---- the envelope ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("meta", "code"),
    [
        pytest.param({}, errors.INVALID_PARAMS, id="empty-meta"),
        pytest.param("not-an-object", errors.INVALID_PARAMS, id="meta-not-object"),
        pytest.param(
            {mcp_modern.PROTOCOL_VERSION_KEY: VERSION, mcp_modern.CLIENT_CAPABILITIES_KEY: []},
            errors.INVALID_PARAMS,
            id="capabilities-not-object",
        ),
        pytest.param({mcp_modern.PROTOCOL_VERSION_KEY: VERSION}, errors.INVALID_PARAMS, id="capabilities-missing"),
    ],
)
async def test_a_malformed_envelope_is_400_invalid_params(door: httpx.AsyncClient, meta: Any, code: int) -> None:
    answer = await door.post("/mcp", headers=headers_for("tools/list"), json=rpc("tools/list", meta=meta))
    assert_error(answer, 400, code)


async def test_a_request_without_meta_but_with_the_modern_header_is_400(door: httpx.AsyncClient) -> None:
    answer = await door.post("/mcp", headers=headers_for("tools/list"), json=rpc("tools/list", meta=None))
    error = assert_error(answer, 400, errors.INVALID_PARAMS)
    assert "_meta" in error["message"]


async def test_an_unsupported_version_is_400_with_the_supported_list(door: httpx.AsyncClient) -> None:
    meta = {**META, mcp_modern.PROTOCOL_VERSION_KEY: "2099-01-01"}
    answer = await door.post(
        "/mcp",
        headers=headers_for("tools/list", **{"mcp-protocol-version": "2099-01-01"}),
        json=rpc("tools/list", meta=meta),
    )
    error = assert_error(answer, 400, errors.UNSUPPORTED_PROTOCOL_VERSION)
    assert error["data"] == {"supported": list(mcp_modern.MODERN_VERSIONS), "requested": "2099-01-01"}


async def test_an_unknown_version_header_alone_is_answered_as_modern(door: httpx.AsyncClient) -> None:
    # No _meta at all: the unknown version header still routes to the modern exchange, which says
    # what is missing rather than "session required".
    answer = await door.post(
        "/mcp",
        headers=headers_for("tools/list", **{"mcp-protocol-version": "2099-01-01"}),
        json=rpc("tools/list", meta=None),
    )
    assert_error(answer, 400, errors.INVALID_PARAMS)


async def test_a_version_header_that_disagrees_with_the_body_is_a_header_mismatch(door: httpx.AsyncClient) -> None:
    meta = {**META, mcp_modern.PROTOCOL_VERSION_KEY: "2099-01-01"}
    answer = await door.post("/mcp", headers=headers_for("tools/list"), json=rpc("tools/list", meta=meta))
    assert_error(answer, 400, errors.HEADER_MISMATCH)


@pytest.mark.parametrize(
    ("method", "headers", "params"),
    [
        pytest.param("tools/list", {"mcp-method": ""}, {}, id="mcp-method-empty"),
        pytest.param("tools/list", {"mcp-method": "prompts/list"}, {}, id="mcp-method-wrong"),
        pytest.param("tools/call", {}, {"name": "echo", "arguments": {"text": "x"}}, id="mcp-name-missing"),
        pytest.param(
            "tools/call", {"mcp-name": "add"}, {"name": "echo", "arguments": {"text": "x"}}, id="mcp-name-wrong"
        ),
        pytest.param(
            "tools/call", {"mcp-name": "=?base64?!!!?="}, {"name": "echo", "arguments": {"text": "x"}}, id="bad-b64"
        ),
        pytest.param(
            "tools/call",
            {"mcp-name": "echo", "mcp-param-region": "x"},
            {"name": "echo", "arguments": {"text": "x"}},
            id="undeclared-param-header",
        ),
    ],
)
async def test_routing_headers_must_mirror_the_body(
    door: httpx.AsyncClient, method: str, headers: dict[str, str], params: dict[str, Any]
) -> None:
    sent = headers_for(method)
    sent.update(headers)
    answer = await door.post("/mcp", headers=sent, json=rpc(method, params))
    assert_error(answer, 400, errors.HEADER_MISMATCH)


async def test_a_missing_mcp_method_header_is_a_header_mismatch(door: httpx.AsyncClient) -> None:
    sent = headers_for("tools/list")
    del sent["mcp-method"]
    answer = await door.post("/mcp", headers=sent, json=rpc("tools/list"))
    error = assert_error(answer, 400, errors.HEADER_MISMATCH)
    assert "Mcp-Method" in error["message"]


async def test_a_base64_mcp_name_matches_its_decoded_text(door: httpx.AsyncClient) -> None:
    call = rpc("tools/call", {"name": "echo", "arguments": {"text": "hi"}}, 6)
    encoded = "=?base64?ZWNobw==?="  # "echo"
    answer = await door.post("/mcp", headers=headers_for("tools/call", encoded), json=call)
    assert answer.status_code == 200, answer.text
    assert answer.json()["result"]["content"][0]["text"] == "hi"


# ---- methods ----------------------------------------------------------------------------------


async def test_an_unknown_method_is_404_method_not_found(door: httpx.AsyncClient) -> None:
    answer = await door.post("/mcp", headers=headers_for("vendor/unknown"), json=rpc("vendor/unknown", rpc_id=7))
    assert_error(answer, 404, errors.METHOD_NOT_FOUND, 7)


@pytest.mark.parametrize("method", sorted(mcp_modern.REMOVED_METHODS - {"initialize"}))
async def test_methods_the_modern_era_removed_are_404(door: httpx.AsyncClient, method: str) -> None:
    answer = await door.post("/mcp", headers=headers_for(method), json=rpc(method, rpc_id=8))
    error = assert_error(answer, 404, errors.METHOD_NOT_FOUND, 8)
    assert method in error["message"]


async def test_initialize_dressed_as_modern_is_404(door: httpx.AsyncClient) -> None:
    init = rpc("initialize", {"protocolVersion": VERSION, "capabilities": {}, "clientInfo": {"name": "t"}}, 9)
    answer = await door.post("/mcp", headers=headers_for("initialize"), json=init)
    assert_error(answer, 404, errors.METHOD_NOT_FOUND, 9)


async def test_get_and_delete_without_a_session_are_405_in_the_modern_era(door: httpx.AsyncClient) -> None:
    for verb in ("GET", "DELETE"):
        answer = await door.request(verb, "/mcp", headers=headers_for("tools/list"))
        assert answer.status_code == 405, verb
        assert answer.headers["allow"] == "POST"
        assert answer.json()["error"]["code"] == errors.INVALID_REQUEST


# ---- bodies -----------------------------------------------------------------------------------


async def test_an_oversize_body_is_413(door: httpx.AsyncClient) -> None:
    call = rpc("tools/call", {"name": "echo", "arguments": {"text": "a" * (BODY_LIMIT + 10)}})
    answer = await door.post("/mcp", headers=headers_for("tools/call", "echo"), json=call)
    assert answer.status_code == 413
    assert answer.json()["error"]["code"] == errors.INVALID_REQUEST


async def test_an_oversize_body_without_content_length_is_413(door: httpx.AsyncClient) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"x":"'
        for _ in range(5):
            yield b"a" * 1000
        yield b'"}}'

    answer = await door.post("/mcp", headers=headers_for("tools/list"), content=chunks())
    assert answer.status_code == 413


@pytest.mark.parametrize(
    ("body", "code"),
    [
        pytest.param(b"{not json", errors.PARSE_ERROR, id="not-json"),
        pytest.param(b"", errors.PARSE_ERROR, id="empty"),
        pytest.param(b"\xff\xfe", errors.PARSE_ERROR, id="not-utf8"),
        pytest.param(b'{"jsonrpc":"2.0","id":null,"method":"tools/list"}', errors.INVALID_REQUEST, id="null-id"),
        pytest.param(b'{"jsonrpc":"2.0","id":true,"method":"tools/list"}', errors.INVALID_REQUEST, id="bool-id"),
        pytest.param(b'{"jsonrpc":"2.0","id":1}', errors.INVALID_REQUEST, id="no-method"),
        pytest.param(b'{"jsonrpc":"1.0","id":1,"method":"tools/list"}', errors.INVALID_REQUEST, id="wrong-version"),
        pytest.param(b"42", errors.INVALID_REQUEST, id="scalar"),
    ],
)
async def test_a_malformed_body_is_400_with_its_json_rpc_code(door: httpx.AsyncClient, body: bytes, code: int) -> None:
    answer = await door.post("/mcp", headers=headers_for("tools/list"), content=body)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["code"] == code


async def test_a_wrong_content_type_is_415(door: httpx.AsyncClient) -> None:
    answer = await door.post(
        "/mcp", headers=headers_for("tools/list", **{"content-type": "text/plain"}), json=rpc("tools/list")
    )
    assert answer.status_code == 415


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
