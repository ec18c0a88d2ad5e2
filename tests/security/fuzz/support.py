"""Constants, hypothesis settings and strategies, and the client helpers shared by the door fuzz tests."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
from hypothesis import HealthCheck, settings, strategies as st

from tests.support import (
    JSON_HEADERS as JSON_HEADERS,
    LEGACY_VERSION as VERSION,
    MODERN_VERSION as MODERN,
    RunningGateway,
    b64url,
    initialize_request,
)

b64 = b64url  # base64url without padding, as in JWTs
STEP_S = 5.0  # the longest any single exchange may take; a timeout is a failure
SECRET = "s3cret-for-tests"
AUDIENCE = "switchboard"
ALICE = "alice-token"
ADMIN = "admin-token-for-tests"
TRACEBACK = "Traceback (most recent call last)"
SMALL_LIMIT = 65_536  # max_body_bytes / max_message_bytes of the auth-enabled gateway
ENVELOPE_LIMIT = 4096  # mcpx.max_envelope_bytes of the auth-enabled gateway
STDIO_LIMIT = 4096  # max_message_bytes of the stdio gateway
BRIDGED_TOPIC = "bridged"  # the auth-enabled gateway's topic with the demo backend as a participant

META_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CAPS = "io.modelcontextprotocol/clientCapabilities"
META_INFO = "io.modelcontextprotocol/clientInfo"
META_LEVEL = "io.modelcontextprotocol/logLevel"
WS_MAX_LINE = 8000  # about where websockets' handshake parser stops reading a line (8 KiB)
PROPER_CLOSE_CODES = {1000, 1001, 1002, 1003, 1007, 1008, 1009, 1013}

PARSE_ERROR = -32700
INVALID_REQUEST = -32600


def fuzz(examples: int) -> settings:
    """Modest, reproducible hypothesis settings: the whole file must run in about a minute on two cores."""
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
    )


# ---------------------------------------------------------------------------------------------- strategies


SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=10,
)
METHODS = [
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "tools/invoke",
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/read",
    "resources/templates/list",
    "resources/subscribe",
    "resources/unsubscribe",
    "completion/complete",
    "logging/setLevel",
    "server/discover",
    "notifications/initialized",
    "notifications/cancelled",
    "notifications/progress",
    "notifications/roots/list_changed",
    "sampling/createMessage",
    "roots/list",
    "shutdown",
    "exit",
    "cancel",
    "featureSets/update",
    "scope/elevate",
    "channels/list",
]
TOOL_NAMES = ["echo", "add", "no_such_tool", "_mcpc_init"]  # never slow_count: a fuzzed n/delay_s may run minutes
PARAMS = st.one_of(
    st.none(),
    JSON,
    st.fixed_dictionaries(
        {},
        optional={
            "name": st.sampled_from(TOOL_NAMES) | JSON,
            "arguments": JSON,
            "_meta": JSON | st.fixed_dictionaries({}, optional={"progressToken": JSON}),
            "requestId": JSON,
            "uri": JSON,
            "cursor": JSON,
            "level": JSON,
            "protocolVersion": JSON,
            "capabilities": JSON,
        },
    ),
)
ABSENT = object()
IDS = st.one_of(st.just(ABSENT), st.integers(min_value=-(2**63), max_value=2**63 - 1), st.text(max_size=10), JSON)


@st.composite
def rpc_messages(draw: st.DrawFn) -> dict[str, Any]:
    """JSON-RPC-shaped objects with every field's type up for grabs."""
    message: dict[str, Any] = {}
    jsonrpc = draw(st.sampled_from(["2.0", "2.0", "2.0", "1.0", ABSENT]) | JSON)
    if jsonrpc is not ABSENT:
        message["jsonrpc"] = jsonrpc
    rpc_id = draw(IDS)
    if rpc_id is not ABSENT:
        message["id"] = rpc_id
    method = draw(st.sampled_from(METHODS) | JSON | st.just(ABSENT))
    if method is not ABSENT:
        message["method"] = method
    params = draw(PARAMS)
    if params is not None:
        message["params"] = params
    if draw(st.booleans()):
        message.update(draw(st.fixed_dictionaries({}, optional={"result": JSON, "error": JSON})))
    return message


