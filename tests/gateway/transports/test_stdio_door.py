"""The stdio door in-process: ``serve`` reads newline-delimited JSON-RPC from a StreamReader and writes lines.

A real Gateway with the builtin demo backend; the test feeds an ``asyncio.StreamReader`` and
collects what ``send`` gets, so no process is spawned and no pipe is opened.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway import errors
from gateway.config import Config
from gateway.core import Gateway
from gateway.transports import stdio
from policies.auth import Credentials

pytestmark = pytest.mark.timeout(30)

MESSAGE_LIMIT = 2048
WAIT_S = 5.0


def rpc(method: str, params: dict[str, Any] | None = None, rpc_id: Any = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": params or {}}


def line(message: Any) -> bytes:
    return json.dumps(message).encode() + b"\n"


INIT = rpc("initialize", {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t"}}, 0)
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def door(gw: Gateway) -> stdio.StdioDoor:
    return stdio.StdioDoor(
        open_session=gw.open_session,
        router=gw.router,
        sessions=gw.sessions,
        limits=gw.config.limits,
        metrics=gw.metrics,
    )


class Host:
    """The host's end of the pipes: lines in, lines out, and the serving task."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.reader = asyncio.StreamReader()
        self.sent: asyncio.Queue[str] = asyncio.Queue()
        self.task: asyncio.Task[None] | None = None

    async def _send(self, text: str) -> None:
        assert "\n" not in text, "one message per line"
        self.sent.put_nowait(text)

    def start(self) -> Host:
        gw = self.gateway
        self.task = asyncio.create_task(
            door(gw).serve(gw.federated, Credentials("anonymous", "anonymous"), self.reader, self._send)
        )
        HOSTS.append(self)
        return self

    def write(self, data: bytes) -> None:
        self.reader.feed_data(data)

    def send(self, message: Any) -> None:
        self.write(line(message))

    async def receive(self) -> dict[str, Any]:
        async with asyncio.timeout(WAIT_S):
            text = await self.sent.get()
        message: dict[str, Any] = json.loads(text)
        return message

    async def request(self, message: dict[str, Any]) -> dict[str, Any]:
        self.send(message)
        return await self.receive()

    async def initialize(self) -> dict[str, Any]:
        answer = await self.request(INIT)
        assert "result" in answer, answer
        self.send(INITIALIZED)
        return answer

    def eof(self) -> None:
        self.reader.feed_eof()

    async def ended(self) -> None:
        assert self.task is not None
        async with asyncio.timeout(WAIT_S):
            await self.task

    def drained(self) -> list[dict[str, Any]]:
        out = []
        while not self.sent.empty():
            out.append(json.loads(self.sent.get_nowait()))
        return out


HOSTS: list[Host] = []


@pytest.fixture
async def gateway() -> AsyncIterator[Gateway]:
    cfg = Config.model_validate(
        {
            "backends": {"demo": {"transport": "builtin"}},
            "limits": {"max_message_bytes": MESSAGE_LIMIT, "session_queue": 8, "client_request_timeout_s": 2},
        }
    )
    gw = Gateway(cfg)
    await gw.start()
    try:
        assert await gw.connections["demo"].wait_ready(10)
        yield gw
    finally:
        while HOSTS:
            host = HOSTS.pop()
            if host.task is not None and not host.task.done():
                host.task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await host.task
        await gw.stop()


async def test_initialize_then_a_call(gateway: Gateway) -> None:
    host = Host(gateway).start()
    init = await host.initialize()
    assert init["id"] == 0
    assert init["result"]["protocolVersion"] == "2025-11-25"
    assert "tools" in init["result"]["capabilities"]
    answer = await host.request(rpc("tools/call", {"name": "add", "arguments": {"a": 1.5, "b": 2}}, "s-1"))
    assert answer == {
        "jsonrpc": "2.0",
        "id": "s-1",
        "result": {"content": [{"type": "text", "text": "3.5"}], "structuredContent": {"sum": 3.5}},
    }
    host.eof()
    await host.ended()


async def test_one_session_lives_exactly_as_long_as_serving(gateway: Gateway) -> None:
    before = len(gateway.sessions)
    host = Host(gateway).start()
    await host.initialize()
    assert len(gateway.sessions) == before + 1
    host.eof()
    await host.ended()
    assert len(gateway.sessions) == before


