"""MCPC clients through a real gateway process, to real MCPC peers (issue 13).

One gateway (``run_gateway``) fronts five stdio backends: the ``mcpc`` library's own server
(``lib``; ``plumb`` is the same server with ``--show-plumbing``, which lists its handshake tool and
``mcpc_params`` as a careless server would), our older-wire server at 0.2.4 (``old4``) and 0.2.2
(``old2``), and the plain conformance fixture (``plain``: the gateway runs its calls as tasks).

Clients, every one an MCPC client that did the handshake on the gateway:

- the library's client (tests/mcpc_peers/client.py, under the library's own python) through
  ``switchboard stdio -c CONFIG`` (the same config file, its own gateway process) and through
  HTTP+SSE (``/sse`` of the running gateway);
- small raw clients over WebSocket (``/mcp/ws``) and over Streamable HTTP with a GET stream.

What every client must see: the gateway as MCPC provider ``switchboard``; ``created`` and each
callback under the client's OWN session id and task id and the tool's federated name; never an id
of the gateway's (``sb-session-...``, ``sb-task-...``); a backend's ``server_event`` under the
client's own session id; ordinary tools unchanged; no handshake tool and no MCPC plumbing
(``mcpc_params``, ``_metadata``) in any tools/list.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp.client import Client
from websockets.asyncio.client import ClientConnection, connect

from tests.support import (
    JSON_HEADERS,
    LEGACY_VERSION,
    PROJECT_ROOT,
    RunningGateway,
    fixture_stdio_backend,
    initialize_params,
    run_gateway,
)

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
]

PEERS = PROJECT_ROOT / "tests" / "mcpc_peers"
CALLBACK_ID = "MCPC_CALLBACK"
GATEWAY_IDS = ("sb-session-", "sb-task-")  # the prefixes of the ids the gateway gives backends
STEP_S = 10.0  # bound on every single wait
HANDSHAKE_REPLY = {"mcpc_enabled": True, "mcpc_version": "0.2.6", "mcpc_provider": "switchboard"}
PROGRESS_UPDATES = [
    {"progress": 0.0, "total": 100.0, "message": "Completed step 1 of 3"},
    {"progress": 50.0, "total": 100.0, "message": "Completed step 2 of 3"},
    {"progress": 100.0, "total": 100.0, "message": "Completed step 3 of 3"},
]
# (updates, final event, final result) each task tool's run must show the client, by tool.
Expected = tuple[list[Any], str, Any]
SLOW2: Expected = ([{"step": 1, "of": 2}, {"step": 2, "of": 2}], "complete", {"steps": 2})
FAILS: Expected = (["about to fail"], "failed", "boom")
PLAIN_PROGRESS: Expected = (PROGRESS_UPDATES, "complete", "Tool with progress executed successfully")
PLAIN_ERROR: Expected = ([], "failed", "This tool intentionally returns an error for testing")


def backends(mcpc_python: Path) -> dict[str, Any]:
    def library(*args: str) -> dict[str, Any]:
        return {"transport": "stdio", "command": str(mcpc_python), "args": [str(PEERS / "server.py"), *args]}

    def old(version: str) -> dict[str, Any]:
        args = [str(PEERS / "old_server.py"), "--version", version]
        return {"transport": "stdio", "command": sys.executable, "args": args}

    configs = {
        "lib": library(),
        "plumb": library("--show-plumbing", "--name", "plumb"),
        "old4": old("0.2.4"),
        "old2": old("0.2.2"),
        "plain": fixture_stdio_backend(),
    }
    return {name: {**config, "required": True} for name, config in configs.items()}


@pytest.fixture(scope="module")
def gateway(mcpc_python: Path) -> Iterator[RunningGateway]:
    with run_gateway({"backends": backends(mcpc_python)}) as gw:
        yield gw


# ---- the library's client ----------------------------------------------------------------------


def run_library_client(mcpc_python: Path, *args: str, timeout_s: float = 40.0) -> tuple[list[dict[str, Any]], str]:
    """(JSON lines, raw stdout) of one run of tests/mcpc_peers/client.py."""
    proc = subprocess.run(
        [str(mcpc_python), str(PEERS / "client.py"), *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        stdin=subprocess.DEVNULL,
        cwd=PROJECT_ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    assert lines and lines[-1] == {"kind": "done"}, proc.stdout + proc.stderr[-3000:]
    return lines, proc.stdout


def calls(*pairs: tuple[str, dict[str, Any]]) -> list[str]:
    return [arg for tool, arguments in pairs for arg in ("--call", tool, json.dumps(arguments))]


def by_call(lines: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per tool called: the client's task id, its result and the MCPC messages of its task."""
    out: dict[str, dict[str, Any]] = {}
    for line in lines:
        if line["kind"] == "call":
            params = line["arguments"].get("mcpc_params") or {}
            out[line["tool"]] = {"task_id": params.get("task_id"), "result": None, "messages": []}
        elif line["kind"] == "result":
            out[line["tool"]]["result"] = line["result"]
    for line in lines:
        if line["kind"] == "mcpc":
            message = line["message"]
            for seen in out.values():
                if message["task_id"] == seen["task_id"]:
                    seen["messages"].append(message)
    return out


