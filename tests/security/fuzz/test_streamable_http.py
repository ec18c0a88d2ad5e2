"""Streamable HTTP: ``POST``/``GET``/``DELETE /mcp`` and ``/servers/NAME/mcp``, both eras, oversize bodies."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest
from hypothesis import given, strategies as st

from tests.security.fuzz.support import (
    ALICE,
    HEADER_BYTES,
    JSON,
    JSON_HEADERS,
    META_CAPS,
    META_INFO,
    META_LEVEL,
    META_VERSION,
    MODERN,
    NASTY_BODIES,
    SMALL_LIMIT,
    TOOL_NAMES,
    Answer,
    assert_door_answer,
    deep,
    echo_call,
    exchange,
    first_sse_event,
    fuzz,
    good_meta,
    initialize,
    modern_request,
    open_session,
    rpc_messages,
    session_headers,
    sse_events,
)
from tests.support import RunningGateway

pytestmark = pytest.mark.timeout(120)


# ---------------------------------------------------------------------------------------------- Streamable HTTP: POST


@pytest.mark.parametrize("name", list(NASTY_BODIES))
def test_post_nasty_bodies_without_and_with_a_session(plain: RunningGateway, client: httpx.Client, name: str) -> None:
    body = NASTY_BODIES[name]
    for url in (plain.mcp, plain.server("demo"), plain.server("nope"), f"{plain.mcp}/"):
        assert_door_answer(exchange(client, "POST", url, JSON_HEADERS, body), (url, name))
    for url in (plain.mcp, plain.server("demo")):
        session_id = open_session(client, url)
        assert_door_answer(exchange(client, "POST", url, session_headers(session_id), body), (url, name))
        # The session is unharmed by whatever the body was (unless the body legitimately ended it).
        answer = exchange(client, "POST", url, session_headers(session_id), json.dumps(echo_call(9, "ok")).encode())
        assert answer.status in (200, 404), answer.raw[:300]


@fuzz(120)
@given(body=st.binary(max_size=400) | JSON.map(lambda v: json.dumps(v).encode()))
def test_post_arbitrary_bytes(plain: RunningGateway, client: httpx.Client, body: bytes) -> None:
    assert_door_answer(exchange(client, "POST", plain.mcp, JSON_HEADERS, body), body)


@fuzz(150)
@given(message=rpc_messages() | st.lists(rpc_messages(), max_size=3))
def test_post_wrongly_typed_messages_in_a_session(plain: RunningGateway, client: httpx.Client, message: Any) -> None:
    """Every field's type is wrong somewhere; each answer is a proper JSON-RPC answer, and it is never late."""
    session_id = open_session(client, plain.mcp)
    answer = exchange(client, "POST", plain.mcp, session_headers(session_id), json.dumps(message).encode())
    assert_door_answer(answer, message)
    if answer.status == 202:
        assert answer.raw in (b"", b"Accepted"), answer.raw[:200]


@fuzz(60)
@given(message=rpc_messages())
def test_post_wrongly_typed_messages_without_a_session(
    plain: RunningGateway, client: httpx.Client, message: Any
) -> None:
    answer = exchange(client, "POST", plain.mcp, JSON_HEADERS, json.dumps(message).encode())
    assert_door_answer(answer, message)
    if answer.status == 200 and "mcp-session-id" in answer.headers:
        exchange(client, "DELETE", plain.mcp, {"mcp-session-id": answer.headers["mcp-session-id"]})


