"""The stdio front door: `switchboard stdio` spawned by a client, as desktop and MCPL hosts do."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters

from tests.e2e.mcpl_support import mcpl_backend
from tests.support import PROJECT_ROOT, LinePeer, initialize_request, spawn_module

INIT = initialize_request()


def write_config(tmp_path: Path, config: dict[str, Any]) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


Peer = LinePeer  # the client end of `switchboard stdio`: JSON lines over the child's pipes


@asynccontextmanager
async def spawn(*args: str) -> AsyncIterator[Peer]:
    async with spawn_module("gateway", "stdio", *args, stderr=asyncio.subprocess.PIPE, grace_s=0) as proc:
        yield Peer(proc)


async def test_the_official_sdk_client_over_stdio() -> None:
    server = StdioServerParameters(command=sys.executable, args=["-m", "gateway", "stdio"], cwd=str(PROJECT_ROOT))
    async with Client(server, mode="legacy", read_timeout_seconds=30) as client:
        assert client.server_info is not None and client.server_info.name == "switchboard"
        tools = {t.name for t in (await client.list_tools()).tools}
        assert {"echo", "add", "slow_count"} <= tools
        result = await client.call_tool("add", {"a": 2, "b": 3})
        assert result.structured_content == {"sum": 5}


async def test_bad_lines_are_answered_and_eof_ends_cleanly(tmp_path: Path) -> None:
    config = write_config(
        tmp_path, {"backends": {"demo": {"transport": "builtin"}}, "limits": {"max_message_bytes": 4096}}
    )
    async with spawn("-c", config) as peer:
        await peer.send(INIT)
        assert (await peer.until(lambda m: m.get("id") == 0))["result"]["serverInfo"]["name"] == "switchboard"
        await peer.send(b"this is not json")
        assert (await peer.until(lambda m: "error" in m))["error"]["code"] == -32700
        await peer.send(b'{"jsonrpc": "2.0", "id": 5, "method": "x/' + b"y" * 5000 + b'"}')
        too_long = await peer.until(lambda m: "error" in m)
        assert too_long["error"]["code"] == -32600 and "4096" in too_long["error"]["message"]
        await peer.send({"jsonrpc": "2.0", "id": 6, "method": "ping"})
        assert (await peer.until(lambda m: m.get("id") == 6))["result"] == {}, "the line after it is served"
        await peer.send(
            {
                "jsonrpc": "2.0",
                "id": 7,
                "method": "tools/call",
                "params": {"name": "echo", "arguments": {"text": "last"}},
            }
        )
        assert peer.proc.stdin is not None
        peer.proc.stdin.close()  # EOF right after a request: it is still answered
        last = await peer.until(lambda m: m.get("id") == 7)
        assert last["result"]["content"][0]["text"] == "last"
        assert await asyncio.wait_for(peer.proc.wait(), 15) == 0


async def test_an_mcpl_host_over_stdio_gets_a_push(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"backends": {"mem": mcpl_backend("memory")}})
    async with spawn("-c", config) as peer:
        caps = {"experimental": {"mcpl": {"version": "0.4", "pushEvents": True, "featureSets": True}}}
        await peer.send({**INIT, "params": {**INIT["params"], "capabilities": caps}})
        init = await peer.until(lambda m: m.get("id") == 0)
        assert "memory.proactive" in init["result"]["capabilities"]["experimental"]["mcpl"]["featureSets"]
        await peer.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        await peer.send({"jsonrpc": "2.0", "method": "featureSets/update", "params": {"enabled": ["memory.proactive"]}})
        for n in range(100):  # wait until the backend has been told
            await peer.send({"jsonrpc": "2.0", "id": 100 + n, "method": "tools/call", "params": {"name": "stats"}})
            record = json.loads(
                (await peer.until(lambda m, n=n: m.get("id") == 100 + n))["result"]["content"][0]["text"]
            )
            if record["featureSetUpdates"] and "memory.proactive" in record["featureSetUpdates"][-1]["enabled"]:
                break
            await asyncio.sleep(0.05)
        call = {"name": "push", "arguments": {"eventId": "stdio-1", "text": "over stdio"}}
        await peer.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call})
        pushed = await peer.until(lambda m: m.get("method") == "push/event")
        assert pushed["params"]["featureSet"] == "memory.proactive" and pushed["params"]["eventId"] == "stdio-1"
        await peer.send({"jsonrpc": "2.0", "id": pushed["id"], "result": {"accepted": True, "inferenceId": "inf_s"}})
        done = await peer.until(lambda m: m.get("id") == 1)
        assert json.loads(done["result"]["content"][0]["text"]) == {
            "result": {"accepted": True, "inferenceId": "inf_s"}
        }


async def test_auth_is_required_when_configured(tmp_path: Path) -> None:
    config = write_config(
        tmp_path,
        {
            "auth": {},
            "principals": {
                "alice": {"tokens": ["alice-token"], "capabilities": ["mcp/request:initialize", "mcp/request:ping"]}
            },
            "backends": {"demo": {"transport": "builtin"}},
        },
    )
    async with spawn("-c", config) as refused:
        assert await asyncio.wait_for(refused.proc.wait(), 15) == 1
        assert refused.proc.stderr is not None
        assert b"authentication required" in await refused.proc.stderr.read()
    async with spawn("-c", config, "--token", "alice-token") as alice:
        await alice.send(INIT)
        assert "result" in await alice.until(lambda m: m.get("id") == 0)
        await alice.send({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        denied = await alice.until(lambda m: m.get("id") == 2)
        assert "error" in denied, "alice's capabilities apply on stdio too"


@pytest.mark.parametrize("server", ["demo", "ghost"])
async def test_one_backend_alone_with_server(tmp_path: Path, server: str) -> None:
    config = write_config(tmp_path, {"backends": {"demo": {"transport": "builtin"}, "other": {"transport": "builtin"}}})
    async with spawn("-c", config, "--server", server) as peer:
        if server == "ghost":
            assert await asyncio.wait_for(peer.proc.wait(), 15) == 2
            return
        await peer.send(INIT)
        await peer.until(lambda m: m.get("id") == 0)
        await peer.send({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        tools = {t["name"] for t in (await peer.until(lambda m: m.get("id") == 1))["result"]["tools"]}
        assert "echo" in tools and not any("__" in t for t in tools), "one backend: bare names"


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = (Path(f"/proc/{pid}") / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


async def test_sigterm_stops_the_gateway_and_its_backends(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"backends": {"mem": mcpl_backend("memory")}})
    async with spawn("-c", config) as peer:
        await peer.send(INIT)
        await peer.until(lambda m: m.get("id") == 0)
        await peer.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "stats"}})
        await peer.until(lambda m: m.get("id") == 1)  # the backend is up
        children = _children(peer.proc.pid)
        assert children, "the stdio backend is a child of the gateway"
        peer.proc.terminate()
        assert await asyncio.wait_for(peer.proc.wait(), 15) == 0
        for _ in range(100):
            if not [c for c in children if _alive(c)]:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError(f"backend processes {children} outlived the gateway")