def assert_task(seen: dict[str, Any], tool: str, session: str, expected: Expected) -> None:
    """The run of one task as its MCPC client saw it: client ids, federated name, exact results."""
    updates, final_event, final_result = expected
    messages = seen["messages"]
    assert seen["task_id"], "the client named its task"
    for message in messages:
        assert message["type"] == "task" and message["protocol"] == "mcpc"
        assert (message["session_id"], message["task_id"], message["tool_name"]) == (session, seen["task_id"], tool)
    events = [m["event"] for m in messages]
    # The library server may write an update before the ``created`` result of its call (server.py).
    assert events.count("created") == 1, events
    assert [m["result"] for m in messages if m["event"] == "update"] == updates
    assert events[-1] == final_event and (final_event, final_result) == (messages[-1]["event"], messages[-1]["result"])
    assert len(events) == len(updates) + 2, events
    (block,) = seen["result"]["content"]
    assert seen["result"]["isError"] is False
    created = json.loads(block["text"])
    assert created == next(m for m in messages if m["event"] == "created")


def assert_no_gateway_ids(text: str) -> None:
    for prefix in GATEWAY_IDS:
        assert prefix not in text, f"the client saw an id of the gateway's ({prefix}...)"


def library_flow(lines: list[dict[str, Any]], stdout: str, session: str, tasks: dict[str, Any]) -> None:
    assert lines[0] == {"kind": "handshake", "supported": True, "version": "0.2.6"}
    assert not [line for line in lines if line["kind"] in ("timeout", "error")], lines
    seen = by_call(lines)
    for tool, expected in tasks.items():
        assert_task(seen[tool], tool, session, expected)
    assert_no_gateway_ids(stdout)
    # The first call (an emit_event) made the backend send a server event: the client's own session id.
    events = [line["message"] for line in lines if line["kind"] == "mcpc" and line["message"]["type"] == "server_event"]
    assert events == [{**SERVER_EVENT, "session_id": session}]


EMIT_EVENT = {"event": "hello", "result": {"a": [1, "é"]}}
SERVER_EVENT = {
    "type": "server_event",
    "event": "hello",
    "session_id": None,
    "task_id": None,
    "tool_name": None,
    "result": {"a": [1, "é"]},
    "protocol": "mcpc",
}


@pytest.mark.timeout(600)  # the first test here may build .cache/peers/mcpc (mcpc_python) on a clean machine
async def test_library_client_over_stdio_door(gateway: RunningGateway, mcpc_python: Path) -> None:
    tasks: dict[str, Expected] = {
        "lib__slow_task": SLOW2,
        "old4__slow_task": SLOW2,
        "old2__slow_task": SLOW2,
        "plain__test_tool_with_progress": PLAIN_PROGRESS,
        "lib__fails": FAILS,
        "old4__fails": FAILS,
        "old2__fails": FAILS,
        "plain__test_error_handling": PLAIN_ERROR,
    }
    slow: dict[str, Any] = {"steps": 2, "delay_s": 0.05}
    args: list[tuple[str, dict[str, Any]]] = [("lib__emit_event", EMIT_EVENT)]
    args += [(tool, slow if tool.endswith("slow_task") else {}) for tool in tasks]
    args += [("lib__sync_echo", {"text": "hi"}), ("old2__sync_echo", {"text": "yo"})]
    args += [("_mcpc_init", {"mcpc_info": {"mcpc_version": "0.2.6", "mcpc_provider": "peer"}})]
    args += [("_is_mcpc_enabled", {"mcpc_info": {"mcpc_version": "0.2.4", "mcpc_provider": "peer"}})]
    door = ["--stdio", sys.executable, "-m", "gateway", "stdio", "-c", str(gateway.config_path)]
    lines, stdout = await asyncio.to_thread(
        run_library_client, mcpc_python, *door, "--list", "--session", "stdio-s1", *calls(*args)
    )
    library_flow(lines, stdout, "stdio-s1", tasks)

    results = {line["tool"]: line["result"] for line in lines if line["kind"] == "result"}
    assert results["lib__sync_echo"] == {"content": [{"type": "text", "text": "hi"}], "isError": False}
    assert results["old2__sync_echo"] == {"content": [{"type": "text", "text": "yo"}], "isError": False}
    # The gateway is the client's MCPC server: it answers the handshake itself, in the client's version.
    assert json.loads(results["_mcpc_init"]["content"][0]["text"]) == HANDSHAKE_REPLY
    older = json.loads(results["_is_mcpc_enabled"]["content"][0]["text"])
    assert older == {**HANDSHAKE_REPLY, "mcpc_version": "0.2.4"}

    (listed,) = [line["tools"] for line in lines if line["kind"] == "tools"]
    for backend in ("lib", "plumb", "old4", "old2"):
        assert {f"{backend}__{t}" for t in ("slow_task", "fails", "sync_echo", "emit_event")} <= set(listed)
    assert "plain__test_tool_with_progress" in listed
    assert not [name for name in listed if "mcpc" in name], listed


