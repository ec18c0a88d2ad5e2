"""The seven holes of the security review, attacked from outside on every door, both eras and MCPx.

Each test is the attack as an outsider sends it to a real gateway process over real sockets, and
each asserted the correct answer before the fix (and failed). Doors: Streamable HTTP (legacy
session and 2026-07-28 stateless), legacy HTTP+SSE, WebSocket ``/mcp/ws``, the MCPx socket ``/ws``,
the single-backend doors under ``/servers/NAME/``, and the HTTP APIs beside them.
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from websockets.exceptions import ConnectionClosed, InvalidHandshake
from websockets.sync.client import connect

from tests.support import (
    JSON_HEADERS as BASE,
    LEGACY_VERSION as LEGACY,
    MODERN_VERSION as MODERN,
    RunningGateway,
    b64url as b64,
    hs256_jwt,
    initialize_request,
    modern_meta,
    run_gateway,
)

pytestmark = pytest.mark.timeout(90)

SECRET = "attack-suite-secret"
ADMIN = "attack-suite-admin"
CAPABILITY_DENIED = -32093
META = modern_meta("attacker")
RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
STEP_S = 10.0


# ---- tokens ------------------------------------------------------------------------------------


# Tokens are made when this module is imported and used until the last test of it: on a loaded CI
# machine that can be far more than ten minutes later.
_LIFETIME_S = 86_400


def jwt(claims: dict[str, Any], header: Any = None) -> str:
    claims = {"aud": "switchboard", "exp": time.time() + _LIFETIME_S, **claims}
    return hs256_jwt(header or {"alg": "HS256"}, claims, SECRET)


def rs256_with_kid(kid: Any) -> str:
    head = b64(json.dumps({"alg": "RS256", "kid": kid}).encode())
    body = b64(json.dumps({"sub": "carol", "aud": "switchboard", "exp": time.time() + _LIFETIME_S}).encode())
    return f"{head}.{body}.{b64(RSA_KEY.sign(f'{head}.{body}'.encode(), padding.PKCS1v15(), hashes.SHA256()))}"


NESTED_HEADER_TOKEN = jwt({"sub": "carol"}, header=b"[" * 1000 + b"]" * 1000)  # about 2.7 KB
BAD_KID_TOKEN = rs256_with_kid({"x": 1})
BROAD = jwt({"sub": "carol", "capabilities": ["mcp/*"]})
NARROW = jwt({"sub": "carol", "capabilities": ["mcp/request:initialize", "mcp/request:tools/list"]})
OTHER = jwt({"sub": "dave", "capabilities": ["mcp/*"]})
READER = jwt({"sub": "reader"})
ECHOER = jwt({"sub": "echoer"})
LISTENER = jwt({"sub": "listener"})


# ---- gateways ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def open_gw() -> Iterator[RunningGateway]:
    """The default a developer runs on a laptop: loopback, no auth, the demo backend, a topic."""
    config = {
        "backends": {"demo": {"transport": "builtin", "required": True}},
        "mcpx": {"topics": {"room": {}}},
    }
    with run_gateway(config) as running:
        yield running


@pytest.fixture(scope="module")
def auth_gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    numbers = RSA_KEY.public_key().public_numbers()
    jwks = tmp_path_factory.mktemp("jwks") / "jwks.json"
    jwks.write_text(
        json.dumps(
            {
                "keys": [
                    {
                        "kty": "RSA",
                        "kid": "k1",
                        "n": b64(numbers.n.to_bytes(256, "big")),
                        "e": b64(numbers.e.to_bytes(3, "big")),
                    }
                ]
            }
        )
    )
    config = {
        "backends": {"demo": {"transport": "builtin", "required": True}},
        "auth": {
            "jwt": {"hs256_secret": SECRET, "jwks_file": str(jwks), "audience": "switchboard"},
            "admin_token": ADMIN,
        },
        "principals": {
            "carol": {"tokens": ["carol-static"], "capabilities": ["mcp/*"]},
            "dave": {"capabilities": ["mcp/*"]},
            "reader": {"capabilities": ["mcp/request:initialize", "mcp/request:*/list"]},
            "echoer": {"capabilities": ["mcp/request:initialize", "mcp/request:tools/call:echo"]},
            "listener": {
                "capabilities": [
                    "mcp/request:initialize",
                    "mcp/request:subscriptions/listen",
                    "mcp/request:tools/list",
                    "mcp/request:resources/subscribe:demo://other",
                ]
            },
        },
        "mcpx": {"topics": {"room": {}}},
        "audit": {"file": str(tmp_path_factory.mktemp("audit") / "audit.jsonl")},
    }
    with run_gateway(config) as running:
        yield running


@pytest.fixture(scope="module")
def null_allowed_gw() -> Iterator[RunningGateway]:
    """An operator who lists ``null`` explicitly (e.g. a sandboxed in-house tool) gets it."""
    config = {
        "backends": {"demo": {"transport": "builtin", "required": True}},
        "security": {"allowed_origins": ["null"]},
    }
    with run_gateway(config) as running:
        yield running


# ---- clients -----------------------------------------------------------------------------------


def rpc(method: str, params: dict[str, Any] | None = None, rpc_id: Any = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": params or {}}


def initialize() -> dict[str, Any]:
    return initialize_request(1, client="a")


def auth(token: str | None) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"} if token else {}


def json_or_sse(response: httpx.Response) -> dict[str, Any]:
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        for line in response.text.splitlines():
            if line.startswith("data:") and line[5:].strip():
                message = json.loads(line[5:])
                if "id" in message and ("result" in message or "error" in message):
                    return message  # type: ignore[no-any-return]
        raise AssertionError(f"no answer in the stream: {response.text!r}")
    return response.json()  # type: ignore[no-any-return]


def open_session(http: httpx.Client, url: str, token: str | None) -> str:
    response = http.post(url, headers={**BASE, **auth(token)}, json=initialize())
    assert response.status_code == 200, response.text
    session = response.headers["mcp-session-id"]
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    headers = {**BASE, **auth(token), "mcp-session-id": session, "mcp-protocol-version": LEGACY}
    assert http.post(url, headers=headers, json=note).status_code == 202
    return session


def session_call(http: httpx.Client, url: str, session: str, token: str | None, message: dict[str, Any]) -> Any:
    headers = {**BASE, **auth(token), "mcp-session-id": session, "mcp-protocol-version": LEGACY}
    return http.post(url, headers=headers, json=message)


def modern_call(http: httpx.Client, url: str, token: str | None, method: str, params: dict[str, Any]) -> Any:
    headers = {**BASE, **auth(token), "mcp-protocol-version": MODERN, "mcp-method": method}
    name = params.get("name") or params.get("uri")
    if isinstance(name, str) and name.isascii() and name.isprintable():
        headers["mcp-name"] = name
    return http.post(url, headers=headers, json=rpc(method, {**params, "_meta": META}))


def error_code(message: dict[str, Any]) -> int | None:
    error = message.get("error")
    return error.get("code") if isinstance(error, dict) else None


def assert_no_traceback(gw: RunningGateway) -> None:
    assert "Traceback (most recent call last)" not in gw.log(), gw.log()[-4000:]


@contextlib.contextmanager
def refused_websocket(url: str, **kwargs: Any) -> Iterator[None]:
    """The socket is refused at the handshake, or closed before it answers anything."""
    try:
        with connect(url, open_timeout=STEP_S, close_timeout=2, **kwargs) as ws:
            ws.send(json.dumps(initialize()))
            with contextlib.suppress(TimeoutError):
                frame = ws.recv(timeout=STEP_S)
                raise AssertionError(f"the socket answered: {frame!r}")
    except (InvalidHandshake, ConnectionClosed):
        pass
    yield


# ================================================================ 1. Origin: null is not trusted

NULL_ORIGINS = ["null", "NULL", "Null"]


@pytest.mark.parametrize("origin", NULL_ORIGINS)
def test_null_origin_is_refused_on_every_http_door(open_gw: RunningGateway, origin: str) -> None:
    with httpx.Client(base_url=open_gw.url, timeout=STEP_S) as http:
        headers = {**BASE, "origin": origin}
        assert http.post("/mcp", headers=headers, json=initialize()).status_code == 403
        assert http.post("/servers/demo/mcp", headers=headers, json=initialize()).status_code == 403
        modern = {**headers, "mcp-protocol-version": MODERN, "mcp-method": "tools/call", "mcp-name": "add"}
        call = rpc("tools/call", {"name": "add", "arguments": {"a": 40, "b": 2}, "_meta": META})
        assert http.post("/mcp", headers=modern, json=call).status_code == 403
        assert http.get("/sse", headers={"accept": "text/event-stream", "origin": origin}).status_code == 403
        assert http.post("/messages?session_id=x", headers=headers, json=initialize()).status_code == 403
        for path in ("/metrics", "/readyz", "/v0.1/topics", "/admin/principals"):
            assert http.get(path, headers={"origin": origin}).status_code == 403, path
    assert_no_traceback(open_gw)


@pytest.mark.parametrize("path", ["/mcp/ws", "/servers/demo/mcp/ws", "/ws?topic=room"])
def test_null_origin_cannot_open_a_websocket(open_gw: RunningGateway, path: str) -> None:
    with refused_websocket(open_gw.ws(path), origin="null", subprotocols=["mcp"]):  # type: ignore[arg-type]
        pass
    assert_no_traceback(open_gw)


def test_a_second_origin_header_cannot_smuggle_null(open_gw: RunningGateway) -> None:
    good = f"http://localhost:{open_gw.url.rsplit(':', 1)[1]}"
    with httpx.Client(timeout=STEP_S) as http:
        for origins in ([good, "null"], ["null", good], [good, "http://evil.example"]):
            headers = [*BASE.items(), *(("origin", o) for o in origins)]
            assert http.post(open_gw.mcp, headers=headers, json=initialize()).status_code in (400, 403), origins
    # Two Host headers: httpx refuses to send them, so a raw socket does.
    port = int(open_gw.url.rsplit(":", 1)[1])
    body = json.dumps(initialize()).encode()
    request = (
        b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: evil.example\r\n"
        b"Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
        + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )
    with socket.create_connection(("127.0.0.1", port), timeout=STEP_S) as sock:
        sock.sendall(request)
        status_line = sock.recv(4096).split(b"\r\n", 1)[0]
    assert status_line.split()[1] in (b"400", b"421"), status_line


def test_a_loopback_origin_still_works_and_no_origin_still_works(open_gw: RunningGateway) -> None:
    good = f"http://localhost:{open_gw.url.rsplit(':', 1)[1]}"
    with httpx.Client(timeout=STEP_S) as http:
        assert http.post(open_gw.mcp, headers={**BASE, "origin": good}, json=initialize()).status_code == 200
        assert http.post(open_gw.mcp, headers=BASE, json=initialize()).status_code == 200
    with connect(open_gw.ws("/mcp/ws"), origin=good, subprotocols=["mcp"], open_timeout=STEP_S) as ws:  # type: ignore[arg-type]
        ws.send(json.dumps(initialize()))
        assert "result" in json.loads(ws.recv(timeout=STEP_S))


def test_null_origin_is_accepted_only_when_the_operator_lists_it(null_allowed_gw: RunningGateway) -> None:
    with httpx.Client(timeout=STEP_S) as http:
        assert http.post(null_allowed_gw.mcp, headers={**BASE, "origin": "null"}, json=initialize()).status_code == 200
        evil = {**BASE, "origin": "http://evil.example"}
        assert http.post(null_allowed_gw.mcp, headers=evil, json=initialize()).status_code == 403


# ================================================================ 2. a narrower token rides no broader session


def test_each_request_is_held_to_the_token_it_presents(auth_gw: RunningGateway) -> None:
    add = rpc("tools/call", {"name": "add", "arguments": {"a": 40, "b": 2}}, rpc_id=2)
    with httpx.Client(timeout=STEP_S) as http:
        session = open_session(http, auth_gw.mcp, BROAD)
        assert json_or_sse(session_call(http, auth_gw.mcp, session, BROAD, add))["result"]["content"][0]["text"] == "42"
        narrowed = json_or_sse(session_call(http, auth_gw.mcp, session, NARROW, add))
        assert error_code(narrowed) == CAPABILITY_DENIED, narrowed
        listed = json_or_sse(session_call(http, auth_gw.mcp, session, NARROW, rpc("tools/list", rpc_id=3)))
        assert "result" in listed, "what the narrow token allows still works on the same session"
        # The broad token keeps working: the session is carol's, each request carries its own grant.
        assert "result" in json_or_sse(session_call(http, auth_gw.mcp, session, BROAD, add))


def test_a_session_is_bound_to_its_principal(auth_gw: RunningGateway) -> None:
    add = rpc("tools/call", {"name": "add", "arguments": {"a": 1, "b": 1}}, rpc_id=2)
    with httpx.Client(timeout=STEP_S) as http:
        session = open_session(http, auth_gw.mcp, BROAD)
        for token in (OTHER, None, "carol-static", "garbage"):
            response = session_call(http, auth_gw.mcp, session, token, add)
            assert response.status_code in (401, 403), (token, response.status_code, response.text)
            assert "www-authenticate" in response.headers


def test_legacy_sse_messages_are_held_to_the_token_they_present(auth_gw: RunningGateway) -> None:
    add = rpc("tools/call", {"name": "add", "arguments": {"a": 40, "b": 2}}, rpc_id=2)
    with httpx.Client(base_url=auth_gw.url, timeout=STEP_S) as http:
        with http.stream("GET", "/sse", headers={"accept": "text/event-stream", **auth(BROAD)}) as stream:
            lines = stream.iter_lines()
            endpoint = next(line[5:].strip() for line in lines if line.startswith("data:"))
            assert http.post(endpoint, headers={**BASE, **auth(BROAD)}, json=initialize()).status_code == 202
            denied = http.post(endpoint, headers={**BASE, **auth(NARROW)}, json=add)
            assert denied.status_code == 202
            other = http.post(endpoint, headers={**BASE, **auth(OTHER)}, json=add)
            assert other.status_code in (401, 403)
            answers: list[dict[str, Any]] = []
            for line in lines:
                if line.startswith("data:"):
                    answers.append(json.loads(line[5:]))
                    if len(answers) == 2:
                        break
            assert answers[0]["id"] == 1 and "result" in answers[0]
            assert error_code(answers[1]) == CAPABILITY_DENIED, answers[1]


def test_modern_requests_are_held_to_their_own_token(auth_gw: RunningGateway) -> None:
    with httpx.Client(timeout=STEP_S) as http:
        params = {"name": "add", "arguments": {"a": 40, "b": 2}}
        assert "result" in modern_call(http, auth_gw.mcp, BROAD, "tools/call", params).json()
        assert error_code(modern_call(http, auth_gw.mcp, NARROW, "tools/call", params).json()) == CAPABILITY_DENIED


# ================================================================ 3. subscriptions/listen is checked


def listen(http: httpx.Client, gw: RunningGateway, token: str, notifications: dict[str, Any]) -> dict[str, Any]:
    body = rpc("subscriptions/listen", {"notifications": notifications, "_meta": META}, rpc_id=77)
    headers = {**BASE, **auth(token), "mcp-protocol-version": MODERN, "mcp-method": "subscriptions/listen"}
    with http.stream("POST", gw.mcp, json=body, headers=headers) as stream:
        if not stream.headers.get("content-type", "").startswith("text/event-stream"):
            stream.read()
            return {"status": stream.status_code, **stream.json()}
        for line in stream.iter_lines():
            if line.startswith("data:") and line[5:].strip():
                return json.loads(line[5:])  # type: ignore[no-any-return]
    raise AssertionError("no acknowledgement")


def test_listen_refuses_and_reports_resources_the_principal_may_not_subscribe(auth_gw: RunningGateway) -> None:
    with httpx.Client(timeout=STEP_S) as http:
        ack = listen(
            http,
            auth_gw,
            LISTENER,
            {"toolsListChanged": True, "promptsListChanged": True, "resourceSubscriptions": ["demo://readme"]},
        )
    assert ack["method"] == "notifications/subscriptions/acknowledged", ack
    honored = ack["params"]["notifications"]
    assert honored.get("resourceSubscriptions", []) == [], honored
    assert honored.get("toolsListChanged") is True
    assert "promptsListChanged" not in honored, "prompts/list is not among the listener's capabilities"
    refused = ack["params"]["_meta"]["io.switchboard/refused"]
    assert {"resourceSubscriptions": "demo://readme", "code": CAPABILITY_DENIED} in [
        {k: r[k] for k in ("resourceSubscriptions", "code") if k in r} for r in refused
    ]
    with httpx.Client(timeout=STEP_S) as http:
        session = open_session(http, auth_gw.mcp, LISTENER)
        legacy = json_or_sse(
            session_call(http, auth_gw.mcp, session, LISTENER, rpc("resources/subscribe", {"uri": "demo://readme"}))
        )
        assert error_code(legacy) == CAPABILITY_DENIED, "the same check as resources/subscribe"


def test_listen_itself_needs_its_capability(auth_gw: RunningGateway) -> None:
    with httpx.Client(timeout=STEP_S) as http:
        answer = listen(http, auth_gw, READER, {"toolsListChanged": True})
    assert error_code(answer) == CAPABILITY_DENIED, answer


# ================================================================ 4 and 5. the grammar, through the doors


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("tools/call", {"name": "add/list", "arguments": {}}),
        ("resources/read", {"uri": "demo://readme/list"}),
        ("prompts/get", {"name": "greet/list"}),
    ],
)
def test_read_only_principal_cannot_call_a_name_ending_in_list(
    auth_gw: RunningGateway, method: str, params: dict[str, Any]
) -> None:
    with httpx.Client(timeout=STEP_S) as http:
        session = open_session(http, auth_gw.mcp, READER)
        legacy = json_or_sse(session_call(http, auth_gw.mcp, session, READER, rpc(method, params, rpc_id=5)))
        assert error_code(legacy) == CAPABILITY_DENIED, legacy
        assert error_code(modern_call(http, auth_gw.mcp, READER, method, params).json()) == CAPABILITY_DENIED


@pytest.mark.parametrize("tool", ["echo:add", "echo:", "add"])
def test_a_principal_granted_one_tool_gets_exactly_that_tool(auth_gw: RunningGateway, tool: str) -> None:
    with httpx.Client(timeout=STEP_S) as http:
        session = open_session(http, auth_gw.mcp, ECHOER)
        call = rpc("tools/call", {"name": tool, "arguments": {"text": "x"}}, rpc_id=6)
        assert error_code(json_or_sse(session_call(http, auth_gw.mcp, session, ECHOER, call))) == CAPABILITY_DENIED
        params = {"name": tool, "arguments": {"text": "x"}}
        assert error_code(modern_call(http, auth_gw.mcp, ECHOER, "tools/call", params).json()) == CAPABILITY_DENIED
        echo = rpc("tools/call", {"name": "echo", "arguments": {"text": "x"}}, rpc_id=7)
        assert "result" in json_or_sse(session_call(http, auth_gw.mcp, session, ECHOER, echo))


def ws_exchange(gw: RunningGateway, token: str, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Send each message on /mcp/ws and return the answer to each, in order."""
    answers = []
    with connect(gw.ws("/mcp/ws"), additional_headers=auth(token), subprotocols=["mcp"], open_timeout=STEP_S) as ws:  # type: ignore[arg-type]
        for message in messages:
            ws.send(json.dumps(message))
            while True:
                frame = json.loads(ws.recv(timeout=STEP_S))
                if frame.get("id") == message.get("id"):
                    answers.append(frame)
                    break
    return answers


