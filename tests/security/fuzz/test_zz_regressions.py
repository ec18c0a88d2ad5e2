"""The bugs this fuzzer found, pinned; and, last of all the door fuzz tests, the check that every gateway survived.

The ``zz`` in this file's name keeps it after every other module of the package (pytest runs them in name order), so
``test_zz_every_gateway_survived`` stays the last test of the package."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.security.fuzz.clients import SseSession, StdioGateway, open_ws, ws_initialize, ws_probe
from tests.security.fuzz.support import (
    ALICE,
    JSON_HEADERS,
    STEP_S,
    TRACEBACK,
    _final_checks,
    assert_door_answer,
    call,
    exchange,
    open_session,
    session_headers,
)
from tests.support import RunningGateway, run_gateway

pytestmark = pytest.mark.timeout(120)


def test_regressions_found_by_this_fuzzer(plain: RunningGateway, client: httpx.Client) -> None:
    """Inputs that once made a call hang (the demo backend raised and never answered), answered -32603 after a
    traceback (a tool name that is not a string), or gave a 500 (a result with an integer beyond 64 bits)."""
    session_id = open_session(client, plain.mcp)
    cases: list[tuple[dict[str, Any], str]] = [
        ({"name": "echo", "arguments": "x"}, "tool-error"),
        ({"name": "echo", "arguments": [1]}, "tool-error"),
        ({"name": "slow_count", "arguments": {"n": "x"}}, "tool-error"),
        ({"name": "slow_count", "arguments": {"n": []}}, "tool-error"),
        ({"name": "slow_count", "arguments": {"n": 1, "delay_s": "soon"}}, "tool-error"),
        ({"name": "add", "arguments": {"a": 2**64 - 1, "b": 2**64 - 1}}, "result"),
        ({"name": ["echo"], "arguments": {}}, "error"),
        ({"name": {"n": 1}, "arguments": {}}, "error"),
    ]
    for rpc_id, (params, expected) in enumerate(cases):
        message = {"jsonrpc": "2.0", "id": rpc_id, "method": "tools/call", "params": params}
        answer = call(client, plain.mcp, session_id, message)
        if expected == "result":
            assert "result" in answer and not answer["result"].get("isError"), answer
        elif expected == "tool-error":
            assert answer.get("result", {}).get("isError") is True or answer.get("error", {}).get("code") == -32602, (
                answer
            )
        else:
            assert answer["error"]["code"] in (-32602, -32600), answer
    for rpc_id, (method, params) in enumerate(
        [
            ("prompts/get", {"name": "greet", "arguments": 5}),
            ("notifications/cancelled", {"requestId": {"a": 1}}),  # a *request* with a notification's name
            ("notifications/cancelled", {"requestId": 1}),
        ],
        start=100,
    ):
        answer = call(
            client, plain.mcp, session_id, {"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": params}
        )
        assert "error" in answer or "result" in answer, answer


@pytest.mark.parametrize("door", ["post", "batch", "ws", "sse", "stdio"])
def test_cancelled_notification_with_an_unhashable_request_id(
    plain: RunningGateway, client: httpx.Client, request: pytest.FixtureRequest, door: str
) -> None:
    """notifications/cancelled whose requestId is an array or object is accepted and ignored on every door: 202 on
    HTTP, no answer on the framed doors (it is a notification), never a 500 nor a traceback."""
    notes = [
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": request_id}}
        for request_id in ([], [1], {"a": 1})
    ]
    if door == "post":
        session_id = open_session(client, plain.mcp)
        for note in notes:
            answer = exchange(client, "POST", plain.mcp, session_headers(session_id), json.dumps(note).encode())
            assert answer.status == 202, (note, answer.status, answer.raw[:300])
    elif door == "batch":
        session_id = open_session(client, plain.mcp)
        batch = json.dumps([*notes, {"jsonrpc": "2.0", "id": 1, "method": "ping"}]).encode()
        answer = exchange(client, "POST", plain.mcp, session_headers(session_id), batch)
        assert_door_answer(answer)
        assert answer.status == 200 and answer.messages == [[{"jsonrpc": "2.0", "id": 1, "result": {}}]], answer
    elif door == "ws":
        with open_ws(plain) as ws:
            ws_initialize(ws)
            for note in notes:
                ws.send(json.dumps(note))
            assert ws_probe(ws, "after") == []
    elif door == "sse":
        sse = SseSession(plain)
        try:
            for note in notes:
                assert exchange(client, "POST", sse.endpoint, JSON_HEADERS, json.dumps(note).encode()).status == 202
            exchange(client, "POST", sse.endpoint, JSON_HEADERS, b'{"jsonrpc": "2.0", "id": "after", "method": "ping"}')
            assert sse.until(lambda m: True) == {"jsonrpc": "2.0", "id": "after", "result": {}}
        finally:
            sse.close()
    else:
        gw: StdioGateway = request.getfixturevalue("stdio_gw")
        for note in notes:
            gw.write(json.dumps(note).encode() + b"\n")
        assert gw.probe() == []
        assert TRACEBACK not in gw.stderr(), gw.stderr()[-3000:]


def test_exit_request_is_answered(plain: RunningGateway, client: httpx.Client) -> None:
    """The draft's ``exit`` sent as a request (with an id) ends the session and must still get an HTTP answer."""
    session_id = open_session(client, plain.mcp)
    answer = exchange(
        client, "POST", plain.mcp, session_headers(session_id), b'{"jsonrpc": "2.0", "id": 1, "method": "exit"}'
    )
    assert_door_answer(answer)
    assert answer.status in (200, 202, 204), (answer.status, answer.raw[:300])


