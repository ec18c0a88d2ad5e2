"""Plain clients of MCPC backends through a real gateway process; server events; the gateway's bounds
on tasks (issue 13).

One gateway fronts three stdio backends: the ``mcpc`` library's own server (``lib``), and our
older-wire server at 0.2.4 twice: ``old`` (``timeout_s: 1.5``, so a task that never ends fails in
1.5 s) and ``victim`` (for ``crash``: the process exits while its task runs, the gateway restarts
it). ``mcpc.max_tasks_per_session`` is 1, so every session here runs one task at a time. The raw
MCPC clients (WebSocket, Streamable HTTP) are the ones of tests/e2e/test_mcpc_gateway.py.

- The official SDK 2.x client (no MCPC) in the legacy era (Streamable HTTP and HTTP+SSE) and at
  2026-07-28: a task's updates arrive as progress 1..n whose message is the update's result as
  text, the final text is the ``complete`` message's result, a ``failed`` task is an ``isError``
  result; the legacy client also gets each update as a ``notifications/message``.
- A ``server_event`` reaches an MCPC client (raw WebSocket) as a callback under its own session id
  and a plain client connected at the same time as a ``notifications/message``, whoever called.
- Bounds: a task that never ends (``failed`` at the backend's ``timeout_s``), a backend that dies
  (``failed``: it went away; served again after the restart), a second task on a session at its
  limit (-32094, for plain and MCPC clients), a legacy client's cancel of a held call (-32800 at
  once, over WebSocket and Streamable HTTP; the SDK's own give-up frees the slot), and the
  ``switchboard_mcpc_tasks_*`` counters in /metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import mcp_types as types
import pytest
from mcp.client import Client
from mcp.client.sse import sse_client
from mcp.shared.exceptions import MCPError

from tests.e2e.test_mcpc_gateway import (
    McpcWs,
    callback_message,
    open_http_session,
    post_answer,
    tool_call,
    ws_client,
)
from tests.support import PROJECT_ROOT, RunningGateway, run_gateway

pytestmark = [
    pytest.mark.timeout(30),
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
]

PEERS = PROJECT_ROOT / "tests" / "mcpc_peers"
STEP_S = 10.0
TASK_TIMEOUT_S = 1.5
REQUEST_CANCELLED = -32800
TASK_LIMIT = -32094


@pytest.fixture(scope="module")
def gateway(mcpc_python: Path) -> Iterator[RunningGateway]:
    def old(name: str, **extra: Any) -> dict[str, Any]:
        args = [str(PEERS / "old_server.py"), "--version", "0.2.4", "--name", name]
        return {"transport": "stdio", "command": sys.executable, "args": args, "required": True, **extra}

    library = {"transport": "stdio", "command": str(mcpc_python), "args": [str(PEERS / "server.py")], "required": True}
    config = {
        "backends": {
            "lib": library,
            "old": old("old", timeout_s=TASK_TIMEOUT_S),
            "victim": old("victim", restart={"initial_backoff_s": 0.1}),
        },
        "mcpc": {"max_tasks_per_session": 1},
    }
    with run_gateway(config) as gw:
        yield gw


class Seen:
    """What an SDK client is told besides results: log lines and progress."""

    def __init__(self) -> None:
        self.logs: list[types.LoggingMessageNotificationParams] = []
        self.progress: list[tuple[float, float | None, str | None]] = []
        self._logged = asyncio.Event()

    async def logging(self, params: types.LoggingMessageNotificationParams) -> None:
        self.logs.append(params)
        self._logged.set()

    async def log_with(self, data: Any, timeout: float = STEP_S) -> types.LoggingMessageNotificationParams:
        """The first log line whose data is ``data``, once it came (bounded)."""
        async with asyncio.timeout(timeout):
            while not (found := [p for p in self.logs if p.data == data]):
                self._logged.clear()
                await self._logged.wait()
        return found[0]

    async def on_progress(self, progress: float, total: float | None, message: str | None) -> None:
        self.progress.append((progress, total, message))

    def data(self, mcpc_kind: str) -> list[Any]:
        return [p.data for p in self.logs if isinstance(p.data, dict) and p.data.get("mcpc") == mcpc_kind]


@contextlib.asynccontextmanager
async def sdk(gw: RunningGateway, seen: Seen, mode: str = "legacy", sse: bool = False) -> AsyncIterator[Client]:
    """The official SDK's client on Streamable HTTP (``/mcp``), or on legacy HTTP+SSE (``/sse``)."""
    server: Any = sse_client(f"{gw.url}/sse") if sse else gw.mcp
    async with Client(server, mode=mode, logging_callback=seen.logging, read_timeout_seconds=STEP_S) as client:
        yield client