async def test_library_client_over_sse(gateway: RunningGateway, mcpc_python: Path) -> None:
    tasks: dict[str, Expected] = {
        "lib__slow_task": SLOW2,
        "old2__slow_task": SLOW2,
        "plain__test_tool_with_progress": PLAIN_PROGRESS,
        "old4__fails": FAILS,
    }
    args: list[tuple[str, dict[str, Any]]] = [("old4__emit_event", EMIT_EVENT)]
    args += [(tool, {"steps": 2, "delay_s": 0.05} if tool.endswith("slow_task") else {}) for tool in tasks]
    args.append(("plumb__sync_echo", {"text": "sse"}))
    lines, stdout = await asyncio.to_thread(
        run_library_client, mcpc_python, "--sse", f"{gateway.url}/sse", "--session", "sse-s1", *calls(*args)
    )
    library_flow(lines, stdout, "sse-s1", tasks)
    results = {line["tool"]: line["result"] for line in lines if line["kind"] == "result"}
    assert results["plumb__sync_echo"] == {"content": [{"type": "text", "text": "sse"}], "isError": False}


async def test_tools_list_hides_the_plumbing(gateway: RunningGateway) -> None:
    async with Client(gateway.mcp, mode="legacy", read_timeout_seconds=STEP_S) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    for backend in ("lib", "plumb", "old4", "old2"):
        names = {name for name in tools if name.startswith(f"{backend}__")}
        assert names == {f"{backend}__{t}" for t in ("slow_task", "fails", "sync_echo", "emit_event")} | (
            {f"{backend}__hang", f"{backend}__crash"} if backend.startswith("old") else set()
        )
        for name in names:
            schema = tools[name].input_schema
            text = json.dumps(schema)
            assert "mcpc_params" not in text and "_metadata" not in text, (name, schema)
    # The careless server's required mcpc_params is gone from ``required`` too, the rest is kept.
    assert tools["plumb__sync_echo"].input_schema.get("required") in (None, [])
    assert tools["plumb__sync_echo"].input_schema["properties"] == {"text": {"type": "string"}}
    assert tools["old2__slow_task"].input_schema["properties"] == {
        "steps": {"type": "integer"},
        "delay_s": {"type": "number"},
    }


# ---- raw clients: WebSocket and Streamable HTTP -------------------------------------------------


def handshake_call(rpc_id: int, provider: str) -> dict[str, Any]:
    arguments = {"mcpc_info": {"mcpc_version": "0.2.6", "mcpc_provider": provider}}
    return {
        "jsonrpc": "2.0",
        "id": rpc_id,
        "method": "tools/call",
        "params": {"name": "_mcpc_init", "arguments": arguments},
    }


def tool_call(rpc_id: int, tool: str, arguments: dict[str, Any], session: str, task: str) -> dict[str, Any]:
    """A tools/call with the 0.2.6 metadata (``mcpc_params``) naming the client's own ids."""
    arguments = {**arguments, "mcpc_params": {"session_id": session, "task_id": task}}
    return {"jsonrpc": "2.0", "id": rpc_id, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}


def callback_message(frame: dict[str, Any]) -> dict[str, Any] | None:
    """The MCPC message of a callback frame (an unsolicited response with the id MCPC_CALLBACK)."""
    if frame.get("id") != CALLBACK_ID or "result" not in frame:
        return None
    (block,) = frame["result"]["content"]
    message: dict[str, Any] = json.loads(block["text"])
    return message


