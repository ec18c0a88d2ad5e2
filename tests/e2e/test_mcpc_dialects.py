"""MCPC toward the other dialects, end to end: a real gateway process with a real MCPC backend behind it
(tests/mcpc_peers/old_server.py, the 0.2.4 wire, raw JSON lines over stdio; one test also runs the
``mcpc`` 0.2.6 library's server) and, in front of it, clients that do not speak MCPC:

- an MCPL 0.4 host (tests/e2e/mcpl_host.py) sees the gateway-declared feature set ``mcpc`` of the
  backend, and once it enabled it (and the operator lets its principal) receives every task message
  and server event as ``push/event``, while its call is held to the task's end;
- an MCPx participant (tests/e2e/mcpx_client.py) calls the backend as a topic participant and gets
  progress and log lines as ``mcp/notification:*`` envelopes, then the task's end as the response;
- an MGP client that negotiated ``streaming`` gets the task's updates as ``mgp.stream.*`` and a final
  result marked ``_mgp.streamed``.

One gateway (two backends: prefixed names ``old__slow_task``, feature set ``old.mcpc``; principals
alice, bob, and carol whom the operator denies the set; an audit file) serves the module, a second
one the library's server; a backend's MCPC handshake runs after its connect, so each fixture waits
until a host is shown the set before any test runs.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from websockets.asyncio.client import connect
from websockets.typing import Subprotocol

from tests.e2e.mcpl_host import McplHost
from tests.e2e.mcpx_client import ADMIN, SECRET, Peer, tool_call
from tests.support import PROJECT_ROOT, RunningGateway, initialize_params, run_gateway

pytestmark = [pytest.mark.timeout(60)]

OLD_SERVER = PROJECT_ROOT / "tests" / "mcpc_peers" / "old_server.py"
LIB_SERVER = PROJECT_ROOT / "tests" / "mcpc_peers" / "server.py"
ROOM = "room"  # a configured MCPx topic with the MCPC backend as a participant
FEATURE_SET = "old.mcpc"  # the gateway-declared set of backend ``old`` as prefixed views show it
DECLARATION = {
    "description": "MCPC task messages and server events of this backend, pushed as events",
    "uses": ["pushEvents"],
}
CAPS = ["mcp/*", "chat"]
AUDIT_DIR = Path(tempfile.mkdtemp(prefix="switchboard-mcpc-dialects-"))
PROGRESS, MESSAGE = "notifications/progress", "notifications/message"
STREAM_PROGRESS, STREAM_CHUNK = "notifications/mgp.stream.progress", "notifications/mgp.stream.chunk"


def old_backend(name: str = "old") -> dict[str, Any]:
    """The older-wire MCPC server (0.2.4: handshake ``_is_mcpc_enabled``, ``_metadata``), any python."""
    return {
        "transport": "stdio",
        "command": sys.executable,
        "args": [str(OLD_SERVER), "--version", "0.2.4", "--name", name],
        "cwd": str(PROJECT_ROOT),
        "required": True,
        "timeout_s": 20,
    }


def config() -> dict[str, Any]:
    return {
        "backends": {"old": old_backend(), "demo": {"transport": "builtin", "required": True}},
        "auth": {"jwt": {"hs256_secret": SECRET}, "admin_token": ADMIN},
        "principals": {
            "alice": {"tokens": ["alice-token"], "capabilities": CAPS},
            "bob": {"tokens": ["bob-token"], "capabilities": CAPS},
            # The operator forbids carol's hosts the MCPC set of every backend (a bare name matches any).
            "carol": {"tokens": ["carol-token"], "capabilities": CAPS, "mcpl": {"feature_sets": {"deny": ["mcpc"]}}},
        },
        "mcpx": {"topics": {ROOM: {"participants": ["old"]}}},
        "audit": {"file": str(AUDIT_DIR / "old.jsonl")},
    }


async def wait_until_mcpc_known(gw: RunningGateway, name: str, token: str | None, timeout: float = 20) -> None:
    """Until a host is shown feature set ``name``: the backend's MCPC handshake (run after its connect)
    has answered."""
    deadline = time.monotonic() + timeout
    while True:
        async with McplHost.connect(gw.ws(), token=token) as host:
            if name in ((host.server_mcpl or {}).get("featureSets") or {}):
                return
        if time.monotonic() > deadline:
            raise TimeoutError(f"no feature set {name} within {timeout}s\n{gw.log()}")
        await asyncio.sleep(0.1)


@pytest.fixture(scope="module")
def gateway() -> Iterator[RunningGateway]:
    with run_gateway(config()) as gw:
        asyncio.run(wait_until_mcpc_known(gw, FEATURE_SET, "alice-token"))
        yield gw


def host(gw: RunningGateway, token: str, server: str | None = None) -> Any:
    return McplHost.connect(gw.ws(f"/servers/{server}/mcp/ws" if server else "/mcp/ws"), token=token)


async def enable(gw: RunningGateway, host: McplHost, *names: str) -> None:
    await update_sets(gw, host, list(names), [])


async def update_sets(gw: RunningGateway, host: McplHost, enabled: list[str], disabled: list[str]) -> None:
    """featureSets/update, then wait for the gateway's audit record of it: the WebSocket door handles
    each frame in a task of its own, so a later request may otherwise overtake the update."""

    def mine(record: dict[str, Any]) -> bool:
        return record.get("action") == "mcpl/featureSets/update" and record.get("enabled") == enabled

    before = len(audit_lines(gw, mine))
    await host.notify("featureSets/update", {"enabled": enabled, "disabled": disabled})
    deadline = time.monotonic() + 5
    while len(audit_lines(gw, mine)) <= before:
        assert time.monotonic() < deadline, "the gateway never recorded the featureSets/update"
        await asyncio.sleep(0.02)


def audit_lines(gw: RunningGateway, match: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
    """The records of ``gw``'s audit file (its config's ``audit.file``) that ``match`` accepts."""
    path = Path(yaml.safe_load(gw.config_path.read_text())["audit"]["file"])
    lines = path.read_text().splitlines() if path.exists() else []
    return [r for r in map(json.loads, lines) if match(r)]


async def audit_records(
    gw: RunningGateway, match: Callable[[dict[str, Any]], bool], count: int = 1, timeout: float = 5
) -> list[dict[str, Any]]:
    """The audit records ``match`` accepts, once there are ``count`` (the file is written in the background)."""
    deadline = time.monotonic() + timeout
    while True:
        found = audit_lines(gw, match)
        if len(found) >= count or time.monotonic() > deadline:
            return found
        await asyncio.sleep(0.05)


async def running_tasks(gw: RunningGateway, backend: str = "old") -> float:
    """``switchboard_mcpc_tasks_running`` of ``backend`` from the gateway's /metrics."""
    async with httpx.AsyncClient(timeout=5) as http:
        text = (await http.get(f"{gw.url}/metrics", headers={"authorization": f"Bearer {ADMIN}"})).text
    for line in text.splitlines():
        if line.startswith("switchboard_mcpc_tasks_running{") and f'backend="{backend}"' in line:
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no switchboard_mcpc_tasks_running for {backend} in /metrics")