HEADER_CASES: list[dict[str, Any]] = [
    {"content-type": "text/plain", "accept": "application/json, text/event-stream"},
    {"accept": "application/json, text/event-stream"},  # no content-type
    {"content-type": "application/json; charset=ebcdic", "accept": "application/json, text/event-stream"},
    {"content-type": "APPLICATION/JSON;;;", "accept": "*/*"},
    {"content-type": ";", "accept": ";"},
    {"content-type": b"application/json\xff", "accept": b"\xff\xfe"},
    {"content-type": "application/json", "accept": "text/html"},
    {"content-type": "application/json", "accept": "application/json"},
    {"content-type": "application/json", "accept": ""},
    {**JSON_HEADERS, "mcp-session-id": ""},
    {**JSON_HEADERS, "mcp-session-id": "x" * 8000},
    {**JSON_HEADERS, "mcp-session-id": b"\xff\xfe\x80"},
    {**JSON_HEADERS, "mcp-session-id": "../../etc/passwd"},
    {**JSON_HEADERS, "mcp-protocol-version": ""},
    {**JSON_HEADERS, "mcp-protocol-version": "x" * 8000},
    {**JSON_HEADERS, "mcp-protocol-version": b"\xc3\x28"},
    {**JSON_HEADERS, "mcp-protocol-version": "2025-11-25, 2026-07-28"},
    {**JSON_HEADERS, "mcp-protocol-version": MODERN, "mcp-method": b"\xff", "mcp-name": "=?base64?!!!?="},
    {**JSON_HEADERS, "host": "evil.example"},
    {**JSON_HEADERS, "host": ""},
    {**JSON_HEADERS, "host": b"127.0.0.1:\xff"},
    {**JSON_HEADERS, "origin": "null"},
    {**JSON_HEADERS, "origin": "http://evil.example"},
    {**JSON_HEADERS, "origin": b"http://[::1\xff"},
    {**JSON_HEADERS, "origin": "::::"},
    {**JSON_HEADERS, "authorization": "Bearer"},
    {**JSON_HEADERS, "authorization": b"\xff\xfe"},
]


@pytest.mark.parametrize("index", range(len(HEADER_CASES)))
def test_post_with_wrong_and_garbage_headers(plain: RunningGateway, client: httpx.Client, index: int) -> None:
    headers = HEADER_CASES[index]
    for body in (json.dumps(initialize()).encode(), json.dumps(echo_call(1, "x")).encode(), b"{"):
        assert_door_answer(exchange(client, "POST", plain.mcp, headers, body), (headers, body))


@fuzz(80)
@given(
    names=st.lists(
        st.sampled_from(
            ["content-type", "accept", "mcp-session-id", "mcp-protocol-version", "last-event-id", "origin"]
        ),
        min_size=1,
        max_size=4,
    ),
    values=st.lists(HEADER_BYTES, min_size=4, max_size=4),
    body=st.sampled_from([json.dumps(initialize()).encode(), json.dumps(echo_call(1, "x")).encode(), b"[]", b"{"]),
)
def test_post_with_fuzzed_headers(
    plain: RunningGateway, client: httpx.Client, names: list[str], values: list[bytes], body: bytes
) -> None:
    headers = dict(JSON_HEADERS)
    for name, value in zip(names, values, strict=False):
        headers[name] = value  # type: ignore[assignment]
    answer = exchange(client, "POST", plain.mcp, headers, body)
    assert_door_answer(answer, headers)
    if answer.status == 200 and "mcp-session-id" in answer.headers:
        exchange(client, "DELETE", plain.mcp, {"mcp-session-id": answer.headers["mcp-session-id"]})


MODERN_METAS: list[Any] = [
    None,
    5,
    "x",
    [],
    {},
    {META_VERSION: None},
    {META_VERSION: 2026},
    {META_VERSION: [MODERN]},
    {META_VERSION: {"v": MODERN}},
    {META_VERSION: MODERN},
    {META_VERSION: MODERN, META_CAPS: None},
    {META_VERSION: MODERN, META_CAPS: []},
    {META_VERSION: MODERN, META_CAPS: "all"},
    {META_VERSION: MODERN, META_CAPS: {"sampling": 5, "elicitation": []}},
    {**good_meta(), META_INFO: []},
    {**good_meta(), META_INFO: {"name": {"deep": deep(200).decode()}}},
    {**good_meta(), META_LEVEL: 5},
    {**good_meta(), META_LEVEL: ["debug"]},
    {**good_meta(), META_LEVEL: "no-such-level"},
    {**good_meta(), "progressToken": {"a": []}},
    {**good_meta(), "io.modelcontextprotocol/subscriptionId": []},
    good_meta(),
]