def text_of(result: types.CallToolResult) -> str:
    (block,) = result.content
    assert isinstance(block, types.TextContent)
    return block.text


def step_texts(steps: int) -> list[str]:
    return [json.dumps({"step": i, "of": steps}, separators=(",", ":")) for i in range(1, steps + 1)]


# ---- the official SDK as a plain client --------------------------------------------------------


@pytest.mark.timeout(600)  # the first test here may build .cache/peers/mcpc (mcpc_python) on a clean machine
@pytest.mark.parametrize(("backend", "door"), [("lib", "mcp"), ("old", "mcp"), ("lib", "sse")])
async def test_legacy_sdk_client_gets_progress_logs_and_the_result(
    gateway: RunningGateway, backend: str, door: str
) -> None:
    seen = Seen()
    tool = f"{backend}__slow_task"
    async with sdk(gateway, seen, sse=door == "sse") as client:
        result = await client.call_tool(tool, {"steps": 3, "delay_s": 0.05}, progress_callback=seen.on_progress)
        assert not result.is_error and text_of(result) == '{"steps":3}'
        assert seen.progress == [(i, None, text) for i, text in enumerate(step_texts(3), start=1)]
        assert [(p.level, p.logger) for p in seen.logs] == [("info", backend)] * 3
        assert seen.data("task") == [
            {"mcpc": "task", "event": "update", "result": {"step": i, "of": 3}, "tool": tool} for i in (1, 2, 3)
        ]

        failed = await client.call_tool(f"{backend}__fails", {"delay_s": 0.01})
        assert failed.is_error and text_of(failed) == "boom"
        assert seen.data("task")[-1] == {
            "mcpc": "task",
            "event": "update",
            "result": "about to fail",
            "tool": f"{backend}__fails",
        }

        echoed = await client.call_tool(f"{backend}__sync_echo", {"text": "as is"})
        assert not echoed.is_error and text_of(echoed) == "as is"
    told = json.dumps([p.model_dump(mode="json") for p in seen.logs] + [seen.progress, result.model_dump(mode="json")])
    assert "sb-session-" not in told and "sb-task-" not in told


async def test_modern_sdk_client_gets_progress_and_the_result(gateway: RunningGateway) -> None:
    seen = Seen()
    async with sdk(gateway, seen, mode="2026-07-28") as client:
        assert client.protocol_version == "2026-07-28"
        result = await client.call_tool(
            "lib__slow_task", {"steps": 4, "delay_s": 0.03}, progress_callback=seen.on_progress
        )
        assert not result.is_error and text_of(result) == '{"steps":4}'
        assert seen.progress == [(i, None, text) for i, text in enumerate(step_texts(4), start=1)]

        failed = await client.call_tool("old__fails", {"delay_s": 0.01})
        assert failed.is_error and text_of(failed) == "boom"


# ---- server events -----------------------------------------------------------------------------


def server_event_callback(client: McpcWs, event: str) -> Any:
    def match(frame: dict[str, Any]) -> bool:
        message = callback_message(frame)
        return message is not None and message["type"] == "server_event" and message["event"] == event

    return client.until(match)


async def test_server_event_reaches_mcpc_and_plain_clients(gateway: RunningGateway) -> None:
    seen = Seen()
    async with sdk(gateway, seen) as plain, ws_client(gateway, "events") as mcpc:
        # The MCPC client's call names its session id; its server events carry it from then on.
        await mcpc.send(tool_call(5, "lib__emit_event", {"event": "ping", "result": {"n": 1}}, "ev-s", "ev-t"))
        answer = await mcpc.response(5)
        assert answer["result"]["content"] == [{"type": "text", "text": "sent"}]
        message = callback_message(await server_event_callback(mcpc, "ping"))
        assert message is not None
        assert {k: message[k] for k in ("type", "event", "session_id", "result", "protocol")} == {
            "type": "server_event",
            "event": "ping",
            "session_id": "ev-s",
            "result": {"n": 1},
            "protocol": "mcpc",
        }
        ping = {"mcpc": "server_event", "event": "ping", "result": {"n": 1}}
        line = await seen.log_with(ping)
        assert (line.level, line.logger) == ("info", "lib")

        # The other way round: the plain client's call, the MCPC client's callback under ITS id.
        sent = await plain.call_tool("lib__emit_event", {"event": "pong", "result": ["x"]})
        assert text_of(sent) == "sent"
        message = callback_message(await server_event_callback(mcpc, "pong"))
        assert message is not None and (message["session_id"], message["result"]) == ("ev-s", ["x"])
        pong = {"mcpc": "server_event", "event": "pong", "result": ["x"]}
        assert (await seen.log_with(pong)).logger == "lib"
    assert [p.data for p in seen.logs].count(ping) == 1, "each event reaches a session once"
    for text in mcpc.raw:
        assert "sb-session-" not in text and "sb-task-" not in text