def parse_like_the_gateway(data: bytes) -> Any:
    """``data`` parsed as the gateway parses it (orjson: strict RFC 8259, nesting up to 1024), or ABSENT."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return ABSENT


def deep(levels: int, opener: bytes = b"[", closer: bytes = b"]") -> bytes:
    return opener * levels + closer * levels


# Header values an HTTP client can put on the wire: visible ASCII, space and obs-text, no CR/LF/NUL.
HEADER_BYTES = st.binary(max_size=200).map(lambda b: bytes(c for c in b if c >= 0x20 and c != 0x7F).strip())


# ---------------------------------------------------------------------------------------------- HTTP helpers


def _final_checks(gw: RunningGateway, token: str | None = None) -> None:
    """The process is alive, still answers a normal tools/call echo, and never logged a traceback."""
    assert gw.proc.poll() is None, f"the gateway died (exit {gw.proc.returncode})\n{gw.log()[-3000:]}"
    headers = {"authorization": f"Bearer {token}"} if token else {}
    with httpx.Client(timeout=STEP_S, trust_env=False, headers=headers) as client:
        session = open_session(client, gw.mcp)
        answer = call(client, gw.mcp, session, echo_call("final", "still here"))
        assert answer == {
            "jsonrpc": "2.0",
            "id": "final",
            "result": {"content": [{"type": "text", "text": "still here"}]},
        }
    log = gw.log()
    assert TRACEBACK not in log, log[log.index(TRACEBACK) - 300 :][:4000]


def port_of(gw: RunningGateway) -> int:
    return int(gw.url.rsplit(":", 1)[1])


def echo_call(rpc_id: Any, text: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": rpc_id,
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": text}},
    }


def initialize(rpc_id: Any = 1) -> dict[str, Any]:
    return initialize_request(rpc_id, client="fuzz")


def session_headers(session_id: str) -> dict[str, str]:
    return {**JSON_HEADERS, "mcp-session-id": session_id, "mcp-protocol-version": VERSION}


def open_session(client: httpx.Client, url: str) -> str:
    response = client.post(url, headers=JSON_HEADERS, json=initialize())
    assert response.status_code == 200, response.text
    session_id = response.headers["mcp-session-id"]
    note = client.post(
        url, headers=session_headers(session_id), json={"jsonrpc": "2.0", "method": "notifications/initialized"}
    )
    assert note.status_code == 202, note.text
    return session_id


def sse_events(chunks: Iterator[bytes]) -> Iterator[dict[str, str]]:
    """SSE events (field -> value) from a byte stream."""
    buffer = b""
    for chunk in chunks:
        buffer += chunk.replace(b"\r\n", b"\n")
        while b"\n\n" in buffer:
            raw, buffer = buffer.split(b"\n\n", 1)
            event: dict[str, str] = {}
            for line in raw.decode().split("\n"):
                if not line or line.startswith(":"):
                    continue
                field, _, value = line.partition(":")
                event[field] = event.get(field, "") + value.removeprefix(" ")
            if event:
                yield event


@dataclass
class Answer:
    status: int
    headers: httpx.Headers
    messages: list[Any]  # JSON bodies (or SSE data) received, in order
    raw: bytes


def exchange(client: httpx.Client, method: str, url: str, headers: Any = None, content: bytes | None = None) -> Answer:
    """One bounded HTTP exchange. A streamed answer is read to its end within STEP_S overall."""
    deadline = time.monotonic() + STEP_S
    with client.stream(method, url, headers=headers, content=content) as response:
        raw = b""
        messages: list[Any] = []
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            chunks: list[bytes] = []

            def bounded() -> Iterator[bytes]:
                for chunk in response.iter_raw():
                    chunks.append(chunk)
                    yield chunk
                    assert time.monotonic() < deadline, f"stream still open after {STEP_S}s: {b''.join(chunks)[:500]!r}"

            for event in sse_events(bounded()):
                if event.get("data"):
                    messages.append(json.loads(event["data"]))
            raw = b"".join(chunks)
        else:
            raw = response.read()
            if raw and response.headers.get("content-type", "").startswith("application/json"):
                messages.append(json.loads(raw))
        return Answer(response.status_code, response.headers, messages, raw)


def call(client: httpx.Client, url: str, session_id: str, message: dict[str, Any]) -> dict[str, Any]:
    answer = exchange(client, "POST", url, session_headers(session_id), json.dumps(message).encode())
    assert answer.status == 200, (answer.status, answer.raw[:500])
    final = [m for m in answer.messages if isinstance(m, dict) and m.get("id") == message["id"] and "method" not in m]
    assert final, answer.messages
    return final[-1]


def assert_rpc_error(body: Any) -> None:
    assert isinstance(body, dict), body
    assert body.get("jsonrpc") == "2.0", body
    error = body.get("error")
    assert isinstance(error, dict), body
    assert isinstance(error.get("code"), int) and not isinstance(error.get("code"), bool), body
    assert isinstance(error.get("message"), str) and error["message"], body
    assert "id" in body, body


def assert_door_answer(answer: Answer, what: Any = None) -> None:
    """Property 1 on an MCP HTTP door: no 5xx; a 4xx carries a JSON-RPC error; 2xx bodies are JSON-RPC."""
    context = (what if not isinstance(what, bytes) else what[:200], answer.status, answer.raw[:300])
    assert answer.status < 500, context
    if 400 <= answer.status < 500:
        assert answer.headers.get("content-type", "").startswith("application/json"), context
        assert len(answer.messages) == 1, context
        assert_rpc_error(answer.messages[0])
    for message in answer.messages:
        items = message if isinstance(message, list) else [message]
        for item in items:
            assert isinstance(item, dict) and item.get("jsonrpc") == "2.0", context


# ---------------------------------------------------------------------------------------------- shared inputs


NASTY_BODIES: dict[str, bytes] = {
    "empty": b"",
    "whitespace": b" \t\r\n ",
    "nul": b"\x00",
    "invalid-utf8": b"\xff\xfe\xfd",
    "invalid-utf8-inside-string": b'{"jsonrpc": "2.0", "id": 1, "method": "p\xffing"}',
    "overlong-utf8": b'{"jsonrpc": "2.0", "id": 1, "method": "\xc0\xaf"}',
    "lone-surrogate": b'{"jsonrpc": "2.0", "id": "\\ud800", "method": "ping"}',
    "utf16-bom": "\ufeff{}".encode("utf-16"),
    "utf8-bom": b'\xef\xbb\xbf{"jsonrpc": "2.0", "id": 1, "method": "ping"}',
    "deep-arrays-open": b"[" * 100_000,
    "deep-objects-open": b'{"a":' * 100_000,
    "deep-arrays-closed-100k": deep(100_000),
    "deep-arrays-closed-1000": deep(1000),
    "deep-in-params": b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": ' + deep(1000) + b"}}",
    "deep-in-id": b'{"jsonrpc": "2.0", "id": ' + deep(500) + b', "method": "ping"}',
    "huge-int-id": b'{"jsonrpc": "2.0", "id": 1' + b"0" * 5000 + b', "method": "ping"}',
    "huge-exponent": b'{"jsonrpc": "2.0", "id": 1e999999, "method": "ping"}',
    "tiny-exponent": b'{"jsonrpc": "2.0", "id": 1e-999999, "method": "ping"}',
    "nan": b'{"jsonrpc": "2.0", "id": NaN, "method": "ping"}',
    "infinity": b'{"jsonrpc": "2.0", "id": -Infinity, "method": "ping"}',
    "nan-in-params": b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": NaN}}',
    "id-object": b'{"jsonrpc": "2.0", "id": {"a": 1}, "method": "ping"}',
    "id-array": b'{"jsonrpc": "2.0", "id": [1], "method": "ping"}',
    "id-bool": b'{"jsonrpc": "2.0", "id": true, "method": "ping"}',
    "id-float": b'{"jsonrpc": "2.0", "id": 1.5, "method": "initialize"}',
    "method-number": b'{"jsonrpc": "2.0", "id": 1, "method": 42}',
    "method-null": b'{"jsonrpc": "2.0", "id": 1, "method": null}',
    "method-empty": b'{"jsonrpc": "2.0", "id": 1, "method": ""}',
    "method-object": b'{"jsonrpc": "2.0", "id": 1, "method": {"a": "initialize"}}',
    "params-string": b'{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": "x"}',
    "params-number": b'{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": 1}',
    "params-array": b'{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": [1, 2]}',
    "initialize-garbage-params": (
        b'{"jsonrpc": "2.0", "id": 1, "method": "initialize", '
        b'"params": {"protocolVersion": [], "capabilities": "x", "clientInfo": 5}}'
    ),
    "jsonrpc-1.0": b'{"jsonrpc": "1.0", "id": 1, "method": "ping"}',
    "jsonrpc-number": b'{"jsonrpc": 2.0, "id": 1, "method": "ping"}',
    "no-jsonrpc": b'{"id": 1, "method": "ping"}',
    "duplicate-keys": b'{"jsonrpc": "2.0", "id": 1, "id": {}, "method": "ping", "method": 5}',
    "result-and-error": b'{"jsonrpc": "2.0", "id": 1, "result": {}, "error": {}}',
    "error-not-object": b'{"jsonrpc": "2.0", "id": 1, "error": 5}',
    "null": b"null",
    "true": b"true",
    "number": b"12345",
    "string": b'"initialize"',
    "batch-empty": b"[]",
    "batch-nested": b'[[{"jsonrpc": "2.0", "id": 1, "method": "ping"}]]',
    "batch-scalars": b"[1, 2, null, true, []]",
    "batch-of-initialize": json.dumps([initialize(1), initialize(2)]).encode(),
    "batch-huge": json.dumps([{"jsonrpc": "2.0", "id": i, "method": "ping"} for i in range(3000)]).encode(),
    "trailing-garbage": b'{"jsonrpc": "2.0", "id": 1, "method": "ping"} xyz',
    "two-objects": b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}{"jsonrpc": "2.0", "id": 2, "method": "ping"}',
    "truncated": b'{"jsonrpc": "2.0", "id": 1, "method": "pi',
    "comment": b'{"jsonrpc": "2.0", /* x */ "id": 1, "method": "ping"}',
    "single-quotes": b"{'jsonrpc': '2.0', 'id': 1, 'method': 'ping'}",
    "long-string": b'{"jsonrpc": "2.0", "id": 1, "method": "' + b"m" * 200_000 + b'"}',
    "many-keys": b"{" + b",".join(b'"k%d": %d' % (i, i) for i in range(20_000)) + b"}",
}


def modern_request(method: str, params: dict[str, Any], meta: Any, rpc_id: Any = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": {**params, "_meta": meta}}


def good_meta() -> dict[str, Any]:
    return {META_VERSION: MODERN, META_CAPS: {}, META_INFO: {"name": "fuzz", "version": "1"}}


def first_sse_event(client: httpx.Client, url: str, headers: dict[str, Any]) -> tuple[int, bytes]:
    """Status and the first chunk of a GET that may open a stream (closed again at once)."""
    with client.stream("GET", url, headers=headers) as response:
        if response.status_code != 200:
            body = response.read()
            answer = Answer(response.status_code, response.headers, [], body)
            if response.headers.get("content-type", "").startswith("application/json"):
                answer.messages.append(json.loads(body))
            assert_door_answer(answer, headers)
            return response.status_code, body
        assert response.headers["content-type"].startswith("text/event-stream")
        return 200, next(response.iter_raw())