def text_result(text: str, is_error: bool = False) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": is_error}


def pushes(host: McplHost) -> list[dict[str, Any]]:
    return [r for r in host.requests if r["method"] == "push/event"]


async def wait_pushes(host: McplHost, count: int, timeout: float = 10) -> list[dict[str, Any]]:
    deadline = asyncio.get_running_loop().time() + timeout
    while len(pushes(host)) < count:
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{len(pushes(host))} push/event of {count} within {timeout}s: {pushes(host)}")
        await asyncio.sleep(0.02)
    return pushes(host)


def mcpc_of(push: dict[str, Any]) -> dict[str, Any]:
    """The MCPC message a push carries, after checking that its text block and ``mcpc`` agree."""
    payload = push["params"]["payload"]
    assert set(payload) == {"content", "mcpc"}
    assert len(payload["content"]) == 1 and payload["content"][0]["type"] == "text"
    assert json.loads(payload["content"][0]["text"]) == payload["mcpc"]
    message: dict[str, Any] = payload["mcpc"]
    return message


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def task_message(event: str, task_id: str, tool: str, result: Any) -> dict[str, Any]:
    return {
        "type": "task",
        "event": event,
        "session_id": None,
        "task_id": task_id,
        "tool_name": tool,
        "result": result,
        "protocol": "mcpc",
    }


# ================================================================= MCPL hosts