# A stdio backend that, during every tools/call, sends a progress notification whose token is an array, a
# response whose id is an object, and a notification whose method is a number, before its real answer.
MISBEHAVING_BACKEND = """
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    mid, method = m.get("id"), m.get("method")
    if method == "initialize":
        info = {"name": "bad", "version": "1"}
        r = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}}, "serverInfo": info}
    elif method == "tools/list":
        r = {"tools": [{"name": "t", "inputSchema": {"type": "object"}}]}
    elif method == "tools/call":
        for junk in (
            {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": [], "progress": 1}},
            {"jsonrpc": "2.0", "id": {"a": 1}, "result": {}},
            {"jsonrpc": "2.0", "method": 5, "params": {}},
        ):
            print(json.dumps(junk), flush=True)
        r = {"content": [{"type": "text", "text": "ok"}]}
    elif mid is None:
        continue
    else:
        r = {}
    print(json.dumps({"jsonrpc": "2.0", "id": mid, "result": r}), flush=True)
"""


def test_backend_messages_with_unhashable_ids_do_not_cost_the_connection(tmp_path: Path) -> None:
    """The door toward backends: an id, progress token or method of the wrong JSON type from a backend is dropped
    (and logged); it used to end the carrier's reader, so the backend counted as exited and every call in flight
    failed with -32090."""
    script = tmp_path / "misbehaving_backend.py"
    script.write_text(MISBEHAVING_BACKEND)
    backend = {"transport": "stdio", "command": sys.executable, "args": [str(script)], "required": True}
    with run_gateway({"backends": {"bad": backend}}) as gw, httpx.Client(timeout=STEP_S, trust_env=False) as client:
        session_id = open_session(client, gw.mcp)
        for rpc_id in range(3):
            params = {"name": "t", "arguments": {}, "_meta": {"progressToken": "p"}}
            answer = call(
                client, gw.mcp, session_id, {"jsonrpc": "2.0", "id": rpc_id, "method": "tools/call", "params": params}
            )
            assert answer.get("result") == {"content": [{"type": "text", "text": "ok"}]}, answer
        log = gw.log()
        assert "exited" not in log and TRACEBACK not in log, log[-3000:]


def test_zz_every_gateway_survived(plain: RunningGateway, authed: RunningGateway) -> None:
    """Last in the file: both processes are alive, answer echo correctly, and never logged a traceback."""
    _final_checks(plain)
    _final_checks(authed, ALICE)
