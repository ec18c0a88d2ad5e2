"""The legacy HTTP+SSE door (2024-11-05) in-process: ``GET /sse`` holds the stream, ``POST /messages`` feeds it.

httpx's ASGI transport buffers whole responses, so the never-ending GET is driven by hand: the
ASGI app gets a scope, a ``receive`` that reports the disconnect when the test says so, and a
``send`` that feeds an SSE parser. The POSTs are ordinary finite exchanges and go through httpx.
A real Gateway with the builtin demo backend; no sockets, no subprocess.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from gateway import errors
from gateway.app import build_app
from gateway.config import Config
from gateway.core import Gateway
from gateway.sse import SSEEvent, SSEParser

pytestmark = pytest.mark.timeout(30)

BASE = "http://127.0.0.1:8787"
BODY_LIMIT = 4096
QUEUE = 8
WAIT_S = 5.0


def rpc(method: str, params: dict[str, Any] | None = None, rpc_id: Any = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": params or {}}


INIT = rpc("initialize", {"protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "t"}}, 0)


class SseStream:
    """One ``GET`` on the ASGI app, held open in a task; its events are read as they are sent."""

    def __init__(self, app: Any, path: str, headers: list[tuple[bytes, bytes]] | None = None) -> None:
        self.scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "GET",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": headers
            if headers is not None
            else [(b"host", b"127.0.0.1:8787"), (b"accept", b"text/event-stream")],
            "client": ("127.0.0.1", 40000),
            "server": ("127.0.0.1", 8787),
        }
        self._app = app
        self._gone = asyncio.Event()
        self._parser = SSEParser()
        self._events: asyncio.Queue[SSEEvent] = asyncio.Queue()
        self.start: dict[str, Any] | None = None
        self.raw = bytearray()
        self.ended = asyncio.Event()  # the app sent more_body=False
        self.stall = asyncio.Event()  # set: every later send blocks, like a socket nobody reads
        self.stalled = asyncio.Event()  # a send is blocked
        self.task: asyncio.Task[None] | None = None

    async def _receive(self) -> dict[str, Any]:
        await self._gone.wait()
        return {"type": "http.disconnect"}

    async def _send(self, message: dict[str, Any]) -> None:
        if self.stall.is_set():
            self.stalled.set()
            await asyncio.Event().wait()
        if message["type"] == "http.response.start":
            self.start = message
            return
        body = message.get("body", b"")
        self.raw += body
        for event in self._parser.feed(body):
            self._events.put_nowait(event)
        if not message.get("more_body", False):
            self.ended.set()

    def open(self) -> SseStream:
        OPEN.append(self)
        self.task = asyncio.create_task(self._app(self.scope, self._receive, self._send))
        return self

    @property
    def status(self) -> int:
        assert self.start is not None
        return int(self.start["status"])

    @property
    def headers(self) -> dict[bytes, bytes]:
        assert self.start is not None
        return dict(self.start["headers"])

    async def next_event(self) -> SSEEvent:
        async with asyncio.timeout(WAIT_S):
            return await self._events.get()

    async def next_message(self) -> dict[str, Any]:
        event = await self.next_event()
        assert event.event == "message", event
        message: dict[str, Any] = json.loads(event.data)
        return message

    def no_event_pending(self) -> bool:
        return self._events.empty()

    async def disconnect(self) -> None:
        self._gone.set()
        assert self.task is not None
        async with asyncio.timeout(WAIT_S):
            await self.task


OPEN: list[SseStream] = []  # every stream a test opened, disconnected at teardown even if it failed


@pytest.fixture
async def setup() -> AsyncIterator[tuple[Any, Gateway, httpx.AsyncClient]]:
    cfg = Config.model_validate(
        {
            "backends": {"demo": {"transport": "builtin"}},
            "limits": {"max_body_bytes": BODY_LIMIT, "session_queue": QUEUE},
        }
    )
    gateway = Gateway(cfg)
    app = build_app(cfg, gateway)
    await gateway.start()
    try:
        assert await gateway.connections["demo"].wait_ready(10)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE) as client:
            yield app, gateway, client
    finally:
        while OPEN:
            stream = OPEN.pop()
            if stream.task is not None and not stream.task.done():
                await stream.disconnect()
        await gateway.stop()


async def open_stream(app: Any, path: str = "/sse") -> tuple[SseStream, str]:
    """An open stream and the endpoint its first event names."""
    stream = SseStream(app, path).open()
    event = await stream.next_event()
    assert event.event == "endpoint", event
    return stream, event.data


async def post(client: httpx.AsyncClient, endpoint: str, message: Any) -> httpx.Response:
    return await client.post(endpoint, json=message)


async def handshake(client: httpx.AsyncClient, stream: SseStream, endpoint: str) -> dict[str, Any]:
    accepted = await post(client, endpoint, INIT)
    assert accepted.status_code == 202 and accepted.text == "Accepted"
    answer = await stream.next_message()
    assert answer["id"] == INIT["id"] and "result" in answer, answer
    note = await post(client, endpoint, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert note.status_code == 202
    return answer


# ---- the stream ---------------------------------------------------------------------------------


async def test_the_first_event_names_the_message_endpoint_of_a_new_session(
    setup: tuple[Any, Gateway, httpx.AsyncClient],
) -> None:
    app, gateway, _ = setup
    stream, endpoint = await open_stream(app)
    assert stream.status == 200
    assert stream.headers[b"content-type"] == b"text/event-stream"
    assert stream.headers[b"cache-control"] == b"no-cache, no-transform"
    parts = urlsplit(endpoint)
    assert parts.path == "/messages"
    session_id = parse_qs(parts.query)["session_id"][0]
    session = gateway.sessions.get(session_id)
    assert session is not None and session.transport == "sse"
    await stream.disconnect()


async def test_a_single_server_stream_names_its_own_endpoint(setup: tuple[Any, Gateway, httpx.AsyncClient]) -> None:
    app, _, client = setup
    stream, endpoint = await open_stream(app, "/servers/demo/sse")
    assert urlsplit(endpoint).path == "/servers/demo/messages"
    answer = await handshake(client, stream, endpoint)
    assert answer["id"] == 0 and answer["result"]["serverInfo"]["name"]
    # The session belongs to that one server's view: the federated endpoint does not know it.
    query = urlsplit(endpoint).query
    elsewhere = await client.post(f"/messages?{query}", json=rpc("ping", rpc_id=2))
    assert elsewhere.status_code == 404
    assert elsewhere.json()["error"]["code"] == errors.INVALID_REQUEST
    await stream.disconnect()


async def test_an_unknown_server_is_404(setup: tuple[Any, Gateway, httpx.AsyncClient]) -> None:
    app, _, _ = setup
    stream = SseStream(app, "/servers/nope/sse").open()
    async with asyncio.timeout(WAIT_S):
        await stream.ended.wait()
    assert stream.status == 404
    assert json.loads(bytes(stream.raw))["error"]["code"] == errors.INVALID_REQUEST
    await stream.disconnect()


async def test_a_stream_must_accept_event_streams(setup: tuple[Any, Gateway, httpx.AsyncClient]) -> None:
    app, gateway, _ = setup
    before = len(gateway.sessions)
    stream = SseStream(app, "/sse", [(b"host", b"127.0.0.1:8787"), (b"accept", b"text/html")]).open()
    async with asyncio.timeout(WAIT_S):
        await stream.ended.wait()
    assert stream.status == 406
    assert len(gateway.sessions) == before, "no session for a refused stream"
    await stream.disconnect()


async def test_only_get_opens_a_stream(setup: tuple[Any, Gateway, httpx.AsyncClient]) -> None:
    _, _, client = setup
    answer = await client.post("/sse", json=INIT)
    assert answer.status_code == 405 and answer.headers["allow"] == "GET"


# ---- messages -----------------------------------------------------------------------------------


async def test_requests_are_answered_on_the_stream_not_in_the_post(
    setup: tuple[Any, Gateway, httpx.AsyncClient],
) -> None:
    app, _, client = setup
    stream, endpoint = await open_stream(app)
    init = await handshake(client, stream, endpoint)
    assert init["jsonrpc"] == "2.0" and init["id"] == 0
    assert init["result"]["protocolVersion"] == "2024-11-05"
    accepted = await post(client, endpoint, rpc("tools/call", {"name": "add", "arguments": {"a": 2, "b": 3}}, "a-1"))
    assert accepted.status_code == 202
    assert accepted.headers["content-type"].startswith("text/plain")
    answer = await stream.next_message()
    assert answer["id"] == "a-1"
    assert answer["result"]["structuredContent"] == {"sum": 5}
    await stream.disconnect()


async def test_progress_flows_on_the_stream_before_the_result(setup: tuple[Any, Gateway, httpx.AsyncClient]) -> None:
    app, _, client = setup
    stream, endpoint = await open_stream(app)
    await handshake(client, stream, endpoint)
    params = {"name": "slow_count", "arguments": {"n": 2, "delay_s": 0.01}, "_meta": {"progressToken": "p"}}
    assert (await post(client, endpoint, rpc("tools/call", params, 3))).status_code == 202
    seen: list[dict[str, Any]] = []
    while not seen or "id" not in seen[-1]:
        seen.append(await stream.next_message())
    progress = [m["params"] for m in seen if m.get("method") == "notifications/progress"]
    assert [(p["progressToken"], p["progress"]) for p in progress] == [("p", 1), ("p", 2)]
    assert seen[-1]["id"] == 3 and seen[-1]["result"]["content"][0]["text"] == "counted to 2"
    await stream.disconnect()


async def test_the_sessionid_query_name_is_accepted_too(setup: tuple[Any, Gateway, httpx.AsyncClient]) -> None:
    app, _, client = setup
    stream, endpoint = await open_stream(app)
    session_id = parse_qs(urlsplit(endpoint).query)["session_id"][0]
    accepted = await client.post(f"/messages?sessionId={session_id}", json=INIT)
    assert accepted.status_code == 202
    assert (await stream.next_message())["id"] == 0
    await stream.disconnect()


async def test_requests_before_initialize_are_refused_on_the_stream(
    setup: tuple[Any, Gateway, httpx.AsyncClient],
) -> None:
    app, _, client = setup
    stream, endpoint = await open_stream(app)
    assert (await post(client, endpoint, rpc("tools/list", rpc_id=4))).status_code == 202
    answer = await stream.next_message()
    assert answer["id"] == 4 and answer["error"]["code"] == errors.INVALID_REQUEST
    await stream.disconnect()


@pytest.mark.parametrize(
    ("query", "status"),
    [
        pytest.param("", 400, id="no-session-id"),
        pytest.param("?session_id=", 400, id="empty-session-id"),
        pytest.param("?session_id=no-such-session", 404, id="unknown-session-id"),
    ],
)
async def test_a_message_needs_a_known_session(
    setup: tuple[Any, Gateway, httpx.AsyncClient], query: str, status: int
) -> None:
    _, _, client = setup
    answer = await client.post(f"/messages{query}", json=INIT)
    assert answer.status_code == status, answer.text
    assert answer.json()["error"]["code"] == errors.INVALID_REQUEST


async def test_a_streamable_http_session_id_is_unknown_here(setup: tuple[Any, Gateway, httpx.AsyncClient]) -> None:
    _, _, client = setup
    opened = await client.post(
        "/mcp",
        headers={"accept": "application/json, text/event-stream", "content-type": "application/json"},
        json={**INIT, "params": {**INIT["params"], "protocolVersion": "2025-11-25"}},
    )
    assert opened.status_code == 200
    answer = await client.post(f"/messages?session_id={opened.headers['mcp-session-id']}", json=rpc("ping"))
    assert answer.status_code == 404, "a session of another door is not this door's"


async def test_only_post_sends_a_message(setup: tuple[Any, Gateway, httpx.AsyncClient]) -> None:
    _, _, client = setup
    answer = await client.get("/messages?session_id=x")
    assert answer.status_code == 405 and answer.headers["allow"] == "POST"


@pytest.mark.parametrize(
    ("body", "code"),
    [
        pytest.param(b"{not json", errors.PARSE_ERROR, id="not-json"),
        pytest.param(b'{"jsonrpc":"2.0","id":1}', errors.INVALID_REQUEST, id="no-method"),
        pytest.param(b"[]", errors.INVALID_REQUEST, id="empty-batch"),
    ],
)
async def test_a_malformed_message_is_400_and_also_reported_on_the_stream(
    setup: tuple[Any, Gateway, httpx.AsyncClient], body: bytes, code: int
) -> None:
    app, _, client = setup
    stream, endpoint = await open_stream(app)
    answer = await client.post(endpoint, content=body, headers={"content-type": "application/json"})
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["code"] == code
    on_stream = await stream.next_message()
    assert on_stream["id"] is None and on_stream["error"]["code"] == code
    # The session survives: the next request is answered.
    await handshake(client, stream, endpoint)
    await stream.disconnect()


async def test_an_oversize_message_is_413_and_the_session_survives(
    setup: tuple[Any, Gateway, httpx.AsyncClient],
) -> None:
    app, _, client = setup
    stream, endpoint = await open_stream(app)
    big = rpc("tools/call", {"name": "echo", "arguments": {"text": "a" * (BODY_LIMIT + 1)}}, 5)
    answer = await post(client, endpoint, big)
    assert answer.status_code == 413
    assert answer.json()["error"]["code"] == errors.INVALID_REQUEST
    assert (await handshake(client, stream, endpoint))["id"] == 0
    await stream.disconnect()


# ---- closing ------------------------------------------------------------------------------------


async def test_closing_the_stream_ends_the_session(setup: tuple[Any, Gateway, httpx.AsyncClient]) -> None:
    app, gateway, client = setup
    stream, endpoint = await open_stream(app)
    await handshake(client, stream, endpoint)
    session_id = parse_qs(urlsplit(endpoint).query)["session_id"][0]
    assert gateway.sessions.get(session_id) is not None
    await stream.disconnect()
    assert stream.task is not None and stream.task.done() and stream.task.exception() is None
    assert gateway.sessions.get(session_id) is None
    late = await post(client, endpoint, rpc("ping", rpc_id=6))
    assert late.status_code == 404


async def test_the_drafts_exit_notification_ends_the_session_and_the_stream_task(
    setup: tuple[Any, Gateway, httpx.AsyncClient],
) -> None:
    app, gateway, client = setup
    stream, endpoint = await open_stream(app)
    await handshake(client, stream, endpoint)
    assert (await post(client, endpoint, {"jsonrpc": "2.0", "method": "exit"})).status_code == 202
    assert stream.task is not None
    async with asyncio.timeout(WAIT_S):
        await stream.task  # the client has not left: the session's end alone ends the stream
    session_id = parse_qs(urlsplit(endpoint).query)["session_id"][0]
    assert gateway.sessions.get(session_id) is None


async def test_a_stream_ended_by_the_gateway_completes_its_response(
    setup: tuple[Any, Gateway, httpx.AsyncClient],
) -> None:
    app, _, client = setup
    stream, endpoint = await open_stream(app)
    await handshake(client, stream, endpoint)
    assert (await post(client, endpoint, {"jsonrpc": "2.0", "method": "exit"})).status_code == 202
    assert stream.task is not None
    async with asyncio.timeout(WAIT_S):
        await stream.task
    assert stream.ended.is_set(), "the response body was never ended"


async def test_the_drafts_exit_request_is_answered_on_the_stream(
    setup: tuple[Any, Gateway, httpx.AsyncClient],
) -> None:
    app, _, client = setup
    stream, endpoint = await open_stream(app)
    await handshake(client, stream, endpoint)
    assert (await post(client, endpoint, rpc("exit", rpc_id=8))).status_code == 202
    assert stream.task is not None
    async with asyncio.timeout(WAIT_S):
        await stream.task  # the session ended, and with it the stream
    assert b'"id":8' in stream.raw, "the answer to exit never reached the stream"


async def test_two_streams_are_two_sessions(setup: tuple[Any, Gateway, httpx.AsyncClient]) -> None:
    app, _, client = setup
    first, first_endpoint = await open_stream(app)
    second, second_endpoint = await open_stream(app)
    assert first_endpoint != second_endpoint
    await handshake(client, first, first_endpoint)
    await handshake(client, second, second_endpoint)
    assert (await post(client, second_endpoint, rpc("ping", rpc_id="only-second"))).status_code == 202
    assert (await second.next_message())["id"] == "only-second"
    await asyncio.sleep(0.05)
    assert first.no_event_pending(), "an answer goes to its own session's stream only"
    await first.disconnect()
    await second.disconnect()


async def test_closing_the_stream_cancels_the_sessions_calls_upstream(
    setup: tuple[Any, Gateway, httpx.AsyncClient],
) -> None:
    app, gateway, client = setup
    stream, endpoint = await open_stream(app)
    await handshake(client, stream, endpoint)
    params = {"name": "slow_count", "arguments": {"n": 200, "delay_s": 0.05}, "_meta": {"progressToken": 1}}
    assert (await post(client, endpoint, rpc("tools/call", params, 7))).status_code == 202
    assert (await stream.next_message())["method"] in ("notifications/progress", "notifications/message")
    demo = gateway.connections["demo"]
    assert demo.inflight == 1
    await stream.disconnect()
    for _ in range(int(WAIT_S / 0.01)):  # the cancellation travels through tasks: poll, bounded
        if not demo.inflight:
            break
        await asyncio.sleep(0.01)
    assert demo.inflight == 0, "the call in flight was abandoned upstream"


async def test_a_client_that_stops_reading_is_dropped_and_its_session_ended(
    setup: tuple[Any, Gateway, httpx.AsyncClient],
) -> None:
    app, gateway, client = setup
    stream, endpoint = await open_stream(app)
    await handshake(client, stream, endpoint)
    stream.stall.set()
    assert (await post(client, endpoint, rpc("ping", rpc_id="first"))).status_code == 202
    async with asyncio.timeout(WAIT_S):
        await stream.stalled.wait()  # the writer is stuck in a send
    for i in range(QUEUE * 3):
        if (await post(client, endpoint, rpc("ping", rpc_id=i))).status_code == 404:
            break  # already dropped: its session is gone
    assert stream.task is not None
    async with asyncio.timeout(WAIT_S):
        await asyncio.wait({stream.task})
    assert not stream.task.cancelled(), "the overflow is absorbed, not left as a cancellation"
    session_id = parse_qs(urlsplit(endpoint).query)["session_id"][0]
    assert gateway.sessions.get(session_id) is None
    dropped = gateway.metrics.registry.get_sample_value("switchboard_slow_clients_dropped_total", {"transport": "sse"})
    assert dropped == 1
    assert (await post(client, endpoint, rpc("ping", rpc_id="late"))).status_code == 404


# ---- credentials ---------------------------------------------------------------------------------

TOKENS = {"carol": "carol-static-token", "dave": "dave-static-token"}


@pytest.fixture
async def auth_setup() -> AsyncIterator[tuple[Any, Gateway, httpx.AsyncClient]]:
    cfg = Config.model_validate(
        {
            "backends": {"demo": {"transport": "builtin"}},
            "auth": {},  # no anonymous access: every caller presents a token
            "principals": {
                "carol": {"tokens": [TOKENS["carol"]], "capabilities": ["mcp/*"]},
                "dave": {"tokens": [TOKENS["dave"]], "capabilities": ["mcp/*"]},
            },
        }
    )
    gateway = Gateway(cfg)
    app = build_app(cfg, gateway)
    await gateway.start()
    try:
        assert await gateway.connections["demo"].wait_ready(10)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE) as client:
            yield app, gateway, client
    finally:
        while OPEN:
            stream = OPEN.pop()
            if stream.task is not None and not stream.task.done():
                await stream.disconnect()
        await gateway.stop()


def bearer(name: str) -> list[tuple[bytes, bytes]]:
    return [
        (b"host", b"127.0.0.1:8787"),
        (b"accept", b"text/event-stream"),
        (b"authorization", f"Bearer {TOKENS[name]}".encode()),
    ]


async def test_a_stream_without_credentials_is_401_with_a_challenge(
    auth_setup: tuple[Any, Gateway, httpx.AsyncClient],
) -> None:
    app, gateway, _ = auth_setup
    stream = SseStream(app, "/sse").open()
    async with asyncio.timeout(WAIT_S):
        await stream.ended.wait()
    assert stream.status == 401
    assert stream.headers[b"www-authenticate"].startswith(b"Bearer ")
    assert len(gateway.sessions) == 0
    await stream.disconnect()


async def test_a_session_is_bound_to_the_principal_that_opened_it(
    auth_setup: tuple[Any, Gateway, httpx.AsyncClient],
) -> None:
    app, _, client = auth_setup
    stream = SseStream(app, "/sse", bearer("carol")).open()
    event = await stream.next_event()
    assert event.event == "endpoint"
    endpoint = event.data
    carol = {"authorization": f"Bearer {TOKENS['carol']}"}
    dave = {"authorization": f"Bearer {TOKENS['dave']}"}
    assert (await client.post(endpoint, json=INIT, headers=carol)).status_code == 202
    assert (await stream.next_message())["id"] == 0
    other = await client.post(endpoint, json=rpc("ping", rpc_id=2), headers=dave)
    assert other.status_code == 401, "another principal may not ride carol's session"
    anonymous = await client.post(endpoint, json=rpc("ping", rpc_id=3))
    assert anonymous.status_code == 401
    assert stream.no_event_pending(), "refused messages are not handled"
    await stream.disconnect()


async def test_a_batch_is_answered_member_by_member_on_the_stream(
    setup: tuple[Any, Gateway, httpx.AsyncClient],
) -> None:
    """Clients of 2025-03-26 may batch: every member gets its answer on the stream, a broken member
    its own error, and the others go on."""
    app, _, client = setup
    stream, endpoint = await open_stream(app)
    await handshake(client, stream, endpoint)
    batch = [
        {"jsonrpc": "2.0", "id": "a", "method": "ping"},
        {"jsonrpc": "2.0", "id": "b", "method": "tools/list"},
        {"jsonrpc": "2.0", "id": "c"},
        {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"},
    ]
    answer = await client.post(endpoint, json=batch, headers={"content-type": "application/json"})
    assert answer.status_code == 202, answer.text
    got = {}
    for _ in range(3):
        message = await stream.next_message()
        got[message["id"]] = message
    assert got["a"]["result"] == {} and "tools" in got["b"]["result"]
    assert got["c"]["error"]["code"] == errors.INVALID_REQUEST
    init = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}]
    assert (await client.post(endpoint, json=init, headers={"content-type": "application/json"})).status_code == 400
    await stream.disconnect()
