"""Robustness of the WebSocket front door (/mcp/ws, subprotocol ``mcp``) with the ``websockets`` client.

One JSON-RPC message per text frame; a bad frame is answered with an error frame and the socket stays
open; a frame over ``limits.max_message_bytes`` closes it with 1009; server-to-client requests
(elicitation, sampling) reach the WebSocket client and its answer reaches the backend.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket
import struct
import time
from collections.abc import Iterator
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from tests.support import (
    LEGACY_VERSION as VERSION,
    RunningGateway,
    crashy_backend,
    fixture_stdio_backend,
    initialize_request,
    run_gateway,
)

pytestmark = pytest.mark.timeout(60)

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
TOO_BIG = 1009
TRY_AGAIN_LATER = 1013
STEP_S = 5.0  # the longest any single expected frame may take


@pytest.fixture(scope="module")
def gw() -> Iterator[RunningGateway]:
    config = {
        "backends": {"demo": {"transport": "builtin", "required": True}},
        "limits": {"max_message_bytes": 2048},
    }
    with run_gateway(config) as running:
        yield running


@pytest.fixture(scope="module")
def fixture_gw() -> Iterator[RunningGateway]:
    with run_gateway({"backends": {"fixture": fixture_stdio_backend(required=True)}}) as running:
        yield running


async def recv(ws: ClientConnection) -> dict[str, Any]:
    frame = await asyncio.wait_for(ws.recv(), STEP_S)
    message = json.loads(frame)
    assert isinstance(message, dict), message
    return message


async def recv_response(ws: ClientConnection, rpc_id: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The response to ``rpc_id``, and every other frame that came before it."""
    others: list[dict[str, Any]] = []
    while True:
        message = await recv(ws)
        if message.get("id") == rpc_id and "method" not in message:
            return message, others
        others.append(message)


async def send(ws: ClientConnection, message: Any) -> None:
    await ws.send(json.dumps(message))


async def initialize(ws: ClientConnection, capabilities: dict[str, Any] | None = None) -> dict[str, Any]:
    await send(
        ws,
        initialize_request("init", capabilities=capabilities, client="robust-ws"),
    )
    answer, _ = await recv_response(ws, "init")
    assert answer["result"]["protocolVersion"] == VERSION, answer
    await send(ws, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    return answer["result"]


async def ping(ws: ClientConnection, rpc_id: Any) -> None:
    await send(ws, {"jsonrpc": "2.0", "id": rpc_id, "method": "ping"})
    answer, _ = await recv_response(ws, rpc_id)
    assert answer == {"jsonrpc": "2.0", "id": rpc_id, "result": {}}


def open_ws(gw: RunningGateway, path: str = "/mcp/ws") -> Any:
    return connect(gw.ws(path), subprotocols=["mcp"], open_timeout=STEP_S, close_timeout=2)


# ---------------------------------------------------------------------------------------------- basics


async def test_initialize_and_call_echo(gw: RunningGateway) -> None:
    async with open_ws(gw) as ws:
        assert ws.subprotocol == "mcp"
        result = await initialize(ws)
        assert result["serverInfo"]["name"]
        await send(ws, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        listed, _ = await recv_response(ws, 1)
        assert {"echo", "add", "slow_count"} <= {t["name"] for t in listed["result"]["tools"]}
        await send(
            ws,
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "echo", "arguments": {"text": "hi"}},
            },
        )
        answer, _ = await recv_response(ws, 2)
        assert answer["result"]["content"] == [{"type": "text", "text": "hi"}]


