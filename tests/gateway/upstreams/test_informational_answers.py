"""A backend's 1xx answers (100 Continue, 103 Early Hints: RFC 9110 §15.2) before its final one are not
the call's answer, on the quick path (a kept-alive connection idle, gateway/upstreams/quick.py) and the
awaited one (``Response``), whether they arrive in the final answer's read or in reads of their own.
Before, the quick path took a 103 for the answer (-32603), and the final answer that followed left the
connection out of step, so the next call waited for its deadline. A 1xx's own header lines are
forgotten (a Content-Type of its own must not decide how the final answer is read); a 101 (an upgrade,
never asked for) is an error, answered at once.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from gateway import errors, jsonrpc
from tests.support import RawBackend, call_tool, http_backend, raw_mcp_backend, text_of

pytestmark = pytest.mark.timeout(60)

TIMEOUT_S = 20.0  # the backend's timeout_s: a call that waits for it has failed the test's purpose
INIT = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}}, "serverInfo": {"name": "hints"}}
# What comes before the final answer, by the tool's name (each piece written and flushed on its own).
INTERIM = {
    "early-hints": [b"HTTP/1.1 103 Early Hints\r\nlink: </a>; rel=preload\r\n\r\n"],
    "continue": [b"HTTP/1.1 100 Continue\r\n\r\n"],
    "two-with-a-content-type": [
        b"HTTP/1.1 100 Continue\r\ncontent-type: text/event-stream\r\n\r\n",
        b"HTTP/1.1 103 Early Hints\r\ncontent-type: text/event-stream\r\nlink: </b>\r\n\r\n",
    ],
}


def _final(rpc_id: Any, name: str) -> bytes:
    body = orjson.dumps(jsonrpc.result(rpc_id, {"content": [{"type": "text", "text": name}]}))
    return b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)


def _serve(split: bool) -> Any:
    async def on_call(name: str, rpc_id: Any, _reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        if name == "upgrade":
            writer.write(b"HTTP/1.1 101 Switching Protocols\r\nupgrade: x\r\nconnection: upgrade\r\n\r\n")
            return True
        for piece in INTERIM.get(name, []):
            writer.write(piece)
            if split:  # a read of its own
                await writer.drain()
                await asyncio.sleep(0.05)
        writer.write(_final(rpc_id, name))
        return True

    return raw_mcp_backend(on_call, INIT, RawBackend())


@pytest.mark.parametrize("split", [False, True], ids=["one-read", "reads-of-their-own"])
@pytest.mark.parametrize("warm", [False, True], ids=["awaited-path", "quick-path"])
@pytest.mark.parametrize("name", sorted(INTERIM))
async def test_interim_answers_are_skipped(name: str, warm: bool, split: bool) -> None:
    async with _serve(split) as server, http_backend(server.url, timeout_s=TIMEOUT_S) as conn:
        if warm:
            assert text_of(await call_tool(conn, "warm")) == "warm"
        assert text_of(await call_tool(conn, name)) == name
        assert text_of(await call_tool(conn, "after")) == "after"  # the connection is in step


@pytest.mark.parametrize("warm", [False, True], ids=["awaited-path", "quick-path"])
async def test_an_unasked_upgrade_is_an_error_at_once(warm: bool) -> None:
    async with _serve(False) as server, http_backend(server.url, timeout_s=TIMEOUT_S) as conn:
        if warm:
            assert text_of(await call_tool(conn, "warm")) == "warm"
        loop = asyncio.get_running_loop()
        started = loop.time()
        answer = await call_tool(conn, "upgrade")
        assert "error" in answer and answer["error"]["code"] != errors.BACKEND_TIMEOUT, answer
        assert loop.time() - started < TIMEOUT_S / 2
        assert text_of(await call_tool(conn, "after")) == "after"