def test_grammar_holds_on_the_websocket_door(auth_gw: RunningGateway) -> None:
    reader = ws_exchange(
        auth_gw,
        READER,
        [initialize(), rpc("tools/call", {"name": "add/list", "arguments": {}}, 2), rpc("tools/list", rpc_id=3)],
    )
    assert error_code(reader[1]) == CAPABILITY_DENIED and "result" in reader[2]
    echoer = ws_exchange(
        auth_gw, ECHOER, [initialize(), rpc("tools/call", {"name": "echo:add", "arguments": {"text": "x"}}, 2)]
    )
    assert error_code(echoer[1]) == CAPABILITY_DENIED


def test_grammar_holds_on_the_mcpx_socket(auth_gw: RunningGateway) -> None:
    url = auth_gw.ws("/ws?topic=room")
    with connect(url, additional_headers=auth(READER), open_timeout=STEP_S) as ws:
        welcome = json.loads(ws.recv(timeout=STEP_S))
        assert welcome["kind"] == "system/welcome"
        me = welcome["payload"]["you"]["id"]
        for kind, payload in [
            ("mcp/request:tools/call:add/list", rpc("tools/call", {"name": "add/list"})),
            ("mcp/request:prompts/get:greet/list", rpc("prompts/get", {"name": "greet/list"})),
        ]:
            envelope = {
                "protocol": "mcpx/v0.1",
                "id": kind,
                "ts": "2026-11-23T00:00:00Z",
                "from": me,
                "kind": kind,
                "payload": payload,
            }
            ws.send(json.dumps(envelope))
            while True:
                message = json.loads(ws.recv(timeout=STEP_S))
                if message["kind"] == "system/error":
                    break
            assert message["correlation_id"] == kind
            assert message["payload"]["error"] == "capability_violation", message


