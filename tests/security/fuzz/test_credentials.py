"""Bad credentials on every door of the auth-enabled gateway, and garbage bodies on the admin and topic APIs."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import given, strategies as st
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus
from websockets.sync.client import connect

from gateway.config import Limits
from tests.security.fuzz.clients import SseSession
from tests.security.fuzz.support import (
    ADMIN,
    ALICE,
    HEADER_BYTES,
    JSON,
    JSON_HEADERS,
    MODERN,
    SECRET,
    STEP_S,
    WS_MAX_LINE,
    Answer,
    assert_door_answer,
    b64,
    deep,
    echo_call,
    exchange,
    first_sse_event,
    fuzz,
    good_meta,
    initialize,
    modern_request,
    session_headers,
)
from tests.support import RunningGateway, hs256_jwt

pytestmark = pytest.mark.timeout(120)


# ---------------------------------------------------------------------------------------------- admin and topic APIs


def test_admin_and_topic_api_with_garbage_bodies(authed: RunningGateway, client: httpx.Client) -> None:
    """The admin API and the dev-token endpoint parse JSON bodies too: with the right token, garbage is a 4xx."""
    admin = {"authorization": f"Bearer {ADMIN}"}
    created = client.put(f"{authed.url}/admin/principals/fuzz-target", headers=admin, json={"capabilities": ["chat"]})
    assert created.status_code == 200, created.text
    bodies: list[bytes] = [b"", b"\xff", b"null", b"[]", b"5", b'"x"', b"{", deep(1000), deep(2000)]
    bodies += [json.dumps(v).encode() for v in ({"capabilities": 5}, {"capabilities": [[]]}, {"tokens": {}})]
    bodies += [json.dumps(v).encode() for v in ({"add": "x"}, {"add": [1], "remove": None}, {"participantId": []})]
    bodies += [json.dumps({"add": ["*:*:*:*", "[", "\u0000", "**", ":::"], "remove": ["*"]}).encode()]
    bodies += [json.dumps({"participantId": "p", "topic": "t", "capabilities": ["*" * 5000, ":" * 100]}).encode()]
    targets = [
        ("PUT", "/admin/principals/fuzz-target"),
        ("POST", "/admin/principals/fuzz-target/capabilities"),
        ("POST", "/admin/principals/%00/capabilities"),
        ("POST", "/admin/participants/nobody/capabilities"),
        ("POST", "/admin/pins/%ff/..%2f/approve"),
        ("POST", "/v0.1/auth/token"),
    ]
    for body in bodies:
        for method, path in targets:
            response = client.request(method, f"{authed.url}{path}", headers=admin, content=body)
            assert response.status_code < 500, (method, path, body[:100], response.status_code, response.text[:200])
    for path in ("/admin/principals", "/admin/pins", "/admin/mcpl", "/v0.1/topics", "/v0.1/topics/%ff/participants"):
        assert client.get(f"{authed.url}{path}", headers=admin).status_code in (200, 404), path
    assert client.delete(f"{authed.url}/admin/principals/fuzz-target", headers=admin).status_code == 204


@fuzz(40)
@given(
    body=st.fixed_dictionaries(
        {},
        optional={
            "capabilities": st.lists(st.text(alphabet="*:/abc.?[]\\\x00é", max_size=12) | JSON, max_size=4) | JSON,
            "add": st.lists(st.text(alphabet="*:/abc.", max_size=12), max_size=4) | JSON,
            "remove": st.lists(st.text(alphabet="*:/abc.", max_size=12), max_size=4) | JSON,
            "participantId": st.text(max_size=12) | JSON,
            "topic": st.text(max_size=12) | JSON,
        },
    ).map(lambda v: json.dumps(v).encode())
    | st.binary(max_size=100),
)
def test_admin_api_fuzzed_bodies(authed: RunningGateway, client: httpx.Client, body: bytes) -> None:
    admin = {"authorization": f"Bearer {ADMIN}"}
    for method, path in (
        ("PUT", "/admin/principals/fuzz-two"),
        ("POST", "/admin/principals/fuzz-two/capabilities"),
        ("POST", "/v0.1/auth/token"),
    ):
        response = client.request(method, f"{authed.url}{path}", headers=admin, content=body)
        assert response.status_code < 500, (method, path, body[:100], response.status_code, response.text[:200])


# ---------------------------------------------------------------------------------------------- credentials


def hs256(header: bytes, payload: bytes, secret: str = SECRET) -> str:
    """A JWT over exactly these header and payload bytes, signed with ``secret``."""
    return hs256_jwt(header, payload, secret)


B64_SEGMENTS = st.lists(st.binary(max_size=60).map(b64), min_size=1, max_size=5).map(".".join)
JWT_PARTS = st.one_of(
    JSON.map(lambda v: json.dumps(v).encode()),
    st.fixed_dictionaries(
        {"alg": st.sampled_from(["HS256", "RS256", "ES256", "none", "hs256"]) | JSON},
        optional={"kid": JSON, "typ": JSON, "crit": JSON},
    ).map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=40),
)


@st.composite
def credentials(draw: st.DrawFn) -> bytes:
    """Authorization header values, from plain junk to structurally plausible JWTs (stripped: an HTTP client
    cannot send a value with leading or trailing whitespace)."""
    return draw(_credentials()).strip()


@st.composite
def _credentials(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["junk", "bearer-junk", "segments", "jwt", "signed"]))
    if kind == "junk":
        return draw(HEADER_BYTES)
    if kind == "bearer-junk":
        return b"Bearer " + draw(HEADER_BYTES)
    if kind == "segments":
        return b"Bearer " + draw(B64_SEGMENTS).encode()
    header, payload = draw(JWT_PARTS), draw(JWT_PARTS)
    if kind == "signed":
        return b"Bearer " + hs256(header, payload).encode()
    return f"Bearer {b64(header)}.{b64(payload)}.{b64(draw(st.binary(max_size=64)))}".encode()


def assert_unauthorized(answer: Answer, what: Any = None) -> None:
    context = (what if not isinstance(what, bytes) else what[:120], answer.status, answer.raw[:300])
    assert answer.status == 401, context
    assert answer.headers.get("www-authenticate", "").startswith("Bearer "), context
    assert_door_answer(answer, what)


def assert_refused(answer: Answer, authorization: bytes, what: Any = None) -> None:
    """A 401 for bad credentials; for credentials longer than the head limit by themselves, the head's 431
    (the protocol refuses the head before any door reads it: transports/http_protocol.py)."""
    if len(authorization) <= HEAD_LIMIT:
        assert_unauthorized(answer, what)
        return
    context = (what, answer.status, answer.raw[:300])
    assert answer.status == 431, context
    assert json.loads(answer.raw)["error"]["message"] == f"Request head over {HEAD_LIMIT} bytes", context


HEAD_LIMIT = Limits().max_request_head_bytes  # the authed gateway's
DEEP_JSON = deep(3000)


def bearer_jwt(header: bytes, payload: bytes, signature: bytes = b"x") -> bytes:
    """``Bearer`` + an unsigned JWT over exactly these bytes."""
    return f"Bearer {b64(header)}.{b64(payload)}.{b64(signature)}".encode()


def bearer_signed(header: bytes, payload: bytes, secret: str = SECRET) -> bytes:
    return b"Bearer " + hs256(header, payload, secret).encode()


HS = b'{"alg": "HS256"}'
NASTY_TOKENS: dict[str, bytes] = {
    "empty-bearer": b"Bearer",
    "bearer-spaces-inside": b"Bearer      x",
    "basic": b"Basic " + base64.b64encode(b"alice:alice-token"),
    "junk": b"\xff\xfe\x80\x81",
    "bearer-junk": b"Bearer \xff\xfe\x80\x81",
    "bearer-junk-dots": b"Bearer \xff.\xfe.\x80",
    "dots-only": b"Bearer ..",
    "many-dots": b"Bearer " + b"." * 1000,
    "random-segments": bearer_jwt(b"abc", b"def", b"ghi"),
    "bad-base64": b"Bearer !!!.@@@.###",
    "padding": b"Bearer e30=.e30=.e30=",
    "one-char-segments": b"Bearer a.b.c",
    "header-not-json": bearer_jwt(b"not json", b"{}"),
    "header-invalid-utf8": bearer_jwt(b"\xff\xfe", b"{}"),
    "header-array": bearer_jwt(b"[]", b"{}"),
    "header-number": bearer_jwt(b"5", b"{}"),
    "header-string": bearer_jwt(b'"HS256"', b"{}"),
    "header-null": bearer_jwt(b"null", b"{}"),
    "payload-array": bearer_signed(HS, b"[]"),
    "payload-number": bearer_signed(HS, b"1e999"),
    "alg-list": bearer_jwt(b'{"alg": ["HS256"]}', b"{}"),
    "alg-object": bearer_jwt(b'{"alg": {"HS256": 1}}', b"{}"),
    "alg-number": bearer_jwt(b'{"alg": 256}', b"{}"),
    "alg-null": bearer_jwt(b'{"alg": null}', b"{}"),
    "alg-none": bearer_jwt(b'{"alg": "none"}', b'{"sub": "alice", "aud": "switchboard"}', b""),
    "typ-object": bearer_jwt(b'{"alg": "HS256", "typ": {"a": []}}', b"{}"),
    "kid-missing-es256": bearer_jwt(b'{"alg": "ES256", "kid": "nope"}', b"{}", b"x" * 64),
    "kid-string-es256-bad-signature": bearer_jwt(b'{"alg": "ES256", "kid": "k1"}', b"{}", b"x" * 64),
    "kid-string-rs256-on-ec-key": bearer_jwt(b'{"alg": "RS256", "kid": "k1"}', b"{}", b"x" * 256),
    "huge-token": b"Bearer " + b"a" * 100_000,
    "huge-jwt": b"Bearer " + b"a" * 50_000 + b"." + b"b" * 50_000 + b".c",
    "huge-jwt-valid-base64": bearer_jwt(b"{" + b" " * 60_000 + b"}", b"{}"),
    "signed-wrong-secret": bearer_signed(HS, b'{"sub": "alice", "aud": "switchboard"}', "other"),
    "signed-no-sub": bearer_signed(HS, b'{"aud": "switchboard"}'),
    "signed-sub-object": bearer_signed(HS, b'{"sub": {"a": 1}, "aud": "switchboard"}'),
    "signed-wrong-aud": bearer_signed(HS, b'{"sub": "alice", "aud": [[["switchboard"]]]}'),
    "signed-expired": bearer_signed(HS, b'{"sub": "alice", "aud": "switchboard", "exp": 1}'),
    "signed-exp-string": bearer_signed(HS, b'{"sub": "alice", "aud": "switchboard", "exp": "never"}'),
    "signed-exp-neg-infinity": bearer_signed(HS, b'{"sub": "alice", "aud": "switchboard", "exp": -1e999}'),
    "signed-nbf-huge": bearer_signed(HS, b'{"sub": "alice", "aud": "switchboard", "nbf": 1e308}'),
}

# Tokens that gave a 500 before policies/auth.py parsed JWTs strictly (commits dbfa914, 4aca791).
KNOWN_BAD_TOKENS: dict[str, bytes] = {
    # json.loads of a 3000-level header raised RecursionError, which is no ValueError: 500.
    "deep-header": bearer_jwt(DEEP_JSON, b"{}"),
    "deep-payload": bearer_jwt(HS, DEEP_JSON),
    "deep-header-objects": bearer_jwt(deep(3000, b'{"a":', b"}"), b"{}"),
    # A non-string kid was used as a dict key in the JWKS lookup: TypeError (unhashable), 500.
    "kid-list": bearer_jwt(b'{"alg": "ES256", "kid": [1]}', b"{}", b"x" * 64),
    "kid-object": bearer_jwt(b'{"alg": "RS256", "kid": {"k": "k1"}}', b"{}"),
}


class AuthDoors:
    """Every HTTP door of the auth-enabled gateway, with live sessions (opened by alice) where a door needs one
    before it looks at credentials."""

    def __init__(self, gw: RunningGateway, client: httpx.Client) -> None:
        self.gw = gw
        self.client = client
        alice = {"authorization": f"Bearer {ALICE}"}
        response = client.post(gw.mcp, headers={**JSON_HEADERS, **alice}, json=initialize())
        assert response.status_code == 200, response.text
        self.session_id = response.headers["mcp-session-id"]
        self.sse = SseSession(gw, alice)

    def probes(self, authorization: bytes) -> list[tuple[str, str, dict[str, Any], bytes | None]]:
        auth: dict[str, Any] = {"authorization": authorization}
        modern = modern_request("tools/list", {}, good_meta())
        return [
            ("POST", self.gw.mcp, {**JSON_HEADERS, **auth}, json.dumps(initialize()).encode()),
            ("POST", self.gw.server("demo"), {**JSON_HEADERS, **auth}, json.dumps(initialize()).encode()),
            (
                "POST",
                self.gw.mcp,
                {**JSON_HEADERS, **auth, "mcp-method": "tools/list", "mcp-protocol-version": MODERN},
                json.dumps(modern).encode(),
            ),
            ("POST", self.gw.mcp, {**session_headers(self.session_id), **auth}, json.dumps(echo_call(1, "x")).encode()),
            (
                "POST",
                self.gw.mcp,
                {**session_headers(self.session_id), **auth},
                json.dumps([{"jsonrpc": "2.0", "id": 2, "method": "ping"}]).encode(),
            ),
            ("DELETE", self.gw.mcp, {"mcp-session-id": self.session_id, **auth}, None),
            ("POST", self.sse.endpoint, {**JSON_HEADERS, **auth}, json.dumps(echo_call(1, "x")).encode()),
        ]

    def check(self, authorization: bytes) -> None:
        over = len(authorization) > HEAD_LIMIT
        for method, url, headers, body in self.probes(authorization):
            answer = exchange(self.client, method, url, headers, body)
            assert_refused(answer, authorization, (method, url, authorization[:80]))
        status, _ = first_sse_event(
            self.client,
            self.gw.mcp,
            {"accept": "text/event-stream", "mcp-session-id": self.session_id, "authorization": authorization},
        )
        assert status == (431 if over else 401), authorization[:80]
        with self.client.stream(
            "GET", f"{self.gw.url}/sse", headers={"accept": "text/event-stream", "authorization": authorization}
        ) as response:
            answer = Answer(
                response.status_code, response.headers, [], response.read() if response.status_code != 200 else b""
            )
            if answer.status != 200:
                answer.messages.append(json.loads(answer.raw))
            assert_refused(answer, authorization, ("GET /sse", authorization[:80]))
        # The admin API (its own token) and the MCPx topic API: refused too, never a 5xx.
        for path in ("/admin/principals", "/admin/pins", "/v0.1/topics", "/v0.1/topics/creds/participants"):
            response = self.client.get(f"{self.gw.url}{path}", headers={"authorization": authorization})
            context = (path, authorization[:80], response.status_code, response.text[:200])
            assert response.status_code == (431 if over else 401), context
            if not over:
                assert response.headers.get("www-authenticate", "").startswith("Bearer"), (path, response.headers)
        assert_ws_refused(self.gw, authorization)
        assert_mcpx_refused(self.gw, authorization)

    def close(self) -> None:
        self.sse.close()


def assert_ws_refused(gw: RunningGateway, authorization: bytes) -> None:
    """/mcp/ws answers bad credentials with 401 + WWW-Authenticate before the upgrade (or a 1008 close)."""
    try:
        ws = connect(
            gw.ws("/mcp/ws"),
            subprotocols=["mcp"],  # type: ignore[list-item]
            additional_headers={"authorization": authorization.decode("latin-1")},
            open_timeout=STEP_S,
            close_timeout=2,
            proxy=None,
        )
    except InvalidStatus as refused:
        status = refused.response.status_code
        if len(authorization) > WS_MAX_LINE and status == 431:
            return  # websockets refuses a header line over 8 KiB before the gateway sees it: fine
        assert status == 401, (authorization[:80], status)
        assert refused.response.headers.get("www-authenticate", "").startswith("Bearer"), refused.response.headers
        return
    except InvalidHandshake as exc:
        raise AssertionError(f"handshake failed instead of a 401: {exc!r}") from None
    with ws:
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=STEP_S)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008, closed.value


def assert_mcpx_refused(gw: RunningGateway, authorization: bytes) -> None:
    """/ws?topic= accepts, then closes with 1008 (the MCPx convention), both for the header and ?token=."""
    token = authorization.removeprefix(b"Bearer ").decode("latin-1")
    attempts: list[tuple[str, dict[str, str] | None]] = [
        ("/ws?topic=creds", {"authorization": authorization.decode("latin-1")}),
        ("/ws?topic=creds&token=" + base64.urlsafe_b64encode(token.encode()[:2000]).decode(), None),
    ]
    if token.isascii() and token.isprintable() and len(token) < 8000:
        attempts.append((f"/ws?topic=creds&token={quote(token, safe='')}", None))
    for path, headers in attempts:
        try:
            ws = connect(gw.ws(path), additional_headers=headers, open_timeout=STEP_S, close_timeout=2, proxy=None)
        except InvalidStatus as refused:
            status = refused.response.status_code
            too_long = status in (414, 431) and max(len(authorization), len(path)) > WS_MAX_LINE
            assert too_long or status in (401, 403), (authorization[:80], status)
            continue
        with ws:
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv(timeout=STEP_S)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008, (path[:80], closed.value)


@pytest.fixture
def doors(authed: RunningGateway) -> Iterator[AuthDoors]:
    with httpx.Client(timeout=STEP_S, trust_env=False) as c:
        found = AuthDoors(authed, c)
        try:
            yield found
        finally:
            found.close()


@pytest.mark.parametrize("name", list(NASTY_TOKENS))
def test_bad_credentials_on_every_door(doors: AuthDoors, name: str) -> None:
    doors.check(NASTY_TOKENS[name])


@pytest.mark.parametrize("name", list(KNOWN_BAD_TOKENS))
def test_pathological_jwt_headers_on_every_door(doors: AuthDoors, name: str) -> None:
    """Deeply nested JWT JSON and non-string ``kid`` values: 401 with WWW-Authenticate, never 500."""
    doors.check(KNOWN_BAD_TOKENS[name])


@fuzz(40)
@given(authorization=credentials())
def test_fuzzed_credentials_on_every_http_door(doors: AuthDoors, authorization: bytes) -> None:
    for method, url, headers, body in doors.probes(authorization):
        assert_unauthorized(exchange(doors.client, method, url, headers, body), (method, url, authorization[:80]))


@fuzz(20)
@given(authorization=credentials())
def test_fuzzed_credentials_on_the_sockets(authed: RunningGateway, authorization: bytes) -> None:
    assert_ws_refused(authed, authorization)
    assert_mcpx_refused(authed, authorization)


def test_signed_tokens_with_out_of_range_numbers_are_refused_not_500(doors: AuthDoors) -> None:
    """A correctly signed token whose ``exp``/``nbf`` is a number Python cannot compare with a float (an integer
    beyond float range) or is not a JSON number at all (NaN, Infinity) must be refused, never crash nor live
    forever."""
    for claims in (
        b'{"sub": "alice", "aud": "switchboard", "exp": 1' + b"0" * 400 + b"}",
        b'{"sub": "alice", "aud": "switchboard", "nbf": -1' + b"0" * 400 + b"}",
        b'{"sub": "alice", "aud": "switchboard", "exp": NaN}',
        b'{"sub": "alice", "aud": "switchboard", "exp": Infinity}',
    ):
        doors.check(b"Bearer " + hs256(b'{"alg": "HS256", "typ": "JWT"}', claims).encode())


def test_www_authenticate_challenge_stays_well_formed(doors: AuthDoors) -> None:
    """The 401 challenge quotes a reason derived from the token (e.g. its ``alg``); a quote or backslash in it must
    not break the header's quoted-string syntax (RFC 9110 §11.2), which would let a token add auth-params."""
    token = bearer_jwt(json.dumps({"alg": 'x", error="injected'}).encode(), b"{}")
    headers = {**JSON_HEADERS, "authorization": token}
    answer = exchange(doors.client, "POST", doors.gw.mcp, headers, json.dumps(initialize()).encode())
    assert_unauthorized(answer)
    challenge = answer.headers["www-authenticate"]
    params = re.fullmatch(r'Bearer (?:[a-z_]+="(?:[^"\\]|\\.)*"(?:, |$))+', challenge)
    assert params is not None, challenge
    assert challenge.count("error=") == 1, challenge