async def test_eof_ends_serving_after_the_last_answers_are_written(gateway: Gateway) -> None:
    host = Host(gateway).start()
    await host.initialize()
    # A host may close stdin right after its last request: that request is still answered.
    host.send(rpc("tools/call", {"name": "slow_count", "arguments": {"n": 2, "delay_s": 0.05}}, "last"))
    host.eof()
    await host.ended()
    answers = [m for m in host.drained() if "id" in m]
    assert [a["id"] for a in answers] == ["last"]
    assert answers[0]["result"]["content"][0]["text"] == "counted to 2"


async def test_eof_without_any_input_ends_serving_quietly(gateway: Gateway) -> None:
    host = Host(gateway).start()
    host.eof()
    await host.ended()
    assert host.drained() == []


async def test_the_last_line_may_lack_its_newline(gateway: Gateway) -> None:
    host = Host(gateway).start()
    host.write(json.dumps(rpc("ping", rpc_id="tail")).encode())
    host.eof()
    await host.ended()
    assert host.drained() == [{"jsonrpc": "2.0", "id": "tail", "result": {}}]


async def test_blank_lines_are_skipped_without_an_answer(gateway: Gateway) -> None:
    host = Host(gateway).start()
    host.write(b"\n   \n\t\n\r\n")
    assert await host.request(rpc("ping", rpc_id="after-blanks")) == {
        "jsonrpc": "2.0",
        "id": "after-blanks",
        "result": {},
    }
    host.eof()
    await host.ended()
    assert host.drained() == [], "blank lines produce nothing"


async def test_crlf_line_endings_are_read(gateway: Gateway) -> None:
    host = Host(gateway).start()
    host.write(json.dumps(rpc("ping", rpc_id="crlf")).encode() + b"\r\n")
    assert (await host.receive())["id"] == "crlf"
    host.eof()
    await host.ended()


@pytest.mark.parametrize(
    ("data", "code", "rpc_id"),
    [
        pytest.param(b"{not json\n", errors.PARSE_ERROR, None, id="not-json"),
        pytest.param(b"\xff\xfe{}\n", errors.PARSE_ERROR, None, id="not-utf8"),
        pytest.param(b'{"jsonrpc":"2.0","id":null,"method":"ping"}\n', errors.INVALID_REQUEST, None, id="null-id"),
        pytest.param(b"[]\n", errors.INVALID_REQUEST, None, id="empty-batch"),
        pytest.param(b'{"jsonrpc":"2.0","id":4}\n', errors.INVALID_REQUEST, 4, id="no-method-keeps-id"),
        pytest.param(b'{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}\n', errors.INVALID_REQUEST, None, id="obj-id"),
        pytest.param(b'"just a string"\n', errors.INVALID_REQUEST, None, id="scalar"),
    ],
)
async def test_a_malformed_line_is_answered_and_serving_goes_on(
    gateway: Gateway, data: bytes, code: int, rpc_id: Any
) -> None:
    host = Host(gateway).start()
    host.write(data)
    error = await host.receive()
    assert error["jsonrpc"] == "2.0" and error["id"] == rpc_id, error
    assert error["error"]["code"] == code, error
    assert "result" in await host.initialize(), "the session survives a bad line"
    host.eof()
    await host.ended()


async def test_an_over_long_line_is_discarded_through_its_newline_and_answered_once(gateway: Gateway) -> None:
    host = Host(gateway).start()
    big = line(rpc("tools/call", {"name": "echo", "arguments": {"text": "a" * (3 * MESSAGE_LIMIT)}}, 5))
    # In pieces, as a pipe delivers it: the discard must span chunks.
    for start in range(0, len(big), 700):
        host.write(big[start : start + 700])
        await asyncio.sleep(0)
    error = await host.receive()
    assert error["id"] is None and error["error"]["code"] == errors.INVALID_REQUEST
    assert str(MESSAGE_LIMIT) in error["error"]["message"]
    answer = await host.request(rpc("ping", rpc_id="after-big"))
    assert answer == {"jsonrpc": "2.0", "id": "after-big", "result": {}}, "nothing after the long line is lost"
    host.eof()
    await host.ended()
    assert host.drained() == [], "the long line is answered exactly once"


async def test_a_batch_line_is_answered_message_by_message(gateway: Gateway) -> None:
    host = Host(gateway).start()
    host.send([rpc("ping", rpc_id="b1"), rpc("ping", rpc_id="b2")])
    answers = [await host.receive() for _ in range(2)]
    assert sorted(a["id"] for a in answers) == ["b1", "b2"]
    host.eof()
    await host.ended()


