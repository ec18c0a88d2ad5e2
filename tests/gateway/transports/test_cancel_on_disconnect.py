"""The 2026-07-28 wire's only cancellation, over real sockets: a client that closes its connection
cancels its call upstream, through the connection's registry of held tasks (``HOLD_KEY``,
gateway/transports/coalesce.py) rather than a future and a callback per request."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import uvicorn

from gateway.app import build_app
from gateway.config import Config
from gateway.core import Gateway
from gateway.transports.coalesce import CoalescingTransport
from tests.gateway.transports.modern_door_support import META, WAIT_S, headers_for, rpc
from tests.support import served_by_gateway_protocol

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
async def served() -> AsyncIterator[tuple[Gateway, uvicorn.Server, int]]:
    cfg = Config.model_validate({"backends": {"demo": {"transport": "builtin"}}})
    gateway = Gateway(cfg)
    app = build_app(cfg, gateway)
    async with served_by_gateway_protocol(app, gateway, "demo") as (server, port):
        yield gateway, server, port


def request(message: dict[str, Any], name: str) -> bytes:
    body = json.dumps(message).encode()
    head = ["POST /mcp HTTP/1.1", "Host: 127.0.0.1", f"Content-Length: {len(body)}"]
    head += [f"{k}: {v}" for k, v in headers_for("tools/call", name).items()]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def held_tasks(server: uvicorn.Server) -> int:
    transports: list[Any] = [p.transport for p in server.server_state.connections]
    return sum(len(t.held) for t in transports if isinstance(t, CoalescingTransport))


async def until(check: Any) -> None:
    async with asyncio.timeout(WAIT_S):
        while not check():  # noqa: ASYNC110 (the states polled have no event)
            await asyncio.sleep(0.01)


@pytest.mark.parametrize("streamed", [False, True], ids=["json", "sse"])
async def test_a_client_that_leaves_cancels_its_call(
    served: tuple[Gateway, uvicorn.Server, int], streamed: bool
) -> None:
    gateway, server, port = served
    demo = gateway.connections["demo"]
    meta = {**META, "progressToken": "p"} if streamed else META
    call = rpc("tools/call", {"name": "slow_count", "arguments": {"n": 200, "delay_s": 0.05}}, "long", meta=meta)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request(call, "slow_count"))
    if streamed:
        async with asyncio.timeout(WAIT_S):
            head = await reader.readuntil(b"\r\n\r\n")
        assert b"text/event-stream" in head
    await until(lambda: demo.inflight == 1)
    assert held_tasks(server) == 1
    writer.close()
    await until(lambda: demo.inflight == 0)  # the backend call was abandoned
    await until(lambda: not server.server_state.connections)


async def test_a_finished_call_leaves_nothing_held(served: tuple[Gateway, uvicorn.Server, int]) -> None:
    _gateway, server, port = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for rpc_id in (1, 2):  # one kept-alive connection
            call = rpc("tools/call", {"name": "echo", "arguments": {"text": "hi"}}, rpc_id)
            writer.write(request(call, "echo"))
            async with asyncio.timeout(WAIT_S):
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                answer = json.loads(await reader.readexactly(length))
            assert answer["id"] == rpc_id and answer["result"]["content"][0]["text"] == "hi", answer
            await until(lambda: held_tasks(server) == 0)
        assert len(server.server_state.connections) == 1
    finally:
        writer.close()