async def test_hosts_are_shown_the_gateway_declared_mcpc_set(gateway: RunningGateway) -> None:
    async with host(gateway, "alice-token") as federated:
        sets = federated.server_mcpl["featureSets"]
        assert sets[FEATURE_SET] == DECLARATION
        assert [name for name in sets if name.endswith(".mcpc")] == [FEATURE_SET], "demo speaks no MCPC"
    async with host(gateway, "alice-token", server="old") as single:
        assert single.server_mcpl["featureSets"] == {"mcpc": DECLARATION}, "one backend: the bare name"


async def test_an_enabled_host_gets_the_task_messages_as_pushes_and_the_end_as_result(gateway: RunningGateway) -> None:
    async with host(gateway, "alice-token") as alice:
        await enable(gateway, alice, FEATURE_SET)
        params = {"name": "old__slow_task", "arguments": {"steps": 3}, "_meta": {"progressToken": "p"}}
        response = await alice.request("tools/call", params, 20)
        assert response["result"] == text_result('{"steps":3}'), "the held call ends with complete's result"
        got = await wait_pushes(alice, 5)
        await asyncio.sleep(0.3)
        assert len(pushes(alice)) == 5, "one push per message"
        progress = [n["params"] for n in alice.notifications if n["method"] == PROGRESS]
    assert progress == [
        {"progressToken": "p", "progress": i, "message": json.dumps({"step": i, "of": 3}, separators=(",", ":"))}
        for i in (1, 2, 3)
    ], "a host is a plain client too: its token gets MCP progress"
    for push in got:
        params = push["params"]
        assert set(params) == {"featureSet", "eventId", "timestamp", "payload"}
        assert params["featureSet"] == FEATURE_SET
        assert params["eventId"].startswith("mcpc-") and params["timestamp"].endswith("Z")
    assert len({p["params"]["eventId"] for p in got}) == len(got), "every push has its own event id"
    messages = [mcpc_of(p) for p in got]
    task_id = messages[0]["task_id"]
    assert isinstance(task_id, str) and task_id.startswith("sb-task-")
    expected = [
        task_message("created", task_id, "old__slow_task", "slow_task started"),  # the backend's text
        *(task_message("update", task_id, "old__slow_task", {"step": i, "of": 3}) for i in (1, 2, 3)),
        task_message("complete", task_id, "old__slow_task", {"steps": 3}),
    ]
    # Each push is sent by a task of its own: compare them as a multiset (they came in order in every run).
    assert sorted(map(canonical, messages)) == sorted(map(canonical, expected))
    assert all("sb-session-" not in p["params"]["payload"]["content"][0]["text"] for p in got)
    started, ended = await audit_records(gateway, lambda r: r.get("task") == task_id, count=2)
    common = {"principal": "alice", "dialect": "mcpc", "backend": "old", "tool": "old__slow_task", "task": task_id}
    assert started == {"ts": started["ts"], "outcome": "allowed", "action": "mcpc/task:created", **common}
    assert ended == {
        "ts": ended["ts"],
        "outcome": "allowed",
        "action": "mcpc/task:complete",
        "result": "completed",
        **common,
    }


async def test_a_failed_task_is_pushed_and_answers_is_error(gateway: RunningGateway) -> None:
    async with host(gateway, "alice-token") as alice:
        await enable(gateway, alice, FEATURE_SET)
        response = await alice.request("tools/call", {"name": "old__fails", "arguments": {}}, 20)
        assert response["result"] == text_result("boom", is_error=True)
        got = await wait_pushes(alice, 3)
        await asyncio.sleep(0.3)
        assert len(pushes(alice)) == 3
    messages = [mcpc_of(p) for p in got]
    task_id = messages[0]["task_id"]
    expected = [
        task_message("created", task_id, "old__fails", "fails started"),
        task_message("update", task_id, "old__fails", "about to fail"),
        task_message("failed", task_id, "old__fails", "boom"),
    ]
    assert sorted(map(canonical, messages)) == sorted(map(canonical, expected))


async def test_a_host_that_did_not_enable_the_set_gets_no_push(gateway: RunningGateway) -> None:
    async with host(gateway, "bob-token") as bob:
        notes_before = len(bob.notifications)
        response = await bob.request("tools/call", {"name": "old__slow_task", "arguments": {"steps": 2}}, 20)
        assert response["result"] == text_result('{"steps":2}')
        await asyncio.sleep(0.5)
        assert pushes(bob) == []
        # It is still a plain client: the updates reach it as log lines.
        logs = [n["params"] for n in bob.notifications[notes_before:] if n["method"] == MESSAGE]
        assert [log["data"] for log in logs] == [
            {"mcpc": "task", "event": "update", "result": {"step": i, "of": 2}, "tool": "old__slow_task"}
            for i in (1, 2)
        ]
        assert {(log["level"], log["logger"]) for log in logs} == {("info", "old")}


