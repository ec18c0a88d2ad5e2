"""MGP streaming end to end (MGP_COMMUNICATION.md §12): a raw JSON-lines MGP client on the stdio
front door of a real gateway process, a real stdio MGP backend that streams itself
(tests/e2e/backends/mgp_stream_server.py) and the builtin plain MCP backend, whose progress and log
lines the gateway turns into the stream.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import LinePeer, initialize_request, spawn_module, stdio_backend

pytestmark = [pytest.mark.timeout(30)]

CHUNK, PROGRESS = "notifications/mgp.stream.chunk", "notifications/mgp.stream.progress"


@asynccontextmanager
async def client(tmp_path: Path) -> AsyncIterator[LinePeer]:
    config = {
        "backends": {
            "demo": {"transport": "builtin"},
            "streamer": stdio_backend("tests.e2e.backends.mgp_stream_server", required=True),
        },
        "federation": {"prefix": "never"},
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    async with spawn_module("gateway", "stdio", "-c", str(path), stderr=asyncio.subprocess.DEVNULL, grace_s=0) as proc:
        peer = LinePeer(proc)
        mgp = {"version": "0.8.0", "extensions": ["streaming", "progress"]}
        await peer.send(initialize_request(0, capabilities={"mgp": mgp}))
        init = await peer.until(lambda m: m.get("id") == 0)
        assert "streaming" in init["result"]["capabilities"]["mgp"]["extensions"]
        await peer.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        yield peer


def call(rpc_id: Any, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    params = {"name": name, "arguments": arguments, "_mgp": {"stream": True}}
    return {"jsonrpc": "2.0", "id": rpc_id, "method": "tools/call", "params": params}


async def collect(peer: LinePeer, rpc_id: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The stream notifications for ``rpc_id`` up to its answer, and the answer."""
    notes: list[dict[str, Any]] = []
    while True:
        message = await peer.recv(10)
        if message.get("id") == rpc_id and "method" not in message:
            return notes, message
        if message.get("method") in (CHUNK, PROGRESS) and message["params"].get("request_id") == rpc_id:
            notes.append(message)


async def test_a_streaming_backends_chunks_reach_the_client_under_its_id(tmp_path: Path) -> None:
    async with client(tmp_path) as peer:
        await peer.send(call("a", "generate", {"n": 3, "delay_s": 0.01}))
        notes, answer = await collect(peer, "a")
    chunks = [n["params"] for n in notes if n["method"] == CHUNK]
    assert [(c["index"], c["content"]["text"]) for c in chunks] == [(0, "part0 "), (1, "part1 "), (2, "part2 ")]
    assert answer["result"]["content"][0]["text"] == "part0 part1 part2 "
    assert answer["result"]["_mgp"]["streamed"] is True and answer["result"]["_mgp"]["chunks_sent"] == 3
    assert "duration_ms" in answer["result"]["_mgp"]


async def test_a_plain_backends_progress_becomes_the_stream(tmp_path: Path) -> None:
    async with client(tmp_path) as peer:
        await peer.send(call(2, "slow_count", {"n": 3, "delay_s": 0.01}))
        notes, answer = await collect(peer, 2)
    progress = [n["params"]["progress"] for n in notes if n["method"] == PROGRESS]
    assert progress == pytest.approx([1 / 3, 2 / 3, 1.0], abs=1e-5)
    chunks = [n["params"]["content"]["text"] for n in notes if n["method"] == CHUNK]
    assert chunks == ["count 1/3", "count 2/3", "count 3/3"]
    assert answer["result"]["_mgp"] == {**answer["result"]["_mgp"], "streamed": True, "chunks_sent": 3}


async def test_cancel_returns_the_partial_result_and_ends_the_call(tmp_path: Path) -> None:
    async with client(tmp_path) as peer:
        await peer.send(call(4, "generate", {"n": 300, "delay_s": 0.02}))
        await peer.until(lambda m: m.get("method") == CHUNK and m["params"]["index"] == 1)
        await peer.send({"jsonrpc": "2.0", "id": 5, "method": "mgp/stream/cancel", "params": {"request_id": 4}})
        answers: dict[Any, dict[str, Any]] = {}
        while len(answers) < 2:
            message = await peer.recv(10)
            if message.get("id") in (4, 5) and "method" not in message:
                answers[message["id"]] = message
    result = answers[5]["result"]
    assert result["cancelled"] is True
    assert result["partial_result"]["content"][0]["text"].startswith("part0 part1 ")
    assert answers[4]["error"]["code"] == -32800
