"""The MCP WebSocket door (``/mcp/ws``, subprotocol ``mcp``) in-process, driven by hand-written ASGI.

The app gets a websocket scope, a ``receive`` fed from a queue (the client's frames) and a ``send``
that collects what the gateway writes, all in the test's own event loop: no sockets, no threads,
no subprocess. One JSON-RPC message (or batch) per frame, one session per socket; a malformed
frame is answered with an error and the socket stays open; an oversize one closes it with 1009.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway import errors
from gateway.app import build_app
from gateway.config import Config
from gateway.core import Gateway

pytestmark = pytest.mark.timeout(30)

MESSAGE_LIMIT = 2048
QUEUE = 8
WAIT_S = 5.0


def rpc(method: str, params: dict[str, Any] | None = None, rpc_id: Any = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": params or {}}


INIT = rpc("initialize", {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t"}}, 0)
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


class Socket:
    """One WebSocket connection to the ASGI app, as a client sees it."""

    def __init__(
        self,
        app: Any,
        path: str = "/mcp/ws",
        subprotocols: list[str] | None = None,
        headers: list[tuple[bytes, bytes]] | None = None,
    ) -> None:
        self.scope = {
            "type": "websocket",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "scheme": "ws",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": headers if headers is not None else [(b"host", b"127.0.0.1:8787")],
            "subprotocols": ["mcp"] if subprotocols is None else subprotocols,
            "client": ("127.0.0.1", 40000),
            "server": ("127.0.0.1", 8787),
        }
        self._app = app
        self._inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._outbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.accepted: dict[str, Any] | None = None
        self.closed: dict[str, Any] | None = None
        self.task: asyncio.Task[None] | None = None
        self.stall = asyncio.Event()  # set: every later text frame blocks, like a socket nobody reads
        self.stalled = asyncio.Event()

    async def _receive(self) -> dict[str, Any]:
        return await self._inbox.get()

    async def _send(self, message: dict[str, Any]) -> None:
        if self.stall.is_set() and message["type"] == "websocket.send":
            self.stalled.set()
            await asyncio.Event().wait()
        self._outbox.put_nowait(message)

    async def connect(self) -> dict[str, Any]:
        """Open the socket; return the gateway's first answer (accept or close)."""
        SOCKETS.append(self)
        self._inbox.put_nowait({"type": "websocket.connect"})
        self.task = asyncio.create_task(self._app(self.scope, self._receive, self._send))
        first = await self.next()
        if first["type"] == "websocket.accept":
            self.accepted = first
        return first

    async def next(self) -> dict[str, Any]:
        async with asyncio.timeout(WAIT_S):
            message = await self._outbox.get()
        if message["type"] == "websocket.close":
            self.closed = message
        return message

    def send_text(self, text: str) -> None:
        self._inbox.put_nowait({"type": "websocket.receive", "text": text})

    def send_bytes(self, data: bytes) -> None:
        self._inbox.put_nowait({"type": "websocket.receive", "bytes": data})

    def send_json(self, message: Any) -> None:
        self.send_text(json.dumps(message))

    async def receive_json(self) -> Any:
        frame = await self.next()
        assert frame["type"] == "websocket.send", frame
        return json.loads(frame["text"])

    async def request(self, message: dict[str, Any]) -> dict[str, Any]:
        self.send_json(message)
        answer: dict[str, Any] = await self.receive_json()
        return answer

    async def initialize(self) -> dict[str, Any]:
        answer = await self.request(INIT)
        assert "result" in answer, answer
        self.send_json(INITIALIZED)
        return answer

    async def disconnect(self, code: int = 1000) -> None:
        self._inbox.put_nowait({"type": "websocket.disconnect", "code": code})
        await self.ended()

    async def ended(self) -> None:
        assert self.task is not None
        async with asyncio.timeout(WAIT_S):
            await self.task

    def nothing_pending(self) -> bool:
        return self._outbox.empty()