async def test_a_server_event_reaches_the_enabled_host_as_push_only(gateway: RunningGateway) -> None:
    async with host(gateway, "alice-token") as alice, host(gateway, "bob-token") as bob:
        await enable(gateway, alice, FEATURE_SET)
        sent = await alice.request(
            "tools/call", {"name": "old__emit_event", "arguments": {"event": "alert", "result": {"x": 1}}}, 20
        )
        assert sent["result"] == text_result("sent")
        (push,) = await wait_pushes(alice, 1)
        assert push["params"]["featureSet"] == FEATURE_SET
        assert mcpc_of(push) == {
            "type": "server_event",
            "event": "alert",
            "session_id": None,
            "task_id": None,
            "tool_name": None,
            "result": {"x": 1},
            "protocol": "mcpc",
        }
        note = await bob.wait_notification(
            MESSAGE, lambda m: (m["params"].get("data") or {}).get("mcpc") == "server_event"
        )
        assert note["params"] == {
            "level": "info",
            "logger": "old",
            "data": {"mcpc": "server_event", "event": "alert", "result": {"x": 1}},
        }
        await asyncio.sleep(0.3)
        assert pushes(bob) == [], "bob did not enable the set"
        assert len(pushes(alice)) == 1


async def test_the_operator_can_forbid_the_set_to_a_principal(gateway: RunningGateway) -> None:
    async with host(gateway, "carol-token") as carol, host(gateway, "alice-token") as alice:
        await enable(gateway, carol, FEATURE_SET)
        await enable(gateway, alice, FEATURE_SET)
        response = await carol.request("tools/call", {"name": "old__slow_task", "arguments": {"steps": 2}}, 20)
        assert response["result"] == text_result('{"steps":2}'), "the call itself is not affected"
        sent = await carol.request("tools/call", {"name": "old__emit_event", "arguments": {"event": "e"}}, 20)
        assert sent["result"] == text_result("sent")
        (push,) = await wait_pushes(alice, 1)
        assert mcpc_of(push)["event"] == "e", "alice, allowed, is pushed the server event (and not carol's task)"
        await carol.wait_notification(MESSAGE, lambda m: (m["params"].get("data") or {}).get("mcpc") == "server_event")
        await asyncio.sleep(0.5)
        assert pushes(carol) == [], "denied by mcpl.feature_sets for carol: no push, whatever the host enabled"
        assert len(pushes(alice)) == 1


async def test_single_server_door_uses_the_bare_set_name(gateway: RunningGateway) -> None:
    async with host(gateway, "alice-token", server="old") as alice:
        await enable(gateway, alice, "mcpc")
        response = await alice.request("tools/call", {"name": "slow_task", "arguments": {"steps": 1}}, 20)
        assert response["result"] == text_result('{"steps":1}')
        got = await wait_pushes(alice, 3)
        assert {p["params"]["featureSet"] for p in got} == {"mcpc"}
        assert sorted(mcpc_of(p)["event"] for p in got) == ["complete", "created", "update"]
        assert {mcpc_of(p)["tool_name"] for p in got} == {"slow_task"}, "the tool by the host's name for it"


async def test_a_wildcard_enables_the_set_and_disabling_it_stops_the_pushes(gateway: RunningGateway) -> None:
    async with host(gateway, "alice-token") as alice:
        await enable(gateway, alice, "old.*")
        emitted = {"name": "old__emit_event", "arguments": {"event": "one"}}
        assert (await alice.request("tools/call", emitted, 20))["result"] == text_result("sent")
        (push,) = await wait_pushes(alice, 1)
        assert mcpc_of(push)["event"] == "one"
        await update_sets(gateway, alice, [], [FEATURE_SET])
        emitted = {"name": "old__emit_event", "arguments": {"event": "two"}}
        assert (await alice.request("tools/call", emitted, 20))["result"] == text_result("sent")
        await alice.wait_notification(MESSAGE, lambda m: (m["params"].get("data") or {}).get("event") == "two")
        await asyncio.sleep(0.3)
        assert len(pushes(alice)) == 1, "disabled: no more pushes"