@pytest.mark.parametrize("index", range(len(MODERN_METAS)))
def test_modern_envelopes_with_malformed_meta(plain: RunningGateway, client: httpx.Client, index: int) -> None:
    """2026-07-28 requests (stateless, the envelope in ``params._meta``) with every part of the envelope and of
    the mirrored routing headers wrong in turn."""
    meta = MODERN_METAS[index]
    cases: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
        ("tools/list", {}, {"mcp-method": "tools/list"}),
        ("server/discover", {}, {"mcp-method": "server/discover"}),
        ("tools/call", {"name": "echo", "arguments": {"text": "hi"}}, {"mcp-method": "tools/call", "mcp-name": "echo"}),
        ("tools/call", {"name": ["echo"], "arguments": "x"}, {"mcp-method": "tools/call", "mcp-name": "echo"}),
        (
            "tools/call",
            {"name": "echo", "arguments": []},
            {"mcp-method": "tools/call", "mcp-name": "=?base64?ZWNobw==?="},
        ),
        ("resources/read", {"uri": 5}, {"mcp-method": "resources/read", "mcp-name": "5"}),
        ("subscriptions/listen", {"notifications": "all"}, {"mcp-method": "subscriptions/listen"}),
        ("subscriptions/listen", {"notifications": []}, {"mcp-method": "subscriptions/listen"}),
        ("initialize", {}, {"mcp-method": "initialize"}),
        ("ping", {}, {"mcp-method": "ping"}),
    ]
    for method, params, extra in cases:
        for version_header in (MODERN, None, "garbage"):
            headers = {**JSON_HEADERS, **extra}
            if version_header is not None:
                headers["mcp-protocol-version"] = version_header
            else:
                headers["mcp-param-bogus"] = "x"  # a parameter header no tool declares
            body = json.dumps(modern_request(method, params, meta)).encode()
            answer = exchange(client, "POST", plain.mcp, headers, body)
            assert_door_answer(answer, (meta, method, version_header))


@fuzz(80)
@given(
    meta=st.fixed_dictionaries(
        {META_VERSION: st.sampled_from([MODERN, MODERN, "2025-11-25", ""]) | JSON},
        optional={META_CAPS: JSON, META_INFO: JSON, META_LEVEL: JSON, "progressToken": JSON},
    )
    | JSON,
    method=st.sampled_from(["tools/list", "tools/call", "server/discover", "prompts/get", "resources/read", "ping"]),
    params=st.dictionaries(st.sampled_from(["name", "arguments", "uri", "cursor"]), JSON | st.sampled_from(TOOL_NAMES)),
    method_header=st.sampled_from(["same", "absent", "other"]),
    name_header=st.sampled_from(["same", "absent", "garbage"]),
)
def test_modern_envelopes_fuzzed(
    plain: RunningGateway,
    client: httpx.Client,
    meta: Any,
    method: str,
    params: dict[str, Any],
    method_header: str,
    name_header: str,
) -> None:
    headers = dict(JSON_HEADERS)
    if method_header != "absent":
        headers["mcp-method"] = method if method_header == "same" else "tools/list"
    target = params.get("name", params.get("uri"))
    if name_header == "same" and isinstance(target, str) and target.isprintable() and target.isascii():
        headers["mcp-name"] = target.strip() or "x"
    elif name_header == "garbage":
        headers["mcp-name"] = "=?base64?" + "A" * 7 + "?="
    body = json.dumps(modern_request(method, params, meta)).encode()
    assert_door_answer(exchange(client, "POST", plain.mcp, headers, body), (meta, method, params))


@pytest.mark.parametrize(
    "notifications",
    [
        {"resourceSubscriptions": ["\u0000", "x" * 10_000, "", "nope+x://y", "demo://readme", "+", "demo+"]},
        {"resourceSubscriptions": [5, {}, None]},
        {"resourceSubscriptions": "demo://readme"},
        {"toolsListChanged": "yes", "promptsListChanged": [], "resourcesListChanged": None},
        {"unknown": {"deep": [[[[[[[[]]]]]]]]}},
    ],
    ids=["odd-uris", "non-string-uris", "uris-not-a-list", "flags-not-booleans", "unknown-keys"],
)
def test_modern_listen_with_garbage_subscriptions(
    plain: RunningGateway, client: httpx.Client, notifications: dict[str, Any]
) -> None:
    """subscriptions/listen opens a long-lived stream: its acknowledgement (or a 4xx) arrives at once."""
    headers = {**JSON_HEADERS, "mcp-method": "subscriptions/listen", "mcp-protocol-version": MODERN}
    body = json.dumps(modern_request("subscriptions/listen", {"notifications": notifications}, good_meta()))
    with client.stream("POST", plain.mcp, headers=headers, content=body.encode()) as response:
        if response.status_code != 200:
            raw = response.read()
            assert_door_answer(Answer(response.status_code, response.headers, [json.loads(raw)], raw), notifications)
            return
        event = next(sse_events(response.iter_raw()))
        ack = json.loads(event["data"])
        assert ack["method"] == "notifications/subscriptions/acknowledged", ack