# ---- bounds ------------------------------------------------------------------------------------


async def metrics(gw: RunningGateway) -> dict[str, float]:
    """The ``switchboard_mcpc_tasks_*`` samples of /metrics, by their text (name and labels)."""
    async with httpx.AsyncClient(timeout=STEP_S) as http:
        response = await http.get(f"{gw.url}/metrics")
    assert response.status_code == 200
    samples: dict[str, float] = {}
    for line in response.text.splitlines():
        found = re.fullmatch(r"(switchboard_mcpc_tasks_\w+\{[^}]*\}) (\S+)", line)
        if found:
            samples[found.group(1)] = float(found.group(2))
    return samples


def started(backend: str) -> str:
    return f'switchboard_mcpc_tasks_started_total{{backend="{backend}"}}'


def finished(backend: str, outcome: str) -> str:
    return f'switchboard_mcpc_tasks_finished_total{{backend="{backend}",outcome="{outcome}"}}'


def delta(before: dict[str, float], after: dict[str, float], key: str) -> float:
    return after.get(key, 0.0) - before.get(key, 0.0)


async def mcpc_task_end(gw: RunningGateway, tool: str, task: str) -> dict[str, Any]:
    """The last callback an MCPC client (raw WebSocket) gets for its task of ``tool``, after ``created``."""
    async with ws_client(gw, "bounds") as client:
        await client.send(tool_call(50, tool, {}, "bound-s", task))
        answer = await client.response(50)
        (block,) = answer["result"]["content"]
        assert json.loads(block["text"])["event"] == "created"
        message = callback_message(await client.final(task))
    assert message is not None
    return message


async def test_task_that_never_ends_fails_at_the_backend_timeout(gateway: RunningGateway) -> None:
    before = await metrics(gateway)

    async def plain() -> tuple[types.CallToolResult, float]:
        async with sdk(gateway, Seen()) as client:
            began = time.monotonic()
            result = await client.call_tool("old__hang", {})
            return result, time.monotonic() - began

    (result, took), ended = await asyncio.gather(plain(), mcpc_task_end(gateway, "old__hang", "hang-t"))
    reason = f"task of old__hang did not complete within {TASK_TIMEOUT_S:g}s"
    assert result.is_error and text_of(result) == reason
    assert TASK_TIMEOUT_S - 0.1 <= took < TASK_TIMEOUT_S + 3
    # An MCPC client gets the same end as a ``failed`` callback under its own ids.
    assert ended == {
        "type": "task",
        "event": "failed",
        "session_id": "bound-s",
        "task_id": "hang-t",
        "tool_name": "old__hang",
        "result": reason,
        "protocol": "mcpc",
    }
    after = await metrics(gateway)
    assert delta(before, after, started("old")) == 2
    assert delta(before, after, finished("old", "expired")) == 2


async def until_served(client: Client, tool: str, arguments: dict[str, Any]) -> types.CallToolResult:
    """The first answer of ``tool`` once its backend is back: until then a call is refused ("backend
    victim is unavailable")."""
    async with asyncio.timeout(STEP_S):
        while True:
            try:
                return await client.call_tool(tool, arguments)
            except MCPError as exc:
                assert "backend victim is unavailable" in exc.message
            await asyncio.sleep(0.1)


async def test_backend_that_dies_fails_its_task_and_comes_back(gateway: RunningGateway) -> None:
    before = await metrics(gateway)
    async with sdk(gateway, Seen()) as client:
        result = await client.call_tool("victim__crash", {})
        assert result.is_error
        assert text_of(result).startswith("backend victim went away while the task ran: "), text_of(result)

        # The gateway restarts it (and runs the handshake again): tasks work once more.
        again = await until_served(client, "victim__slow_task", {"steps": 1, "delay_s": 0.01})
        assert not again.is_error and text_of(again) == '{"steps":1}'

        # An MCPC client's task on a dying backend ends with a ``failed`` callback under its own ids.
        ended = await mcpc_task_end(gateway, "victim__crash", "crash-t")
        assert (ended["event"], ended["session_id"], ended["task_id"], ended["tool_name"]) == (
            "failed",
            "bound-s",
            "crash-t",
            "victim__crash",
        )
        assert ended["result"].startswith("backend victim went away while the task ran: ")
        assert "sb-" not in json.dumps(ended)
        echoed = await until_served(client, "victim__sync_echo", {"text": "back"})
        assert text_of(echoed) == "back"
    after = await metrics(gateway)
    assert delta(before, after, finished("victim", "lost")) == 2
    assert delta(before, after, finished("victim", "completed")) == 1