# ================================================================= MCPx participants


async def test_a_topic_participant_gets_progress_envelopes_then_the_tasks_result(gateway: RunningGateway) -> None:
    alice = await Peer.join(gateway.url, ROOM, "alice-token")
    try:
        old = next(p for p in alice.welcome["payload"]["participants"] if p["id"] == "old")
        tools = {t["name"] for t in old["tools"]}
        assert {"slow_task", "fails"} <= tools and "_is_mcpc_enabled" not in tools, "handshake tools are hidden"
        request = tool_call("slow_task", {"steps": 3, "delay_s": 0.02}, rpc_id=7)
        request["params"]["_meta"] = {"progressToken": "pt-1"}
        call = await alice.send("mcp/request:tools/call:slow_task", request, to=["old"])
        progress: list[dict[str, Any]] = []
        logs: list[dict[str, Any]] = []
        while True:
            envelope = await alice.recv(10)
            if envelope["kind"] == "system/presence":
                continue
            if envelope["kind"] == "mcp/response:tools/call:slow_task":
                break
            assert envelope["kind"] in (f"mcp/notification:{PROGRESS}", f"mcp/notification:{MESSAGE}"), envelope
            assert envelope["from"] == "old" and envelope["to"] == ["alice"]
            assert envelope["correlation_id"] == call["id"]
            (progress if envelope["kind"].endswith(PROGRESS) else logs).append(envelope["payload"])
        assert [p["params"] for p in progress] == [
            {"progressToken": "pt-1", "progress": i, "message": json.dumps({"step": i, "of": 3}, separators=(",", ":"))}
            for i in (1, 2, 3)
        ]
        assert all(p["method"] == PROGRESS and "id" not in p for p in progress)
        assert [log["params"]["data"] for log in logs] == [
            {"mcpc": "task", "event": "update", "result": {"step": i, "of": 3}, "tool": "slow_task"} for i in (1, 2, 3)
        ]
        assert envelope["from"] == "old" and envelope["to"] == ["alice"]
        assert envelope["correlation_id"] == call["id"]
        assert envelope["payload"] == {"jsonrpc": "2.0", "id": 7, "result": text_result('{"steps":3}')}
        assert await running_tasks(gateway) == 0
    finally:
        await alice.close()


async def test_a_topic_participants_failed_task_is_an_error_result(gateway: RunningGateway) -> None:
    bob = await Peer.join(gateway.url, ROOM, "bob-token")
    try:
        call = await bob.send("mcp/request:tools/call:fails", tool_call("fails", {}, rpc_id=9), to=["old"])
        response = await bob.recv_kind("mcp/response:tools/call:fails", timeout=10)
        assert response["correlation_id"] == call["id"]
        assert response["payload"] == {"jsonrpc": "2.0", "id": 9, "result": text_result("boom", is_error=True)}
    finally:
        await bob.close()


async def test_two_calls_of_one_participant_at_once_keep_their_progress_apart(gateway: RunningGateway) -> None:
    alice = await Peer.join(gateway.url, ROOM, "alice-token")
    try:
        calls = {}
        for rpc_id, steps in ((1, 4), (2, 2)):
            request = tool_call("slow_task", {"steps": steps, "delay_s": 0.03}, rpc_id=rpc_id)
            request["params"]["_meta"] = {"progressToken": f"t{rpc_id}"}
            calls[rpc_id] = await alice.send("mcp/request:tools/call:slow_task", request, to=["old"])
        by_envelope = {call["id"]: rpc_id for rpc_id, call in calls.items()}
        progress: dict[int, list[dict[str, Any]]] = {1: [], 2: []}
        answers: dict[int, dict[str, Any]] = {}
        while len(answers) < 2:
            envelope = await alice.recv(10)
            if envelope.get("correlation_id") not in by_envelope:
                continue  # presence and the like
            rpc_id = by_envelope[envelope["correlation_id"]]
            if envelope["kind"] == "mcp/response:tools/call:slow_task":
                answers[rpc_id] = envelope["payload"]
            elif envelope["kind"] == f"mcp/notification:{PROGRESS}":
                progress[rpc_id].append(envelope["payload"]["params"])
        for rpc_id, steps in ((1, 4), (2, 2)):
            assert [(p["progressToken"], p["progress"]) for p in progress[rpc_id]] == [
                (f"t{rpc_id}", i) for i in range(1, steps + 1)
            ]
            assert [json.loads(p["message"])["of"] for p in progress[rpc_id]] == [steps] * steps
            assert answers[rpc_id] == {"jsonrpc": "2.0", "id": rpc_id, "result": text_result(f'{{"steps":{steps}}}')}
    finally:
        await alice.close()