def test_oversize_bodies_are_413(plain: RunningGateway, authed: RunningGateway, client: httpx.Client) -> None:
    default_limit = 4 * 1024 * 1024
    big = b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": "' + b"a" * default_limit + b'"}}'
    answer = exchange(client, "POST", plain.mcp, JSON_HEADERS, big)
    assert answer.status == 413, answer.raw[:300]
    assert_door_answer(answer)
    over = b" " * (SMALL_LIMIT + 1)
    headers = {**JSON_HEADERS, "authorization": f"Bearer {ALICE}"}
    for url in (authed.mcp, authed.server("demo")):
        answer = exchange(client, "POST", url, headers, over)
        assert answer.status == 413, answer.raw[:300]
        assert_door_answer(answer)
    # Just under the limit is read (and refused for what it is, not for its size).
    answer = exchange(client, "POST", authed.mcp, headers, b" " * (SMALL_LIMIT - 10) + b"{")
    assert answer.status == 400, answer.raw[:300]


# ----------------------------------------------------------------------------------------- Streamable HTTP: GET/DELETE


GET_DELETE_HEADERS: list[dict[str, Any]] = [
    {},
    {"accept": "text/event-stream"},
    {"accept": "text/event-stream", "mcp-session-id": "nope"},
    {"accept": "text/event-stream", "mcp-session-id": b"\xff" * 300},
    {"accept": "text/event-stream", "mcp-session-id": "x" * 10_000},
    {"accept": "text/html", "mcp-session-id": "nope"},
    {"accept": "text/event-stream", "mcp-protocol-version": MODERN},
    {"accept": "text/event-stream", "mcp-protocol-version": b"\xff\x00x"[::2]},
    {"accept": "text/event-stream", "last-event-id": "zz-1"},
    {"accept": "text/event-stream", "last-event-id": b"\xb2\xb3"},
]


@pytest.mark.parametrize("index", range(len(GET_DELETE_HEADERS)))
def test_get_and_delete_with_garbage_headers(plain: RunningGateway, client: httpx.Client, index: int) -> None:
    headers = GET_DELETE_HEADERS[index]
    status, _ = first_sse_event(client, plain.mcp, headers)
    assert status != 200, "no stream without a valid session"
    assert_door_answer(exchange(client, "DELETE", plain.mcp, headers), headers)
    for method in ("PUT", "PATCH", "OPTIONS"):
        assert_door_answer(exchange(client, method, plain.mcp, headers, b"{}"), (method, headers))


def _stream_id(client: httpx.Client, url: str, session_id: str) -> str:
    status, first = first_sse_event(client, url, {"accept": "text/event-stream", "mcp-session-id": session_id})
    assert status == 200
    match = re.search(rb"id: (\S+)-\d+\n", first)
    assert match, first
    return match.group(1).decode()


@pytest.mark.parametrize(
    "suffix",
    [
        "",
        "-",
        "--1",
        "-1-",
        "-x",
        "-99999999999999999999999999",
        "- 1",
        "-+1",
        "-0x1",
        "-1e3",
        "-\u0661",
        "-\xb2",
        "-\xb9\xb2\xb3",
    ],
)
def test_last_event_id_garbage_on_a_real_stream(plain: RunningGateway, client: httpx.Client, suffix: str) -> None:
    """A Last-Event-ID naming a real stream with a malformed sequence number: 404 (or a resumed stream), never 5xx.

    Header values are bytes on the wire, read as latin-1: ``\\xb2`` is "²", which ``str.isdigit()`` accepts and
    ``int()`` refuses.
    """
    session_id = open_session(client, plain.mcp)
    stream = _stream_id(client, plain.mcp, session_id)
    value = f"{stream}{suffix}".encode("latin-1", errors="replace")
    status, _ = first_sse_event(
        client, plain.mcp, {"accept": "text/event-stream", "mcp-session-id": session_id, "last-event-id": value}
    )
    assert status in (200, 404, 409), (suffix, status)


@fuzz(60)
@given(last_event_id=HEADER_BYTES, use_stream=st.booleans())
def test_last_event_id_fuzzed(
    plain: RunningGateway, client: httpx.Client, last_event_id: bytes, use_stream: bool
) -> None:
    session_id = open_session(client, plain.mcp)
    value = last_event_id
    if use_stream:
        value = _stream_id(client, plain.mcp, session_id).encode() + b"-" + last_event_id
    headers = {"accept": "text/event-stream", "mcp-session-id": session_id, "last-event-id": value}
    status, _ = first_sse_event(client, plain.mcp, headers)
    assert status < 500