def handshake_text(response: dict[str, Any]) -> dict[str, Any]:
    (block,) = response["result"]["content"]
    reply: dict[str, Any] = json.loads(block["text"])
    return reply


class McpcWs:
    """An MCPC client over the WebSocket door, raw frames; keeps every frame it reads."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.frames: list[dict[str, Any]] = []
        self.raw: list[str] = []

    async def send(self, message: dict[str, Any]) -> None:
        await self.ws.send(json.dumps(message))

    async def until(self, done: Any, timeout: float = STEP_S) -> dict[str, Any]:
        """The first frame (already read or next) for which ``done(frame)`` holds."""
        for old in self.frames:
            if done(old):
                return old
        async with asyncio.timeout(timeout):
            while True:
                text = await self.ws.recv()
                assert isinstance(text, str)
                self.raw.append(text)
                frame: dict[str, Any] = json.loads(text)
                self.frames.append(frame)
                if done(frame):
                    return frame

    async def response(self, rpc_id: Any) -> dict[str, Any]:
        return await self.until(lambda f: f.get("id") == rpc_id and "method" not in f)

    async def final(self, task: str) -> dict[str, Any]:
        def is_final(frame: dict[str, Any]) -> bool:
            message = callback_message(frame)
            return message is not None and message["task_id"] == task and message["event"] in ("complete", "failed")

        return await self.until(is_final)

    def messages(self, task: str) -> list[dict[str, Any]]:
        found = [callback_message(f) for f in self.frames]
        return [m for m in found if m is not None and m.get("task_id") == task]

    async def initialize(self, mcpc_provider: str | None = None) -> None:
        await self.send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": initialize_params(client="ws")})
        assert (await self.response(0))["result"]["protocolVersion"] == LEGACY_VERSION
        await self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        if mcpc_provider is not None:
            await self.send(handshake_call(1, mcpc_provider))
            assert handshake_text(await self.response(1)) == HANDSHAKE_REPLY


@contextlib.asynccontextmanager
async def ws_client(gw: RunningGateway, mcpc_provider: str | None = "raw-ws") -> AsyncIterator[McpcWs]:
    """A raw client on the WebSocket door, initialized, and an MCPC client unless ``mcpc_provider`` is None."""
    async with connect(gw.ws(), subprotocols=["mcp"], open_timeout=STEP_S, close_timeout=2) as ws:  # type: ignore[list-item]
        client = McpcWs(ws)
        await client.initialize(mcpc_provider)
        yield client


def assert_callbacks(messages: list[dict[str, Any]], session: str, task: str, tool: str, expected: Expected) -> None:
    """The callbacks of one task: the client's ids and tool name, and exactly the expected run
    (``created`` came in the call's result, not as a callback)."""
    updates, final_event, final_result = expected
    for message in messages:
        assert (message["session_id"], message["task_id"], message["tool_name"]) == (session, task, tool)
        assert message["type"] == "task" and message["protocol"] == "mcpc"
    assert [m["result"] for m in messages if m["event"] == "update"] == updates
    assert [m["event"] for m in messages] == ["update"] * len(updates) + [final_event]
    assert messages[-1]["result"] == final_result


def assert_created(response: dict[str, Any], session: str, task: str, tool: str) -> None:
    assert response["result"].get("isError") in (None, False)
    (block,) = response["result"]["content"]
    created = json.loads(block["text"])
    assert (created["event"], created["session_id"], created["task_id"], created["tool_name"]) == (
        "created",
        session,
        task,
        tool,
    )


async def test_raw_mcpc_client_over_websocket(gateway: RunningGateway) -> None:
    async with ws_client(gateway) as client:
        runs: dict[str, tuple[dict[str, Any], Expected]] = {
            "lib__slow_task": ({"steps": 2, "delay_s": 0.05}, SLOW2),
            "old2__slow_task": ({"steps": 2, "delay_s": 0.02}, SLOW2),
            "plain__test_tool_with_progress": ({}, PLAIN_PROGRESS),
            "lib__fails": ({}, FAILS),
        }
        # All at once on the one socket: each task's callbacks keep to their own ids.
        for rpc_id, (tool, (arguments, _)) in enumerate(runs.items(), start=10):
            await client.send(tool_call(rpc_id, tool, arguments, "ws-s1", f"ws-t{rpc_id}"))
        for rpc_id, (tool, (_, expected)) in enumerate(runs.items(), start=10):
            assert_created(await client.response(rpc_id), "ws-s1", f"ws-t{rpc_id}", tool)
            await client.final(f"ws-t{rpc_id}")
            assert_callbacks(client.messages(f"ws-t{rpc_id}"), "ws-s1", f"ws-t{rpc_id}", tool, expected)

        await client.send(tool_call(20, "old4__sync_echo", {"text": "plain"}, "ws-s1", "ws-echo"))
        echoed = await client.response(20)
        assert echoed["result"]["content"] == [{"type": "text", "text": "plain"}]
        assert not echoed["result"].get("isError")
    for text in client.raw:
        assert_no_gateway_ids(text)


class GetStream:
    """The standalone GET SSE stream of a Streamable HTTP session: ``data:`` events into a queue."""

    def __init__(self) -> None:
        self.events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.raw: list[str] = []
        self.opened = asyncio.Event()

    async def run(self, http: httpx.AsyncClient, url: str, headers: dict[str, str]) -> None:
        get_headers = {**headers, "accept": "text/event-stream"}
        async with http.stream("GET", url, headers=get_headers, timeout=httpx.Timeout(STEP_S, read=None)) as response:
            assert response.status_code == 200
            self.opened.set()
            async for line in response.aiter_lines():
                if line.startswith("data:") and line[5:].strip():  # not the empty priming event
                    self.raw.append(line)
                    await self.events.put(json.loads(line[5:]))

    async def final(self, task: str, into: list[dict[str, Any]]) -> None:
        """Collects the callbacks of ``task`` into ``into`` until its last one."""
        async with asyncio.timeout(STEP_S):
            while True:
                message = callback_message(await self.events.get())
                if message is not None and message["task_id"] == task:
                    into.append(message)
                    if message["event"] in ("complete", "failed"):
                        return


def post_answer(response: httpx.Response, rpc_id: Any) -> dict[str, Any]:
    """The JSON-RPC answer to ``rpc_id`` in a POST's response (plain JSON or an SSE stream)."""
    if response.headers["content-type"].startswith("application/json"):
        answer: dict[str, Any] = response.json()
        return answer
    for line in response.text.splitlines():
        if line.startswith("data:") and line[5:].strip():
            message: dict[str, Any] = json.loads(line[5:])
            if message.get("id") == rpc_id and "method" not in message:
                return message
    raise AssertionError(f"no answer to {rpc_id}: {response.text}")


async def open_http_session(http: httpx.AsyncClient, url: str) -> dict[str, str]:
    """initialize + notifications/initialized on the Streamable HTTP door; the headers of the session."""
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": initialize_params(client="http")}
    opened = await http.post(url, headers=JSON_HEADERS, json=init)
    assert opened.status_code == 200, opened.text
    headers = {**JSON_HEADERS, "mcp-session-id": opened.headers["mcp-session-id"]}
    headers["mcp-protocol-version"] = LEGACY_VERSION
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert (await http.post(url, headers=headers, json=note)).status_code == 202
    return headers


async def test_raw_mcpc_client_over_streamable_http(gateway: RunningGateway) -> None:
    async with httpx.AsyncClient(timeout=STEP_S) as http:
        headers = await open_http_session(http, gateway.mcp)
        stream = GetStream()
        reader = asyncio.create_task(stream.run(http, gateway.mcp, headers))
        try:
            async with asyncio.timeout(STEP_S):
                await stream.opened.wait()
            shaken = await http.post(gateway.mcp, headers=headers, json=handshake_call(1, "raw-http"))
            assert handshake_text(post_answer(shaken, 1)) == HANDSHAKE_REPLY

            runs: dict[str, tuple[dict[str, Any], Expected]] = {
                "lib__slow_task": ({"steps": 2, "delay_s": 0.05}, SLOW2),
                "old4__slow_task": ({"steps": 2, "delay_s": 0.02}, SLOW2),
                "plain__test_error_handling": ({}, PLAIN_ERROR),
            }
            for rpc_id, (tool, (arguments, expected)) in enumerate(runs.items(), start=2):
                task = f"http-t{rpc_id}"
                answer = await http.post(
                    gateway.mcp, headers=headers, json=tool_call(rpc_id, tool, arguments, "h-s", task)
                )
                assert answer.status_code == 200, answer.text
                assert_no_gateway_ids(answer.text)
                assert_created(post_answer(answer, rpc_id), "h-s", task, tool)
                seen: list[dict[str, Any]] = []
                await stream.final(task, seen)
                assert_callbacks(seen, "h-s", task, tool, expected)
        finally:
            reader.cancel()
            with contextlib.suppress(BaseException):
                await reader
        for line in stream.raw:
            assert_no_gateway_ids(line)
        assert (await http.delete(gateway.mcp, headers=headers)).status_code == 200