# ================================================================= MGP streaming


@asynccontextmanager
async def mgp_client(gw: RunningGateway, token: str) -> AsyncIterator[McplHost]:
    """A raw JSON-RPC client on the WebSocket door that negotiated MGP ``streaming`` (McplHost's reader and
    recorder, without MCPL)."""
    ws = await connect(
        gw.ws(), subprotocols=[Subprotocol("mcp")], additional_headers={"Authorization": f"Bearer {token}"}
    )
    client = McplHost(ws)
    try:
        mgp = {"version": "0.8.0", "extensions": ["streaming", "progress"]}
        response = await client.request("initialize", initialize_params(capabilities={"mgp": mgp}))
        assert "streaming" in response["result"]["capabilities"]["mgp"]["extensions"]
        await client.notify("notifications/initialized")
        yield client
    finally:
        await client.close()


def streamed_call(rpc_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    params = {"name": name, "arguments": arguments, "_mgp": {"stream": True}}
    return {"jsonrpc": "2.0", "id": rpc_id, "method": "tools/call", "params": params}


async def test_an_mgp_streamed_call_of_an_mcpc_tool(gateway: RunningGateway) -> None:
    async with mgp_client(gateway, "bob-token") as client:
        params = {"name": "old__slow_task", "arguments": {"steps": 3, "delay_s": 0.02}, "_mgp": {"stream": True}}
        answer = await client.request("tools/call", params, timeout=20)
        rpc_id = answer["id"]
        notes = list(client.notifications)
    updates = [json.dumps({"step": i, "of": 3}, separators=(",", ":")) for i in (1, 2, 3)]
    progress = [n["params"] for n in notes if n["method"] == STREAM_PROGRESS]
    # No total in an MCPC update: the progress is the count of updates (adapters/mgp/streaming.py).
    assert progress == [{"request_id": rpc_id, "progress": i, "message": updates[i - 1]} for i in (1, 2, 3)]
    chunks = [n["params"] for n in notes if n["method"] == STREAM_CHUNK]
    data = [
        {"mcpc": "task", "event": "update", "result": {"step": i, "of": 3}, "tool": "old__slow_task"} for i in (1, 2, 3)
    ]
    assert [(c["request_id"], c["index"], c["done"]) for c in chunks] == [(rpc_id, i, False) for i in range(3)]
    assert [json.loads(c["content"]["text"]) for c in chunks] == data, "each log line of the task is a text chunk"
    assert {c["content"]["type"] for c in chunks} == {"text"}
    assert [n["params"]["data"] for n in notes if n["method"] == MESSAGE] == data
    assert not [n for n in notes if n["method"] == PROGRESS], "the client sent no progress token of its own"
    result = answer["result"]
    assert set(result) == {"content", "isError", "_mgp"}
    assert result["content"] == [{"type": "text", "text": '{"steps":3}'}] and result["isError"] is False
    assert result["_mgp"]["streamed"] is True and result["_mgp"]["chunks_sent"] == 3
    assert isinstance(result["_mgp"]["duration_ms"], int)


async def test_an_mgp_streamed_failed_task_is_an_error_result(gateway: RunningGateway) -> None:
    async with mgp_client(gateway, "bob-token") as client:
        params = {"name": "old__fails", "arguments": {}, "_mgp": {"stream": True}}
        answer = await client.request("tools/call", params, timeout=20)
        chunks = [n["params"] for n in client.notifications if n["method"] == STREAM_CHUNK]
    result = answer["result"]
    assert result["content"] == [{"type": "text", "text": "boom"}] and result["isError"] is True
    assert result["_mgp"]["streamed"] is True and result["_mgp"]["chunks_sent"] == 1
    assert [json.loads(c["content"]["text"]) for c in chunks] == [
        {"mcpc": "task", "event": "update", "result": "about to fail", "tool": "old__fails"}
    ]


async def test_an_mgp_stream_cancel_answers_the_partial_result_and_relays_nothing_more(gateway: RunningGateway) -> None:
    async with mgp_client(gateway, "bob-token") as client:
        params = {"name": "old__slow_task", "arguments": {"steps": 20, "delay_s": 0.05}, "_mgp": {"stream": True}}
        call = asyncio.create_task(client.request("tools/call", params, timeout=20))
        first = await client.wait_notification(STREAM_CHUNK, timeout=10)
        rpc_id = first["params"]["request_id"]
        cancel = await client.request("mgp/stream/cancel", {"request_id": rpc_id}, timeout=10)
        chunks = [n for n in client.notifications if n["method"] == STREAM_CHUNK]
        answer = await asyncio.wait_for(call, 10)
        await asyncio.sleep(0.2)
        assert [n for n in client.notifications if n["method"] == STREAM_CHUNK] == chunks, "nothing after the cancel"
    assert answer["error"]["code"] == -32800
    assert cancel["result"]["cancelled"] is True
    partial = cancel["result"]["partial_result"]["content"]
    assert partial and partial[0]["text"].startswith(first["params"]["content"]["text"])


async def test_an_mgp_stream_cancel_ends_a_held_mcpc_call_at_once(gateway: RunningGateway) -> None:
    async with mgp_client(gateway, "bob-token") as client:
        params = {"name": "old__slow_task", "arguments": {"steps": 200, "delay_s": 0.05}, "_mgp": {"stream": True}}
        call = asyncio.create_task(client.request("tools/call", params, timeout=20))
        first = await client.wait_notification(STREAM_CHUNK, timeout=10)
        cancel = await client.request("mgp/stream/cancel", {"request_id": first["params"]["request_id"]}, timeout=10)
        assert cancel["result"]["cancelled"] is True
        assert await running_tasks(gateway) == 0, "the cancelled call's task is forgotten at once"
        answer = await asyncio.wait_for(call, 2)  # the task itself would run for 10 s more
        assert answer["error"]["code"] == -32800


async def test_a_plain_clients_notifications_cancelled_ends_a_held_mcpc_call_at_once(gateway: RunningGateway) -> None:
    async with McplHost.connect(gateway.ws(), mcpl=None, token="bob-token") as plain:
        params = {"name": "old__slow_task", "arguments": {"steps": 200, "delay_s": 0.05}}
        call = asyncio.create_task(plain.request("tools/call", params, timeout=20))
        await plain.wait_notification(MESSAGE)
        await plain.notify("notifications/cancelled", {"requestId": plain._next_id})  # the call's id
        answer = await asyncio.wait_for(call, 2)
        assert answer["error"] == {"code": -32800, "message": "Request cancelled"}
        assert await running_tasks(gateway) == 0


# ================================================================= the mcpc library's own server


@pytest.fixture(scope="module")
def lib_gateway(mcpc_python: Path) -> Iterator[RunningGateway]:
    backend = {"transport": "stdio", "command": str(mcpc_python), "args": [str(LIB_SERVER), "--name", "lib"]}
    config = {
        "backends": {"lib": {**backend, "cwd": str(PROJECT_ROOT), "required": True}},
        "audit": {"file": str(AUDIT_DIR / "lib.jsonl")},
    }
    with run_gateway(config) as gw:
        asyncio.run(wait_until_mcpc_known(gw, "mcpc", None))
        yield gw


async def test_library_backend_tasks_reach_an_mcpl_host_as_pushes(lib_gateway: RunningGateway) -> None:
    async with McplHost.connect(lib_gateway.ws()) as lib_host:
        await enable(lib_gateway, lib_host, "mcpc")
        response = await lib_host.request("tools/call", {"name": "slow_task", "arguments": {"steps": 2}}, 20)
        assert response["result"] == text_result('{"steps":2}')
        messages = [mcpc_of(p) for p in await wait_pushes(lib_host, 4)]
        await asyncio.sleep(0.3)
        assert len(pushes(lib_host)) == 4
    # The library may write an update before the created result of its call: compare as a multiset.
    assert sorted(m["event"] for m in messages) == ["complete", "created", "update", "update"]
    assert {m["tool_name"] for m in messages} == {"slow_task"} and {m["session_id"] for m in messages} == {None}
    assert sorted(json.dumps(m["result"]) for m in messages if m["event"] == "update") == [
        json.dumps({"step": 1, "of": 2}),
        json.dumps({"step": 2, "of": 2}),
    ]