# ================================================================ 6 and 7. malformed credentials are 401s


@pytest.mark.parametrize("token", [NESTED_HEADER_TOKEN, BAD_KID_TOKEN], ids=["nested-header", "kid-object"])
def test_malformed_jwt_is_a_401_on_every_http_door(auth_gw: RunningGateway, token: str) -> None:
    headers = {**BASE, **auth(token)}
    with httpx.Client(base_url=auth_gw.url, timeout=STEP_S) as http:
        answers = {
            "legacy": http.post("/mcp", headers=headers, json=initialize()),
            "single": http.post("/servers/demo/mcp", headers=headers, json=initialize()),
            "modern": modern_call(http, f"{auth_gw.url}/mcp", token, "tools/call", {"name": "echo", "arguments": {}}),
            "sse": http.get("/sse", headers={"accept": "text/event-stream", **auth(token)}),
            "topics": http.get("/v0.1/topics", headers=auth(token)),
        }
    for door, response in answers.items():
        assert response.status_code == 401, (door, response.status_code, response.text)
        assert response.headers.get("www-authenticate", "").startswith("Bearer"), door
    assert_no_traceback(auth_gw)


@pytest.mark.parametrize("token", [NESTED_HEADER_TOKEN, BAD_KID_TOKEN], ids=["nested-header", "kid-object"])
@pytest.mark.parametrize("path", ["/mcp/ws", "/ws?topic=room"])
def test_malformed_jwt_cannot_open_a_websocket(auth_gw: RunningGateway, token: str, path: str) -> None:
    with refused_websocket(auth_gw.ws(path), additional_headers=auth(token), subprotocols=["mcp"]):  # type: ignore[arg-type]
        pass
    with refused_websocket(auth_gw.ws(f"/ws?topic=room&token={token}")):
        pass
    assert_no_traceback(auth_gw)