SOCKETS: list[Socket] = []


@pytest.fixture
async def setup() -> AsyncIterator[tuple[Any, Gateway]]:
    cfg = Config.model_validate(
        {
            "backends": {"demo": {"transport": "builtin"}},
            "limits": {"max_message_bytes": MESSAGE_LIMIT, "session_queue": QUEUE},
        }
    )
    gateway = Gateway(cfg)
    app = build_app(cfg, gateway)
    await gateway.start()
    try:
        assert await gateway.connections["demo"].wait_ready(10)
        yield app, gateway
    finally:
        while SOCKETS:
            socket = SOCKETS.pop()
            if socket.task is not None and not socket.task.done():
                await socket.disconnect()
        await gateway.stop()


async def connected(app: Any) -> Socket:
    socket = Socket(app)
    first = await socket.connect()
    assert first["type"] == "websocket.accept", first
    return socket


# ---- the handshake -----------------------------------------------------------------------------


async def test_the_mcp_subprotocol_is_chosen_and_a_session_opened(setup: tuple[Any, Gateway]) -> None:
    app, gateway = setup
    before = len(gateway.sessions)
    socket = await connected(app)
    assert socket.accepted is not None and socket.accepted.get("subprotocol") == "mcp"
    assert len(gateway.sessions) == before + 1
    await socket.disconnect()
    assert len(gateway.sessions) == before, "the session ends with its socket"


async def test_a_client_that_offers_no_subprotocol_is_accepted_without_one(setup: tuple[Any, Gateway]) -> None:
    app, _ = setup
    socket = Socket(app, subprotocols=[])
    first = await socket.connect()
    assert first["type"] == "websocket.accept" and first.get("subprotocol") is None
    assert (await socket.initialize())["id"] == 0
    await socket.disconnect()


async def test_an_unknown_server_is_closed_with_policy_violation(setup: tuple[Any, Gateway]) -> None:
    app, _ = setup
    socket = Socket(app, path="/servers/nope/mcp/ws")
    first = await socket.connect()
    assert first == {"type": "websocket.close", "code": 1008, "reason": "No such server"}
    await socket.ended()


async def test_a_foreign_origin_is_refused_before_the_upgrade(setup: tuple[Any, Gateway]) -> None:
    app, gateway = setup
    before = len(gateway.sessions)
    socket = Socket(app, headers=[(b"host", b"127.0.0.1:8787"), (b"origin", b"http://evil.example")])
    first = await socket.connect()
    assert first["type"] == "websocket.close" and first["code"] == 1008
    await socket.ended()
    assert len(gateway.sessions) == before


# ---- messages -----------------------------------------------------------------------------------


async def test_initialize_then_a_call(setup: tuple[Any, Gateway]) -> None:
    app, _ = setup
    socket = await connected(app)
    init = await socket.initialize()
    assert init["id"] == 0
    assert init["result"]["protocolVersion"] == "2025-11-25"
    assert init["result"]["capabilities"]["tools"] is not None
    answer = await socket.request(rpc("tools/call", {"name": "add", "arguments": {"a": 20, "b": 22}}, "w-1"))
    assert answer["id"] == "w-1"
    assert answer["result"]["structuredContent"] == {"sum": 42}
    await socket.disconnect()


async def test_requests_before_initialize_are_refused_but_ping_is_answered(setup: tuple[Any, Gateway]) -> None:
    app, _ = setup
    socket = await connected(app)
    refused = await socket.request(rpc("tools/list", rpc_id=1))
    assert refused["id"] == 1 and refused["error"]["code"] == errors.INVALID_REQUEST
    assert await socket.request(rpc("ping", rpc_id=2)) == {"jsonrpc": "2.0", "id": 2, "result": {}}
    await socket.disconnect()