async def test_progress_precedes_the_result_in_order(gateway: Gateway) -> None:
    host = Host(gateway).start()
    await host.initialize()
    params = {"name": "slow_count", "arguments": {"n": 3, "delay_s": 0.01}, "_meta": {"progressToken": 77}}
    host.send(rpc("tools/call", params, 6))
    seen: list[dict[str, Any]] = []
    while not seen or "id" not in seen[-1]:
        seen.append(await host.receive())
    progress = [m["params"]["progress"] for m in seen if m.get("method") == "notifications/progress"]
    assert progress == [1, 2, 3]
    assert all(m["params"]["progressToken"] == 77 for m in seen if m.get("method") == "notifications/progress")
    assert seen[-1]["id"] == 6
    host.eof()
    await host.ended()


async def test_after_the_drafts_exit_the_session_is_gone_and_the_next_line_ends_serving(gateway: Gateway) -> None:
    before = len(gateway.sessions)
    host = Host(gateway).start()
    await host.initialize()
    host.send({"jsonrpc": "2.0", "method": "exit"})
    assert host.task is not None
    for i in range(int(WAIT_S / 0.01)):  # each line lets serve notice that the session ended
        if host.task.done():
            break
        host.send(rpc("ping", rpc_id=f"too-late-{i}"))
        await asyncio.sleep(0.01)
    await host.ended()
    assert len(gateway.sessions) == before
    assert host.drained() == [], "nothing is answered after exit"


async def test_the_drafts_exit_alone_ends_serving(gateway: Gateway) -> None:
    host = Host(gateway).start()
    await host.initialize()
    host.send({"jsonrpc": "2.0", "method": "exit"})
    assert host.task is not None
    async with asyncio.timeout(1.0):
        await host.task


async def test_the_drafts_exit_request_is_answered(gateway: Gateway) -> None:
    host = Host(gateway).start()
    await host.initialize()
    host.send(rpc("exit", rpc_id=9))
    host.eof()
    await host.ended()
    assert host.drained() == [{"jsonrpc": "2.0", "id": 9, "result": None}]


async def test_a_host_that_stops_reading_is_cut_off_not_buffered_forever(gateway: Gateway) -> None:
    blocked = asyncio.Event()

    async def stuck_send(_text: str) -> None:
        blocked.set()
        await asyncio.Event().wait()  # a pipe that is never drained

    reader = asyncio.StreamReader()
    task = asyncio.create_task(
        door(gateway).serve(gateway.federated, Credentials("anonymous", "anonymous"), reader, stuck_send)
    )
    queue = gateway.config.limits.session_queue
    try:
        reader.feed_data(line(rpc("ping", rpc_id="first")))
        async with asyncio.timeout(WAIT_S):
            await blocked.wait()  # the writer is now stuck in a send
        for i in range(queue * 3):
            reader.feed_data(line(rpc("ping", rpc_id=i)))
        reader.feed_eof()
        async with asyncio.timeout(WAIT_S):
            await task
    finally:
        if not task.done():
            task.cancel()
    dropped = gateway.metrics.registry.get_sample_value(
        "switchboard_slow_clients_dropped_total", {"transport": stdio.TRANSPORT}
    )
    assert dropped == 1


async def test_the_sessions_credentials_decide_what_it_may_call() -> None:
    cfg = Config.model_validate(
        {
            "backends": {"demo": {"transport": "builtin"}},
            "principals": {
                "carol": {"capabilities": ["mcp/request:initialize", "mcp/notification:*", "mcp/request:tools/*"]}
            },
        }
    )
    gw = Gateway(cfg)
    await gw.start()
    try:
        assert await gw.connections["demo"].wait_ready(10)
        reader = asyncio.StreamReader()
        sent: asyncio.Queue[str] = asyncio.Queue()

        async def send(text: str) -> None:
            sent.put_nowait(text)

        task = asyncio.create_task(door(gw).serve(gw.single["demo"], Credentials("static", "carol"), reader, send))
        reader.feed_data(line(INIT) + line(INITIALIZED))
        reader.feed_data(line(rpc("resources/read", {"uri": "demo://readme"}, "r")))
        reader.feed_data(line(rpc("tools/call", {"name": "echo", "arguments": {"text": "hi"}}, "t")))
        reader.feed_eof()
        async with asyncio.timeout(WAIT_S):
            await task
        answers = {m["id"]: m for m in (json.loads(sent.get_nowait()) for _ in range(sent.qsize()))}
        assert "result" in answers[0]
        assert answers["r"]["error"]["code"] == errors.CAPABILITY_DENIED
        assert answers["t"]["result"]["content"][0]["text"] == "hi"
    finally:
        await gw.stop()
