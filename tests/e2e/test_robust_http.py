"""Robustness of the Streamable HTTP front door, against a real gateway process over real sockets.

Every status code here is the one a real client keys its behaviour on (the MCP 2025-11-25
transport rules, and what the official SDK clients key on), so the tests use raw httpx and raw sockets rather
than an SDK that would hide them. Every wait is bounded.

The slow-client (back-pressure) tests are in test_robust_http_slow_clients.py; the helpers both use are in
robust_http_support.py.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.robust_http_support import (
    SseReader,
    call,
    initialize_body,
    open_session,
    port_of,
    session_headers,
    tool_call,
)
from tests.support import JSON_HEADERS as BASE_HEADERS, RunningGateway, run_gateway

pytestmark = pytest.mark.timeout(60)


PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602


# ---------------------------------------------------------------------------------------------- helpers


def assert_rpc_error(response: httpx.Response, status: int, code: int | None = None) -> dict[str, Any]:
    assert response.status_code == status, (response.status_code, response.text)
    if code is None:
        return {}
    body = response.json()
    assert body["jsonrpc"] == "2.0"
    assert body["error"]["code"] == code, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    return body


# ---------------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def gw() -> Iterator[RunningGateway]:
    """Two builtin demo backends (so names are prefixed a__/b__) and a small body limit."""
    config = {
        "backends": {
            "a": {"transport": "builtin", "required": True},
            "b": {"transport": "builtin", "required": True},
        },
        "limits": {"max_body_bytes": 2048},
    }
    with run_gateway(config) as running:
        yield running


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=httpx.Timeout(10.0)) as c:
        yield c


# ---------------------------------------------------------------------------------------------- framing


def test_malformed_json_is_400_parse_error(gw: RunningGateway, client: httpx.Client) -> None:
    for body in (b"{", b'{"jsonrpc": "2.0", "id": 1, "method": ', b"\xff\xfe", b"not json at all"):
        response = client.post(gw.mcp, headers=BASE_HEADERS, content=body)
        assert_rpc_error(response, 400, PARSE_ERROR)
        assert response.json()["id"] is None


@pytest.mark.parametrize(
    "message",
    [
        [],
        {},
        {"jsonrpc": "1.0", "id": 1, "method": "ping"},
        {"id": 1, "method": "ping"},
        {"jsonrpc": "2.0", "id": 1, "method": 42},
        {"jsonrpc": "2.0", "id": 1, "method": ""},
        {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": "a string"},
        {"jsonrpc": "2.0", "id": {"an": "object"}, "method": "ping"},
        {"jsonrpc": "2.0", "id": 1, "result": {}, "error": {"code": 1, "message": "both"}},
        "just a string",
        42,
    ],
    ids=[
        "empty-batch",
        "empty-object",
        "jsonrpc-1.0",
        "no-jsonrpc",
        "method-int",
        "method-empty",
        "params-string",
        "id-object",
        "result-and-error",
        "string",
        "number",
    ],
)
def test_json_that_is_not_jsonrpc_is_400_invalid_request(
    gw: RunningGateway, client: httpx.Client, message: Any
) -> None:
    response = client.post(gw.mcp, headers=BASE_HEADERS, content=json.dumps(message).encode())
    assert_rpc_error(response, 400, INVALID_REQUEST)


# ---------------------------------------------------------------------------------------------- sessions


def test_request_without_session_id_is_400(gw: RunningGateway, client: httpx.Client) -> None:
    response = client.post(gw.mcp, headers=BASE_HEADERS, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert_rpc_error(response, 400, INVALID_REQUEST)
    assert "mcp-session-id" not in response.headers


def test_unknown_session_id_is_404(gw: RunningGateway, client: httpx.Client) -> None:
    headers = {**BASE_HEADERS, "mcp-session-id": "no-such-session-0123456789abcdef"}
    response = client.post(gw.mcp, headers=headers, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert_rpc_error(response, 404)
    # GET and DELETE on it are 404 as well.
    get = client.get(gw.mcp, headers={"accept": "text/event-stream", "mcp-session-id": "no-such-session"})
    assert get.status_code == 404
    assert client.delete(gw.mcp, headers={"mcp-session-id": "no-such-session"}).status_code == 404


def test_session_used_after_delete_is_404(gw: RunningGateway, client: httpx.Client) -> None:
    session_id = open_session(client, gw.mcp)
    ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
    assert call(client, gw.mcp, session_id, ping) == {"jsonrpc": "2.0", "id": 2, "result": {}}
    deleted = client.delete(gw.mcp, headers=session_headers(session_id))
    assert deleted.status_code in (200, 202, 204)
    again = client.post(gw.mcp, headers=session_headers(session_id), json={**ping, "id": 3})
    assert_rpc_error(again, 404)
    assert client.delete(gw.mcp, headers=session_headers(session_id)).status_code == 404


def test_session_of_one_route_is_unknown_on_another(gw: RunningGateway, client: httpx.Client) -> None:
    """A session minted on /mcp is not valid on /servers/a/mcp (each route is its own server)."""
    session_id = open_session(client, gw.mcp)
    response = client.post(
        gw.server("a"), headers=session_headers(session_id), json={"jsonrpc": "2.0", "id": 1, "method": "ping"}
    )
    assert_rpc_error(response, 404)


def test_initialize_carrying_a_session_id_is_refused(gw: RunningGateway, client: httpx.Client) -> None:
    session_id = open_session(client, gw.mcp)
    response = client.post(gw.mcp, headers=session_headers(session_id), json=initialize_body(5))
    assert response.status_code == 400
    assert response.json()["error"]["code"] == INVALID_REQUEST


# ---------------------------------------------------------------------------------------------- headers


def test_wrong_content_type_is_415(gw: RunningGateway, client: httpx.Client) -> None:
    body = json.dumps(initialize_body()).encode()
    for ctype in ("text/plain", "application/x-www-form-urlencoded", ""):
        headers = {"accept": BASE_HEADERS["accept"], "content-type": ctype}
        assert_rpc_error(client.post(gw.mcp, headers=headers, content=body), 415, INVALID_REQUEST)
    # Parameters after the media type are fine.
    ok = client.post(gw.mcp, headers={**BASE_HEADERS, "content-type": "application/json; charset=utf-8"}, content=body)
    assert ok.status_code == 200, ok.text


def test_accept_without_event_stream_is_406(gw: RunningGateway, client: httpx.Client) -> None:
    for accept in ("application/json", "text/event-stream", "text/html"):
        headers = {**BASE_HEADERS, "accept": accept}
        assert_rpc_error(client.post(gw.mcp, headers=headers, json=initialize_body()), 406, INVALID_REQUEST)
    session_id = open_session(client, gw.mcp)
    get = client.get(gw.mcp, headers={"accept": "application/json", "mcp-session-id": session_id})
    assert get.status_code == 406


def test_unsupported_protocol_version_header_is_400(gw: RunningGateway, client: httpx.Client) -> None:
    session_id = open_session(client, gw.mcp)
    for bad in ("1999-01-01", "not-a-version", "2026-07-28"):
        headers = {**session_headers(session_id), "mcp-protocol-version": bad}
        response = client.post(gw.mcp, headers=headers, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
        assert_rpc_error(response, 400)
        assert bad in response.json()["error"]["message"]
    # An older legacy version the gateway also speaks is accepted.
    headers = {**session_headers(session_id), "mcp-protocol-version": "2025-06-18"}
    response = client.post(gw.mcp, headers=headers, json={"jsonrpc": "2.0", "id": 2, "method": "ping"})
    assert response.status_code == 200, response.text


def test_oversized_body_is_413_and_the_gateway_keeps_serving(gw: RunningGateway, client: httpx.Client) -> None:
    session_id = open_session(client, gw.mcp)
    big = tool_call(1, "a__echo", {"text": "x" * 10_240})
    payload = json.dumps(big).encode()
    # With Content-Length: refused before the body is read.
    response = client.post(gw.mcp, headers=session_headers(session_id), content=payload)
    assert response.status_code == 413, response.text
    assert "2048" in response.json()["error"]["message"]

    # Chunked (no Content-Length): refused once the running total passes the limit.
    def chunks() -> Iterator[bytes]:
        for i in range(0, len(payload), 1000):
            yield payload[i : i + 1000]

    response = client.post(gw.mcp, headers=session_headers(session_id), content=chunks())
    assert response.status_code == 413, response.text

    # Still serving: the same session and a fresh one both work.
    small = tool_call(2, "a__echo", {"text": "still here"})
    assert call(client, gw.mcp, session_id, small)["result"]["content"][0]["text"] == "still here"
    with httpx.Client(timeout=10) as other:
        other_id = open_session(other, gw.mcp)
        assert call(other, gw.mcp, other_id, small)["result"]["content"][0]["text"] == "still here"
    assert client.get(f"{gw.url}/healthz").status_code == 200


def test_bad_host_is_refused_and_bad_origin_is_403(gw: RunningGateway, client: httpx.Client) -> None:
    body = initialize_body()
    for host in ("evil.example.com", f"evil.example.com:{port_of(gw)}", "127.0.0.2"):
        response = client.post(gw.mcp, headers={**BASE_HEADERS, "host": host}, json=body)
        assert 400 <= response.status_code < 500, (host, response.status_code)
        assert "mcp-session-id" not in response.headers
    for origin in ("http://evil.example.com", "https://127.0.0.1.evil.example.com", "http://localhost.evil:80"):
        response = client.post(gw.mcp, headers={**BASE_HEADERS, "origin": origin}, json=body)
        assert response.status_code == 403, (origin, response.status_code)
        assert "mcp-session-id" not in response.headers
    # The same request from a loopback origin and host is fine.
    good = {**BASE_HEADERS, "origin": f"http://localhost:{port_of(gw)}", "host": f"localhost:{port_of(gw)}"}
    assert client.post(gw.mcp, headers=good, json=body).status_code == 200


# ---------------------------------------------------------------------------------------------- routing


def test_unknown_method_across_two_backends_is_a_clear_32601(gw: RunningGateway, client: httpx.Client) -> None:
    session_id = open_session(client, gw.mcp)
    answer = call(client, gw.mcp, session_id, {"jsonrpc": "2.0", "id": 7, "method": "vendor/frobnicate"})
    assert answer["id"] == 7
    error = answer["error"]
    assert error["code"] == METHOD_NOT_FOUND
    # The message names the method and says why and what to do instead.
    assert "vendor/frobnicate" in error["message"]
    assert "/servers/" in error["message"]


def test_unknown_method_on_a_single_backend_route_reaches_the_backend(gw: RunningGateway, client: httpx.Client) -> None:
    session_id = open_session(client, gw.server("a"))
    answer = call(client, gw.server("a"), session_id, {"jsonrpc": "2.0", "id": 8, "method": "vendor/frobnicate"})
    assert answer["error"]["code"] == METHOD_NOT_FOUND
    assert "vendor/frobnicate" in answer["error"]["message"]


def test_notifications_and_client_responses_are_202(gw: RunningGateway, client: httpx.Client) -> None:
    session_id = open_session(client, gw.mcp)
    for message in (
        {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"},
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 999, "reason": "x"}},
        {"jsonrpc": "2.0", "method": "vendor/unknown_notification", "params": {}},
        {"jsonrpc": "2.0", "id": "sb-not-asked-1", "result": {}},
        {"jsonrpc": "2.0", "id": "sb-not-asked-2", "error": {"code": -1, "message": "no"}},
    ):
        response = client.post(gw.mcp, headers=session_headers(session_id), json=message)
        assert response.status_code == 202, (message, response.status_code, response.text)
        assert response.content == b""
    # The session is unharmed.
    assert call(client, gw.mcp, session_id, {"jsonrpc": "2.0", "id": 1, "method": "ping"})["result"] == {}


def test_call_to_unknown_tool_is_an_error_naming_it(gw: RunningGateway, client: httpx.Client) -> None:
    session_id = open_session(client, gw.mcp)
    listed = call(client, gw.mcp, session_id, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    names = {t["name"] for t in listed["result"]["tools"]}
    assert {"a__echo", "b__echo", "a__slow_count"} <= names
    for rpc_id, name in enumerate(("no_such_tool", "zz__echo", "a__no_such_tool", "echo"), start=2):
        answer = call(client, gw.mcp, session_id, tool_call(rpc_id, name, {}))
        assert answer["id"] == rpc_id
        assert "result" not in answer, answer
        assert answer["error"]["code"] == INVALID_PARAMS, answer
        # The name the client used (or its unprefixed form) is in the message.
        assert name.split("__")[-1] in answer["error"]["message"], answer
    assert call(client, gw.mcp, session_id, tool_call(9, "b__echo", {"text": "ok"}))["result"]["content"][0] == {
        "type": "text",
        "text": "ok",
    }


# ---------------------------------------------------------------------------------------------- resumption


def test_post_stream_resumes_with_last_event_id_without_loss_or_duplicates(
    gw: RunningGateway, client: httpx.Client
) -> None:
    url = gw.server("a")
    session_id = open_session(client, url)
    n = 12
    request = tool_call(42, "slow_count", {"n": n, "delay_s": 0.08}, token="resume-me")
    first_ids: list[str] = []
    first_messages: list[dict[str, Any]] = []
    priming: str | None = None
    reader = SseReader()
    with client.stream("POST", url, headers=session_headers(session_id), json=request) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        for chunk in response.iter_raw():
            for event_id, data in reader.feed(chunk):
                assert event_id, "every event of a resumable stream carries an id"
                if not data:
                    priming = priming or event_id
                    continue
                first_ids.append(event_id)
                first_messages.append(json.loads(data))
            if len(first_messages) >= 5:
                break
        # Leaving the block drops the connection in the middle of the call.
    assert priming is not None, "the 2025-11-25 stream starts with a priming event (id, empty data)"
    assert all("method" in m for m in first_messages), "the call cannot have finished yet"
    last_id = first_ids[-1]

    resumed_ids: list[str] = []
    resumed: list[dict[str, Any]] = []
    deadline = time.monotonic() + 10
    while True:
        headers = {"accept": "text/event-stream", "mcp-session-id": session_id, "last-event-id": last_id}
        with client.stream("GET", url, headers=headers) as response:
            if response.status_code == 409 and time.monotonic() < deadline:
                time.sleep(0.05)  # the gateway has not noticed the drop yet
                continue
            assert response.status_code == 200, response.read()
            reader = SseReader()
            for chunk in response.iter_raw():
                for event_id, data in reader.feed(chunk):
                    if not data:
                        continue
                    resumed_ids.append(event_id or "")
                    resumed.append(json.loads(data))
        break

    final = [m for m in resumed if m.get("id") == 42 and "method" not in m]
    assert len(final) == 1, resumed
    assert final[0]["result"]["content"][0]["text"] == f"counted to {n}"
    assert resumed[-1] is final[0], "the final response ends the stream"
    # No duplicates across the two connections, and the ids keep increasing.
    all_ids = first_ids + resumed_ids
    assert len(set(all_ids)) == len(all_ids), all_ids
    seqs = [int(i.rsplit("-", 1)[1]) for i in all_ids]
    assert seqs == sorted(seqs), all_ids
    assert len({i.rsplit("-", 1)[0] for i in all_ids}) == 1, "one stream"
    # Nothing lost either: every progress step arrives exactly once, with the client's own token.
    progress = [m["params"] for m in first_messages + resumed if m.get("method") == "notifications/progress"]
    assert [p["progress"] for p in progress] == list(range(1, n + 1))
    assert {p["progressToken"] for p in progress} == {"resume-me"}
    logs = [m for m in first_messages + resumed if m.get("method") == "notifications/message"]
    assert [m["params"]["data"] for m in logs] == [f"count {i}/{n}" for i in range(1, n + 1)]


def test_resume_after_the_call_finished_while_disconnected(gw: RunningGateway, client: httpx.Client) -> None:
    """The call goes on without its reader; a later GET + Last-Event-ID still delivers the rest and the result."""
    url = gw.server("b")
    session_id = open_session(client, url)
    n = 6
    request = tool_call("late", "slow_count", {"n": n, "delay_s": 0.05}, token=7)
    reader = SseReader()
    seen: list[tuple[str, dict[str, Any]]] = []
    with client.stream("POST", url, headers=session_headers(session_id), json=request) as response:
        assert response.status_code == 200
        for chunk in response.iter_raw():
            seen += [(i or "", json.loads(d)) for i, d in reader.feed(chunk) if d]
            if seen:
                break
    time.sleep(n * 0.05 + 0.5)  # long enough for the call to end with nobody reading
    headers = {"accept": "text/event-stream", "mcp-session-id": session_id, "last-event-id": seen[-1][0]}
    rest: list[dict[str, Any]] = []
    with client.stream("GET", url, headers=headers) as response:
        assert response.status_code == 200, response.read()
        reader = SseReader()
        for chunk in response.iter_raw():
            rest += [json.loads(d) for _i, d in reader.feed(chunk) if d]
    messages = [m for _i, m in seen] + rest
    assert messages[-1] == {
        "jsonrpc": "2.0",
        "id": "late",
        "result": {"content": [{"type": "text", "text": f"counted to {n}"}]},
    }
    progress = [m["params"]["progress"] for m in messages if m.get("method") == "notifications/progress"]
    assert progress == list(range(1, n + 1))


def test_resume_with_an_unknown_event_id_is_404(gw: RunningGateway, client: httpx.Client) -> None:
    session_id = open_session(client, gw.mcp)
    for bad in ("nonsense", "zzzzzzzz-99-1", "-", "abc-"):
        headers = {"accept": "text/event-stream", "mcp-session-id": session_id, "last-event-id": bad}
        with client.stream("GET", gw.mcp, headers=headers) as response:
            assert response.status_code == 404, (bad, response.status_code)