async def test_progress_comes_before_the_result_on_the_same_socket(setup: tuple[Any, Gateway]) -> None:
    app, _ = setup
    socket = await connected(app)
    await socket.initialize()
    params = {"name": "slow_count", "arguments": {"n": 2, "delay_s": 0.01}, "_meta": {"progressToken": "pt"}}
    socket.send_json(rpc("tools/call", params, 3))
    seen: list[dict[str, Any]] = []
    while not seen or "id" not in seen[-1]:
        seen.append(await socket.receive_json())
    progress = [m["params"] for m in seen if m.get("method") == "notifications/progress"]
    assert [(p["progressToken"], p["progress"], p["total"]) for p in progress] == [("pt", 1, 2), ("pt", 2, 2)]
    assert seen[-1]["id"] == 3 and seen[-1]["result"]["content"][0]["text"] == "counted to 2"
    await socket.disconnect()


async def test_a_slow_call_does_not_hold_up_the_frames_behind_it(setup: tuple[Any, Gateway]) -> None:
    app, _ = setup
    socket = await connected(app)
    await socket.initialize()
    socket.send_json(rpc("tools/call", {"name": "slow_count", "arguments": {"n": 3, "delay_s": 0.1}}, "slow"))
    socket.send_json(rpc("ping", rpc_id="fast"))
    answers = [await socket.receive_json() for _ in range(2)]
    ids = [a["id"] for a in answers if "id" in a]
    assert ids[0] == "fast", answers
    await socket.disconnect()


async def test_a_batch_in_one_frame_is_answered_message_by_message(setup: tuple[Any, Gateway]) -> None:
    app, _ = setup
    socket = await connected(app)
    await socket.initialize()
    socket.send_json([rpc("ping", rpc_id="b1"), rpc("ping", rpc_id="b2")])
    answers = [await socket.receive_json() for _ in range(2)]
    assert sorted(a["id"] for a in answers) == ["b1", "b2"]
    assert all(a["result"] == {} for a in answers)
    await socket.disconnect()


async def test_a_binary_frame_is_read_as_json_too(setup: tuple[Any, Gateway]) -> None:
    app, _ = setup
    socket = await connected(app)
    socket.send_bytes(json.dumps(rpc("ping", rpc_id="bin")).encode())
    assert (await socket.receive_json()) == {"jsonrpc": "2.0", "id": "bin", "result": {}}
    await socket.disconnect()


@pytest.mark.parametrize(
    ("frame", "code", "rpc_id"),
    [
        pytest.param("{not json", errors.PARSE_ERROR, None, id="not-json"),
        pytest.param("", errors.PARSE_ERROR, None, id="empty"),
        pytest.param("[]", errors.INVALID_REQUEST, None, id="empty-batch"),
        pytest.param('{"jsonrpc":"2.0","id":5}', errors.INVALID_REQUEST, 5, id="no-method-keeps-id"),
        pytest.param('{"jsonrpc":"2.0","id":[1],"method":"ping"}', errors.INVALID_REQUEST, None, id="array-id"),
        pytest.param("17", errors.INVALID_REQUEST, None, id="scalar"),
    ],
)
async def test_a_malformed_frame_is_answered_and_the_socket_survives(
    setup: tuple[Any, Gateway], frame: str, code: int, rpc_id: Any
) -> None:
    app, _ = setup
    socket = await connected(app)
    socket.send_text(frame)
    error = await socket.receive_json()
    assert error["jsonrpc"] == "2.0" and error["id"] == rpc_id, error
    assert error["error"]["code"] == code, error
    init = await socket.initialize()
    assert init["id"] == 0 and "result" in init, "the socket and its session survive a bad frame"
    assert socket.closed is None
    await socket.disconnect()