async def test_progress_and_logs_flow_while_the_call_runs(gw: RunningGateway) -> None:
    async with open_ws(gw) as ws:
        await initialize(ws)
        params = {"name": "slow_count", "arguments": {"n": 3, "delay_s": 0.05}, "_meta": {"progressToken": "p1"}}
        await send(ws, {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": params})
        answer, before = await recv_response(ws, 3)
        assert answer["result"]["content"][0]["text"] == "counted to 3"
        progress = [m["params"] for m in before if m.get("method") == "notifications/progress"]
        assert [p["progress"] for p in progress] == [1, 2, 3]
        assert {p["progressToken"] for p in progress} == {"p1"}


async def test_requests_are_answered_concurrently(gw: RunningGateway) -> None:
    """A slow call does not block a ping sent after it on the same socket."""
    async with open_ws(gw) as ws:
        await initialize(ws)
        params = {"name": "slow_count", "arguments": {"n": 10, "delay_s": 0.1}}
        await send(ws, {"jsonrpc": "2.0", "id": "slow", "method": "tools/call", "params": params})
        await send(ws, {"jsonrpc": "2.0", "id": "quick", "method": "ping"})
        order: list[Any] = []
        while len(order) < 2:
            message = await recv(ws)
            if message.get("id") in ("slow", "quick") and "method" not in message:
                order.append(message["id"])
        assert order == ["quick", "slow"]


# ---------------------------------------------------------------------------------------------- bad frames


async def test_malformed_frame_gets_a_parse_error_and_the_socket_stays_open(gw: RunningGateway) -> None:
    async with open_ws(gw) as ws:
        await initialize(ws)
        for bad in ("{", "not json", '{"jsonrpc": "2.0", "id": 1, "method": '):
            await ws.send(bad)
            error = await recv(ws)
            assert error["jsonrpc"] == "2.0"
            assert error["id"] is None
            assert error["error"]["code"] == PARSE_ERROR
        # A binary frame with garbage is a parse error as well.
        await ws.send(b"\xff\x00\xfe")
        assert (await recv(ws))["error"]["code"] == PARSE_ERROR
        await ping(ws, "after-garbage")


@pytest.mark.parametrize(
    ("message", "expected_id"),
    [
        ({}, None),
        ({"jsonrpc": "1.0", "id": 5, "method": "ping"}, 5),
        ({"jsonrpc": "2.0", "id": 6, "method": 42}, 6),
        ({"jsonrpc": "2.0", "id": 7, "method": "ping", "params": "nope"}, 7),
        ({"jsonrpc": "2.0", "id": True, "method": "ping"}, None),
        ([], None),
        ("a string", None),
    ],
    ids=["empty", "jsonrpc-1.0", "method-int", "params-string", "id-bool", "empty-batch", "string"],
)
async def test_invalid_request_gets_32600(gw: RunningGateway, message: Any, expected_id: Any) -> None:
    async with open_ws(gw) as ws:
        await initialize(ws)
        await send(ws, message)
        error = await recv(ws)
        assert error["error"]["code"] == INVALID_REQUEST, error
        assert error["id"] == expected_id
        await ping(ws, "still-open")


async def test_request_before_initialize_is_refused_not_dropped(gw: RunningGateway) -> None:
    async with open_ws(gw) as ws:
        await send(ws, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        answer, _ = await recv_response(ws, 1)
        assert answer["error"]["code"] == INVALID_REQUEST


async def test_oversize_frame_closes_with_1009(gw: RunningGateway) -> None:
    async with open_ws(gw) as ws:
        await initialize(ws)
        # Just under the limit is fine.
        text = "y" * 1500
        params = {"name": "echo", "arguments": {"text": text}}
        await send(ws, {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})
        answer, _ = await recv_response(ws, 1)
        assert answer["result"]["content"][0]["text"] == text
        # 10 KB is not.
        params = {"name": "echo", "arguments": {"text": "z" * 10_240}}
        await send(ws, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params})
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                await recv(ws)
        assert closed.value.rcvd is not None, "the gateway closed the socket with a close frame"
        assert closed.value.rcvd.code == TOO_BIG
    # The gateway itself is fine.
    async with open_ws(gw) as ws:
        await initialize(ws)
        await ping(ws, "new-socket")


async def test_client_response_to_an_unknown_request_is_ignored(gw: RunningGateway) -> None:
    async with open_ws(gw) as ws:
        await initialize(ws)
        await send(ws, {"jsonrpc": "2.0", "id": "sb-never-asked", "result": {}})
        await send(ws, {"jsonrpc": "2.0", "id": 99, "error": {"code": -1, "message": "x"}})
        await ping(ws, "fine")


# ---------------------------------------------------------------------------------------------- server -> client


def _fixture_call(rpc_id: Any, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rpc_id, "method": "tools/call", "params": {"name": name, "arguments": arguments}}


async def test_elicitation_reaches_the_ws_client_and_its_answer_the_backend(fixture_gw: RunningGateway) -> None:
    async with open_ws(fixture_gw) as ws:
        await initialize(ws, {"elicitation": {}})
        await send(ws, _fixture_call(1, "test_elicitation", {"message": "Who are you?"}))
        ask = await recv(ws)
        assert ask.get("method") == "elicitation/create", ask
        assert "id" in ask and ask["id"] is not None
        assert ask["params"]["message"] == "Who are you?"
        assert set(ask["params"]["requestedSchema"]["properties"]) == {"username", "email"}
        content = {"username": "alice", "email": "alice@example.com"}
        await send(ws, {"jsonrpc": "2.0", "id": ask["id"], "result": {"action": "accept", "content": content}})
        answer, _ = await recv_response(ws, 1)
        text = answer["result"]["content"][0]["text"]
        assert text.startswith("User response: action=accept"), text
        assert json.loads(text.split("content=", 1)[1]) == content


async def test_sampling_reaches_the_ws_client_and_its_answer_the_backend(fixture_gw: RunningGateway) -> None:
    async with open_ws(fixture_gw) as ws:
        await initialize(ws, {"sampling": {}})
        await send(ws, _fixture_call("s", "test_sampling", {"prompt": "Say hi"}))
        ask = await recv(ws)
        assert ask.get("method") == "sampling/createMessage", ask
        assert ask["params"]["messages"][0]["content"]["text"] == "Say hi"
        reply = {
            "role": "assistant",
            "content": {"type": "text", "text": "hi from the ws client"},
            "model": "test-model",
            "stopReason": "endTurn",
        }
        await send(ws, {"jsonrpc": "2.0", "id": ask["id"], "result": reply})
        answer, _ = await recv_response(ws, "s")
        assert answer["result"]["content"][0]["text"] == "LLM response: hi from the ws client"


async def test_elicitation_error_answer_reaches_the_backend(fixture_gw: RunningGateway) -> None:
    async with open_ws(fixture_gw) as ws:
        await initialize(ws, {"elicitation": {}})
        await send(ws, _fixture_call(2, "test_elicitation", {"message": "Who?"}))
        ask = await recv(ws)
        assert ask.get("method") == "elicitation/create"
        await send(ws, {"jsonrpc": "2.0", "id": ask["id"], "error": {"code": -1, "message": "user went away"}})
        answer, _ = await recv_response(ws, 2)
        # The tool fails (as a JSON-RPC error or an isError result), but it does answer.
        assert "error" in answer or answer["result"].get("isError") is True, answer


async def test_client_without_elicitation_capability_gets_an_answer_not_a_hang(fixture_gw: RunningGateway) -> None:
    async with open_ws(fixture_gw) as ws:
        await initialize(ws)  # no elicitation capability
        await send(ws, _fixture_call(3, "test_elicitation", {"message": "Who?"}))
        answer, others = await recv_response(ws, 3)
        assert not [m for m in others if m.get("method") == "elicitation/create"], "not asked without the capability"
        assert "error" in answer or answer["result"].get("isError") is True, answer


# ---------------------------------------------------------------------------------------------- slow clients


class RawWs:
    """A WebSocket client on a raw socket with a tiny receive window, so that not reading really backs up."""

    def __init__(self, port: int, path: str = "/mcp/ws", rcvbuf: int = 4096) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(STEP_S)
        self.sock.connect(("127.0.0.1", port))
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(
            (
                f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: mcp\r\n\r\n"
            ).encode()
        )
        self.buffer = b""
        while b"\r\n\r\n" not in self.buffer:
            self.buffer += self.sock.recv(4096)
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        assert head.startswith(b"HTTP/1.1 101"), head

    def send(self, message: dict[str, Any]) -> None:
        data = json.dumps(message).encode()
        mask = os.urandom(4)
        n = len(data)
        if n < 126:
            header = struct.pack("!BB", 0x81, 0x80 | n)
        elif n < 65536:
            header = struct.pack("!BBH", 0x81, 0x80 | 126, n)
        else:
            header = struct.pack("!BBQ", 0x81, 0x80 | 127, n)
        self.sock.sendall(header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def _frame(self) -> tuple[int, bytes] | None:
        """One complete (opcode, payload) from the buffer, if there is one."""
        if len(self.buffer) < 2:
            return None
        opcode, length = self.buffer[0] & 0x0F, self.buffer[1] & 0x7F
        offset = 2
        if length == 126:
            if len(self.buffer) < 4:
                return None
            (length,) = struct.unpack("!H", self.buffer[2:4])
            offset = 4
        elif length == 127:
            if len(self.buffer) < 10:
                return None
            (length,) = struct.unpack("!Q", self.buffer[2:10])
            offset = 10
        if len(self.buffer) < offset + length:
            return None
        payload = self.buffer[offset : offset + length]
        self.buffer = self.buffer[offset + length :]
        return opcode, payload

    def frames(self, timeout_s: float, until_id: Any = None) -> list[tuple[int, bytes]]:
        """Frames until a close frame, the response to ``until_id``, EOF or the time is up."""
        out: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + timeout_s
        self.sock.settimeout(0.5)
        while time.monotonic() < deadline:
            frame = self._frame()
            if frame is not None:
                out.append(frame)
                if frame[0] == 0x8:
                    return out
                if until_id is not None and frame[0] == 0x1 and json.loads(frame[1]).get("id") == until_id:
                    return out
                continue
            try:
                chunk = self.sock.recv(1 << 20)
            except TimeoutError:
                continue
            if not chunk:
                return out
            self.buffer += chunk
        return out

    def initialize(self) -> None:
        self.send(initialize_request("init", client="raw"))
        assert self.frames(STEP_S, until_id="init")[-1][0] == 0x1
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def close(self) -> None:
        self.sock.close()


@pytest.fixture(scope="module")
def flood_gw() -> Iterator[RunningGateway]:
    config = {
        "backends": {"crashy": crashy_backend(required=True)},
        "limits": {"session_queue": 16},
    }
    with run_gateway(config) as running:
        yield running


async def eventually(predicate: Any, timeout_s: float) -> bool:
    for _ in range(int(timeout_s / 0.05)):
        if predicate():
            return True
        await asyncio.sleep(0.05)
    return bool(predicate())


def _drops_logged(gw: RunningGateway) -> int:
    return sum(1 for line in gw.log().splitlines() if "WebSocket session" in line and "behind" in line)


def _start_flood(gw: RunningGateway) -> RawWs:
    raw = RawWs(int(gw.url.rsplit(":", 1)[1]))
    raw.initialize()
    # 400 notifications of 32 KB: ~13 MB, far more than the loopback socket buffers hold; paced 2 ms apart so
    # that the gateway's writer keeps up until the socket blocks (the overflow is then the stalled client's doing).
    params = {
        "name": "flood",
        "arguments": {"count": 400, "size": 32_000, "pause_s": 0.002},
        "_meta": {"progressToken": "f"},
    }
    raw.send({"jsonrpc": "2.0", "id": "flood", "method": "tools/call", "params": params})
    return raw


async def _other_client_is_served(gw: RunningGateway) -> None:
    async with open_ws(gw) as ws:
        await initialize(ws)
        started = time.monotonic()
        await send(ws, _fixture_call("other", "ok", {}))
        answer, _ = await recv_response(ws, "other")
        assert answer["result"]["content"][0]["text"].startswith("ok")
        assert time.monotonic() - started < 2.0


async def test_slow_ws_client_is_closed_with_1013_and_a_logged_reason(flood_gw: RunningGateway) -> None:
    before = _drops_logged(flood_gw)
    raw = _start_flood(flood_gw)
    try:
        await asyncio.sleep(1.0)  # the backend floods while this client does not read
        await _other_client_is_served(flood_gw)
        frames = await asyncio.to_thread(raw.frames, 20.0)
    finally:
        raw.close()
    texts = [payload for opcode, payload in frames if opcode == 0x1]
    assert len(texts) < 401, "the stalled client was not cut off"
    assert not any(b"flooded 400" in t for t in texts)
    assert frames and frames[-1][0] == 0x8, "the gateway ends with a close frame"
    (code,) = struct.unpack("!H", frames[-1][1][:2])
    assert code == TRY_AGAIN_LATER, code
    assert await eventually(lambda: _drops_logged(flood_gw) > before, 5), flood_gw.log()[-2000:]
    await _other_client_is_served(flood_gw)


async def test_ws_client_that_stops_reading_is_dropped_without_reading_again(flood_gw: RunningGateway) -> None:
    before = _drops_logged(flood_gw)
    raw = _start_flood(flood_gw)
    try:
        dropped = await eventually(lambda: _drops_logged(flood_gw) > before, 2)
        await _other_client_is_served(flood_gw)
    finally:
        raw.close()
    assert dropped, "no drop was logged while the client was stalled"