async def test_second_task_on_a_session_at_its_limit_is_refused(gateway: RunningGateway) -> None:
    async with ws_client(gateway, mcpc_provider=None) as client:  # a plain client: its calls are held
        await client.send(call_of(10, "lib__slow_task", {"steps": 2, "delay_s": 0.3}))
        await asyncio.sleep(0.2)
        await client.send(call_of(11, "old__slow_task", {"steps": 1, "delay_s": 0.01}))
        refused = await client.response(11)
        assert refused["error"]["code"] == TASK_LIMIT, refused
        first = await client.response(10)
        assert first["result"] == {"content": [{"type": "text", "text": '{"steps":2}'}], "isError": False}
        # The limit counts running tasks: with the first one ended, the next is allowed.
        await client.send(call_of(12, "old__slow_task", {"steps": 1, "delay_s": 0.01}))
        assert (await client.response(12))["result"]["content"][0]["text"] == '{"steps":1}'


async def test_mcpc_client_at_its_limit_is_refused_too(gateway: RunningGateway) -> None:
    async with ws_client(gateway, "limited") as client:
        await client.send(tool_call(30, "lib__slow_task", {"steps": 2, "delay_s": 0.2}, "lim-s", "lim-1"))
        assert (await client.response(30))["result"]["isError"] is False  # created
        await client.send(tool_call(31, "old__slow_task", {"steps": 1, "delay_s": 0.01}, "lim-s", "lim-2"))
        refused = await client.response(31)
        assert refused["error"]["code"] == TASK_LIMIT, refused
        final = callback_message(await client.final("lim-1"))
        assert final is not None and (final["event"], final["result"]) == ("complete", {"steps": 2})
        assert client.messages("lim-2") == []


def call_of(rpc_id: int, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rpc_id, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}


async def test_legacy_cancel_of_a_held_call_is_answered_at_once(gateway: RunningGateway) -> None:
    before = await metrics(gateway)
    async with ws_client(gateway, mcpc_provider=None) as client:
        await client.send(call_of(20, "lib__slow_task", {"steps": 1, "delay_s": 5}))
        await asyncio.sleep(0.3)
        began = time.monotonic()
        cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 20, "reason": "t"}}
        await client.send(cancel)
        answer = await client.response(20)
        assert time.monotonic() - began < 1.0
        assert answer["error"]["code"] == REQUEST_CANCELLED, answer
        # The task was let go: the session's one task slot is free again.
        await client.send(call_of(21, "lib__slow_task", {"steps": 1, "delay_s": 0.01}))
        assert (await client.response(21))["result"]["content"][0]["text"] == '{"steps":1}'
    after = await metrics(gateway)
    assert delta(before, after, started("lib")) == 2
    assert delta(before, after, finished("lib", "cancelled")) == 1
    assert delta(before, after, finished("lib", "completed")) == 1


async def test_legacy_cancel_over_streamable_http(gateway: RunningGateway) -> None:
    async with httpx.AsyncClient(timeout=STEP_S) as http:
        headers = await open_http_session(http, gateway.mcp)
        held = asyncio.create_task(
            http.post(gateway.mcp, headers=headers, json=call_of(40, "lib__slow_task", {"steps": 1, "delay_s": 5}))
        )
        await asyncio.sleep(0.3)
        began = time.monotonic()
        cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 40}}
        assert (await http.post(gateway.mcp, headers=headers, json=cancel)).status_code == 202
        async with asyncio.timeout(STEP_S):
            answer = post_answer(await held, 40)
        assert time.monotonic() - began < 1.0
        assert answer["error"]["code"] == REQUEST_CANCELLED, answer
        assert (await http.delete(gateway.mcp, headers=headers)).status_code == 200


async def test_sdk_client_that_gives_up_on_a_held_call_frees_its_slot(gateway: RunningGateway) -> None:
    async with sdk(gateway, Seen()) as client:
        with pytest.raises(MCPError):
            await client.call_tool("lib__slow_task", {"steps": 1, "delay_s": 5}, read_timeout_seconds=0.3)
        # The SDK sent notifications/cancelled: the task is let go, so the session (limit 1) may start another.
        result = await client.call_tool("lib__slow_task", {"steps": 1, "delay_s": 0.01})
        assert not result.is_error and text_of(result) == '{"steps":1}'