async def test_a_binary_frame_that_is_not_utf8_is_a_parse_error(setup: tuple[Any, Gateway]) -> None:
    app, _ = setup
    socket = await connected(app)
    socket.send_bytes(b"\xff\xfe{}")
    error = await socket.receive_json()
    assert error["id"] is None and error["error"]["code"] == errors.PARSE_ERROR
    assert (await socket.request(rpc("ping", rpc_id="still"))) == {"jsonrpc": "2.0", "id": "still", "result": {}}
    await socket.disconnect()


async def test_an_oversize_frame_closes_the_socket_with_1009(setup: tuple[Any, Gateway]) -> None:
    app, gateway = setup
    before = len(gateway.sessions)
    socket = await connected(app)
    await socket.initialize()
    socket.send_json(rpc("tools/call", {"name": "echo", "arguments": {"text": "a" * MESSAGE_LIMIT}}, 6))
    closing = await socket.next()
    assert closing["type"] == "websocket.close", closing
    assert closing["code"] == 1009
    assert str(MESSAGE_LIMIT) in closing["reason"]
    await socket.ended()
    assert len(gateway.sessions) == before, "the session ends with its socket"


async def test_a_frame_just_under_the_limit_is_handled(setup: tuple[Any, Gateway]) -> None:
    app, _ = setup
    socket = await connected(app)
    await socket.initialize()
    head = json.dumps(rpc("tools/call", {"name": "echo", "arguments": {"text": ""}}, 7))
    text = "a" * (MESSAGE_LIMIT - len(head))
    frame = json.dumps(rpc("tools/call", {"name": "echo", "arguments": {"text": text}}, 7))
    assert len(frame) == MESSAGE_LIMIT
    socket.send_text(frame)
    answer = await socket.receive_json()
    assert answer["id"] == 7 and answer["result"]["content"][0]["text"] == text
    await socket.disconnect()


# ---- closing -----------------------------------------------------------------------------------


async def test_the_drafts_exit_notification_ends_the_session_and_closes_the_socket(
    setup: tuple[Any, Gateway],
) -> None:
    app, gateway = setup
    before = len(gateway.sessions)
    socket = await connected(app)
    await socket.initialize()
    socket.send_json({"jsonrpc": "2.0", "method": "exit"})
    closing = await socket.next()
    assert closing == {"type": "websocket.close", "code": 1000, "reason": "session ended"}
    await socket.disconnect()
    assert len(gateway.sessions) == before


async def test_the_drafts_exit_request_is_answered_before_the_socket_closes(setup: tuple[Any, Gateway]) -> None:
    app, _ = setup
    socket = await connected(app)
    await socket.initialize()
    socket.send_json(rpc("exit", rpc_id=8))
    answer = await socket.next()
    assert answer["type"] == "websocket.send", answer
    assert json.loads(answer["text"]) == {"jsonrpc": "2.0", "id": 8, "result": None}
    assert (await socket.next())["type"] == "websocket.close"


async def test_a_client_that_leaves_mid_call_cancels_it_upstream(setup: tuple[Any, Gateway]) -> None:
    app, gateway = setup
    socket = await connected(app)
    await socket.initialize()
    params = {"name": "slow_count", "arguments": {"n": 200, "delay_s": 0.05}, "_meta": {"progressToken": 1}}
    socket.send_json(rpc("tools/call", params, 9))
    await socket.receive_json()  # the first progress or log: the call is running
    demo = gateway.connections["demo"]
    assert demo.inflight == 1
    await socket.disconnect(1001)
    for _ in range(int(WAIT_S / 0.01)):  # the cancellation travels through tasks: poll, bounded
        if not demo.inflight:
            break
        await asyncio.sleep(0.01)
    assert demo.inflight == 0, "the call in flight was abandoned upstream"


async def test_a_client_that_stops_reading_is_closed_with_1013(setup: tuple[Any, Gateway]) -> None:
    app, gateway = setup
    before = len(gateway.sessions)
    socket = await connected(app)
    await socket.initialize()
    socket.stall.set()
    socket.send_json(rpc("ping", rpc_id="first"))
    async with asyncio.timeout(WAIT_S):
        await socket.stalled.wait()  # the writer is stuck in a send
    for i in range(QUEUE * 3):
        socket.send_json(rpc("ping", rpc_id=i))
    closing = await socket.next()
    assert closing == {"type": "websocket.close", "code": 1013, "reason": "client too slow"}
    dropped = gateway.metrics.registry.get_sample_value("switchboard_slow_clients_dropped_total", {"transport": "ws"})
    assert dropped == 1
    await socket.disconnect()
    assert len(gateway.sessions) == before


async def test_two_sockets_are_two_sessions(setup: tuple[Any, Gateway]) -> None:
    app, _ = setup
    first = await connected(app)
    second = await connected(app)
    await first.initialize()
    await second.initialize()
    assert (await second.request(rpc("ping", rpc_id="second")))["id"] == "second"
    await asyncio.sleep(0.05)
    assert first.nothing_pending(), "an answer goes to its own socket only"
    await first.disconnect()
    await second.disconnect()


# ---- credentials ---------------------------------------------------------------------------------

TOKEN = "carol-static-token"
CAROL = ["mcp/request:initialize", "mcp/notification:*", "mcp/request:tools/call:echo"]


@pytest.fixture
async def auth_app() -> AsyncIterator[tuple[Any, Gateway]]:
    cfg = Config.model_validate(
        {
            "backends": {"demo": {"transport": "builtin"}},
            "auth": {},  # no anonymous access
            "principals": {"carol": {"tokens": [TOKEN], "capabilities": CAROL}},
        }
    )
    gateway = Gateway(cfg)
    app = build_app(cfg, gateway)
    await gateway.start()
    try:
        assert await gateway.connections["demo"].wait_ready(10)
        yield app, gateway
    finally:
        while SOCKETS:
            socket = SOCKETS.pop()
            if socket.task is not None and not socket.task.done():
                await socket.disconnect()
        await gateway.stop()


async def test_no_credentials_is_a_401_before_the_upgrade_where_the_server_can_send_one(
    auth_app: tuple[Any, Gateway],
) -> None:
    app, gateway = auth_app
    socket = Socket(app)
    socket.scope["extensions"] = {"websocket.http.response": {}}
    first = await socket.connect()
    assert first["type"] == "websocket.http.response.start", first
    assert first["status"] == 401
    assert dict(first["headers"])[b"www-authenticate"].startswith(b"Bearer ")
    body = await socket.next()
    assert body["type"] == "websocket.http.response.body"
    assert b"Unauthorized" in body["body"]
    await socket.ended()
    assert len(gateway.sessions) == 0


async def test_no_credentials_is_a_policy_close_where_the_server_cannot_answer_http(
    auth_app: tuple[Any, Gateway],
) -> None:
    app, gateway = auth_app
    socket = Socket(app)
    first = await socket.connect()
    assert first["type"] == "websocket.close" and first["code"] == 1008
    assert first["reason"].startswith("Unauthorized")
    await socket.ended()
    assert len(gateway.sessions) == 0


async def test_a_socket_is_held_to_its_principals_capabilities(auth_app: tuple[Any, Gateway]) -> None:
    app, _ = auth_app
    socket = Socket(app, headers=[(b"host", b"127.0.0.1:8787"), (b"authorization", f"Bearer {TOKEN}".encode())])
    assert (await socket.connect())["type"] == "websocket.accept"
    assert "result" in await socket.initialize()
    denied = await socket.request(rpc("tools/call", {"name": "add", "arguments": {"a": 1, "b": 1}}, 1))
    assert denied["id"] == 1 and denied["error"]["code"] == errors.CAPABILITY_DENIED
    allowed = await socket.request(rpc("tools/call", {"name": "echo", "arguments": {"text": "ok"}}, 2))
    assert allowed["result"]["content"][0]["text"] == "ok", allowed
    await socket.disconnect()
