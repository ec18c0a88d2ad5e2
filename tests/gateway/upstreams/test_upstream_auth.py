"""Calling backends as the user (issue 17): a real gateway process, a real authorization server, real backends.

The authorization server is tests/support_oauth.py; the backend (auth_backend.py) answers ``whoami`` with the
credential its request carried. Clients authenticate to the gateway with JWTs the authorization server signs.
Proven here: a token exchange per principal (cached, single flight, again after re-login or expiry), the
exchanged token is the one the backend gets (never the client's own), refusals and an unreachable or broken
authorization server are the caller's clear error (-32096), never a shared credential; client_credentials
(private_key_jwt) is one token for the gateway; principal_headers picks per principal, denies the others; the
gateway's own requests (the handshake) carry its own identity.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives import serialization

from tests.gateway.upstreams.auth_backend import AuthBackend, who
from tests.support import (
    JSON_HEADERS,
    RunningGateway,
    free_port,
    initialize_request,
    modern_headers,
    modern_meta,
    run_gateway,
)
from tests.support_oauth import GRANT_CLIENT_CREDENTIALS, GRANT_TOKEN_EXCHANGE, OAuthServer

pytestmark = pytest.mark.timeout(90)

UPSTREAM_CREDENTIAL = -32096
STATIC_SECRET = "static-secret-token-of-svc"


@pytest.fixture(scope="module")
def backend() -> Iterator[AuthBackend]:
    with AuthBackend() as running:
        yield running


@pytest.fixture(scope="module")
def gateway(
    oauth: OAuthServer, backend: AuthBackend, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningGateway]:
    keyed = oauth.add_client("gw-key", with_key=True)
    assert keyed.key is not None
    pem = keyed.key.private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    key_file = tmp_path_factory.mktemp("keys") / "gw.pem"
    key_file.write_bytes(pem)
    exchange = {"type": "token_exchange", "token_endpoint": oauth.token_url, "client_id": "gw"}
    audit_file = tmp_path_factory.mktemp("audit") / "audit.jsonl"
    config: dict[str, Any] = {
        "audit": {"file": str(audit_file)},
        "auth": {"jwt": {"jwks_url": oauth.jwks_url, "issuer": oauth.issuer, "audience": "switchboard"}},
        "principals": {"svc": {"tokens": [STATIC_SECRET], "capabilities": ["*"]}},
        "backends": {
            "ex": {
                "transport": "http",
                "url": backend.url("/ex"),
                "auth": {**exchange, "client_secret": "gw-secret", "audience": "ex-aud", "scope": "tools"},
            },
            "short": {  # tokens live 2 s, renewed 1 s before: fresh for about 1 s
                "transport": "http",
                "url": backend.url("/short"),
                "auth": {**exchange, "client_secret": "gw-secret", "refresh_margin_s": 1, "connection": "none"},
            },
            "cc": {
                "transport": "http",
                "url": backend.url("/cc"),
                "auth": {
                    "type": "client_credentials",
                    "token_endpoint": oauth.token_url,
                    "client_id": "gw-key",
                    "client_assertion": {"private_key_file": str(key_file), "alg": keyed.key.alg},
                    "audience": "cc-aud",
                },
            },
            "ph": {
                "transport": "http",
                "url": backend.url("/ph"),
                "headers": {"X-Extra": "1"},
                "auth": {
                    "type": "principal_headers",
                    "principals": {"alice": {"X-Api-Key": "alice-key"}},
                    "connection": {"X-Api-Key": "gateway-key"},
                },
            },
            "bx": {  # a backend that binds each session to the credential that opened it
                "transport": "http",
                "url": backend.url("/bound-ex"),
                "auth": {**exchange, "client_secret": "gw-secret", "audience": "bx-aud"},
            },
            "bph": {
                "transport": "http",
                "url": backend.url("/bound-ph"),
                "auth": {
                    "type": "principal_headers",
                    "principals": {"alice": {"X-Api-Key": "alice-key"}, "bob": {"X-Api-Key": "bob-key"}},
                    "connection": {"X-Api-Key": "gateway-key"},
                },
            },
            "ccdead": {  # the gateway's own token cannot be had: it does not even connect
                "transport": "http",
                "url": backend.url("/ccdead"),
                "auth": {
                    "type": "client_credentials",
                    "token_endpoint": f"http://127.0.0.1:{free_port()}/token",
                    "client_id": "gw",
                    "client_secret": "x",
                    "timeout_s": 2,
                },
            },
            "dead": {  # its authorization server is not there
                "transport": "http",
                "url": backend.url("/dead"),
                "auth": {
                    "type": "token_exchange",
                    "token_endpoint": f"http://127.0.0.1:{free_port()}/token",
                    "client_id": "gw",
                    "client_secret": "x",
                    "connection": "none",
                    "timeout_s": 2,
                },
            },
        },
    }
    with run_gateway(config) as running:
        yield running


def token(oauth: OAuthServer, sub: str, **claims: Any) -> str:
    return oauth.mint({"sub": sub, "aud": "switchboard", "capabilities": ["*"], **claims}, alg="RS256")


def answer_of(response: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC answer of a POST, whether JSON or an SSE stream."""
    assert response.status_code == 200, response.text
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        for line in response.text.splitlines():
            if line.startswith("data:") and line[5:].strip():
                message = json.loads(line[5:])
                if "id" in message and "method" not in message:
                    return dict(message)
        raise AssertionError(f"no answer in {response.text!r}")
    return dict(response.json())


class Client:
    """A legacy-era MCP client of one single-backend view, with a bearer token."""

    def __init__(self, gateway: RunningGateway, backend: str, bearer: str) -> None:
        self.url = gateway.server(backend)
        self.http = httpx.Client(timeout=20)
        self.headers = {**JSON_HEADERS, "authorization": f"Bearer {bearer}"}
        opened = self.http.post(self.url, json=initialize_request(client="auth-test"), headers=self.headers)
        assert "result" in answer_of(opened)
        self.headers["mcp-session-id"] = opened.headers["mcp-session-id"]
        self.http.post(self.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=self.headers)

    def whoami(self, rpc_id: int = 1) -> dict[str, Any]:
        request = {
            "jsonrpc": "2.0",
            "id": rpc_id,
            "method": "tools/call",
            "params": {"name": "whoami", "arguments": {}},
        }
        return answer_of(self.http.post(self.url, json=request, headers=self.headers))

    def seen(self, rpc_id: int = 1) -> dict[str, Any]:
        """What the backend says this call carried."""
        answer = self.whoami(rpc_id)
        assert "result" in answer, answer
        return dict(json.loads(answer["result"]["content"][0]["text"]))


def bearer_claims(oauth: OAuthServer, authorization: str | None) -> dict[str, Any]:
    assert authorization is not None and authorization.startswith("Bearer ")
    claims = oauth.claims_of(authorization[7:])
    assert claims is not None, "the backend got a token the authorization server did not issue"
    return claims


def exchanges_for(oauth: OAuthServer, subject: str) -> int:
    return sum(1 for r in oauth.token_requests(GRANT_TOKEN_EXCHANGE) if r.form.get("subject_token") == subject)


def test_the_callers_token_is_exchanged_once_and_never_forwarded(
    gateway: RunningGateway, oauth: OAuthServer, backend: AuthBackend
) -> None:
    alice, bob = token(oauth, "alice", scope="tools"), token(oauth, "bob")
    client = Client(gateway, "ex", alice)
    first = bearer_claims(oauth, client.seen(1)["authorization"])
    assert first["sub"] == "alice" and first["aud"] == "ex-aud" and first["act"] == {"sub": "gw"}
    assert first["scope"] == "tools"
    assert client.seen(2)["authorization"] == client.seen(3)["authorization"]  # cached
    other = Client(gateway, "ex", bob)
    assert bearer_claims(oauth, other.seen()["authorization"])["sub"] == "bob"
    assert exchanges_for(oauth, alice) == 1 and exchanges_for(oauth, bob) == 1
    request = next(r for r in oauth.token_requests(GRANT_TOKEN_EXCHANGE) if r.form["subject_token"] == alice)
    assert request.auth_method == "client_secret_basic" and request.form["audience"] == "ex-aud"
    # The clients' own tokens never reached the backend, on any request.
    for seen in backend.seen:
        assert all(alice not in value and bob not in value for value in seen.headers.values())
    # The gateway's own requests (the handshake) went as the gateway, by client_credentials.
    handshake = [s for s in backend.seen if s.path == "/ex" and s.method == "initialize"]
    assert handshake and bearer_claims(oauth, handshake[0].headers.get("authorization"))["sub"] == "gw"


def test_a_new_token_after_relogin_is_exchanged_again(gateway: RunningGateway, oauth: OAuthServer) -> None:
    before, after = token(oauth, "erin"), token(oauth, "erin", session="2")
    assert bearer_claims(oauth, Client(gateway, "ex", before).seen()["authorization"])["sub"] == "erin"
    assert bearer_claims(oauth, Client(gateway, "ex", after).seen()["authorization"])["sub"] == "erin"
    assert exchanges_for(oauth, before) == 1 and exchanges_for(oauth, after) == 1


def test_concurrent_calls_of_one_principal_share_one_exchange(gateway: RunningGateway, oauth: OAuthServer) -> None:
    carol = token(oauth, "carol")
    clients = [Client(gateway, "ex", carol) for _ in range(6)]
    oauth.fail("slow", delay_s=0.5)  # the exchange takes a while: every call arrives while it runs
    try:
        with ThreadPoolExecutor(6) as pool:
            seen = list(pool.map(lambda client: client.seen(), clients))
    finally:
        oauth.fail(None)
    assert len({s["authorization"] for s in seen}) == 1
    assert exchanges_for(oauth, carol) == 1


def test_an_exchanged_token_is_renewed_when_it_expires(gateway: RunningGateway, oauth: OAuthServer) -> None:
    dave = token(oauth, "dave")
    client = Client(gateway, "short", dave)
    oauth.token_lifetime_s = 2
    try:
        client.seen(1)
        client.seen(2)
        assert exchanges_for(oauth, dave) == 1
        deadline_calls = 0
        while exchanges_for(oauth, dave) == 1 and deadline_calls < 40:  # fresh for ~1 s; bounded
            time.sleep(0.1)
            client.seen(3)
            deadline_calls += 1
        assert exchanges_for(oauth, dave) == 2, "the expired token was not exchanged again"
    finally:
        oauth.token_lifetime_s = 300


@pytest.mark.parametrize(
    ("mode", "reason"),
    [("refuse", "refused"), ("status", "unavailable"), ("garbage", "malformed"), ("no_token", "malformed")],
)
def test_a_failed_exchange_is_the_callers_clear_error(
    gateway: RunningGateway, oauth: OAuthServer, backend: AuthBackend, mode: str, reason: str
) -> None:
    name = f"mallory-{mode}"
    mallory = token(oauth, name)
    client = Client(gateway, "ex", mallory)
    calls_before = len(backend.calls("/ex"))
    if mode == "refuse":
        oauth.refuse_subjects.add(name)
    else:
        oauth.fail(mode)  # type: ignore[arg-type]
    try:
        answer = client.whoami()
    finally:
        oauth.fail(None)
    error = answer["error"]
    assert error["code"] == UPSTREAM_CREDENTIAL and error["data"] == {"backend": "ex", "reason": reason}
    assert "ex" in error["message"] and mallory not in json.dumps(answer)
    assert len(backend.calls("/ex")) == calls_before  # nothing went to the backend, not even as the gateway
    assert "Traceback" not in gateway.log()


def test_an_unreachable_authorization_server_is_a_clear_error(gateway: RunningGateway, oauth: OAuthServer) -> None:
    answer = Client(gateway, "dead", token(oauth, "alice")).whoami()
    assert answer["error"]["code"] == UPSTREAM_CREDENTIAL
    assert answer["error"]["data"]["reason"] == "unavailable"
    assert answer["error"]["message"] == "cannot call backend dead: the authorization server is unavailable"
    assert "127.0.0.1" not in json.dumps(answer), "where the authorization server is stays in the audit record"


def test_a_static_token_is_never_sent_to_the_authorization_server(gateway: RunningGateway, oauth: OAuthServer) -> None:
    answer = Client(gateway, "ex", STATIC_SECRET).whoami()
    assert answer["error"]["code"] == UPSTREAM_CREDENTIAL
    assert answer["error"]["data"]["reason"] == "no_subject_token"
    assert all(STATIC_SECRET not in json.dumps(r.form) for r in oauth.requests)


def test_client_credentials_is_the_gateways_one_token(gateway: RunningGateway, oauth: OAuthServer) -> None:
    seen_alice = Client(gateway, "cc", token(oauth, "alice")).seen()
    seen_bob = Client(gateway, "cc", token(oauth, "bob")).seen()
    assert seen_alice["authorization"] == seen_bob["authorization"]
    claims = bearer_claims(oauth, seen_alice["authorization"])
    assert claims["sub"] == "gw-key" and claims["aud"] == "cc-aud"
    granted = [r for r in oauth.token_requests(GRANT_CLIENT_CREDENTIALS) if r.client_id == "gw-key"]
    assert len(granted) == 1 and granted[0].auth_method == "private_key_jwt"


def test_principal_headers_pick_per_principal_and_deny_the_rest(
    gateway: RunningGateway, oauth: OAuthServer, backend: AuthBackend
) -> None:
    assert Client(gateway, "ph", token(oauth, "alice")).seen()["x-api-key"] == "alice-key"
    answer = Client(gateway, "ph", token(oauth, "bob")).whoami()
    assert answer["error"]["code"] == UPSTREAM_CREDENTIAL
    assert answer["error"]["data"]["reason"] == "no_credential_for_principal"
    handshake = [s for s in backend.seen if s.path == "/ph" and s.method == "initialize"]
    assert handshake[0].headers["x-api-key"] == "gateway-key" and handshake[0].headers["x-extra"] == "1"
    assert [s.headers.get("x-api-key") for s in backend.calls("/ph")] == ["alice-key"]


def audit_records(gateway: RunningGateway) -> list[dict[str, Any]]:
    import yaml

    path = yaml.safe_load(gateway.config_path.read_text())["audit"]["file"]
    deadline = time.monotonic() + 5
    while True:  # written from a thread: wait (bounded) for the records of the tests that ran
        text = Path(path).read_text() if Path(path).exists() else ""
        records = [json.loads(line) for line in text.splitlines() if line.strip()]
        if any(r["outcome"] == "upstream_credential_failed" for r in records) or time.monotonic() > deadline:
            return records
        time.sleep(0.05)


def test_failures_are_audited_without_secrets(gateway: RunningGateway, oauth: OAuthServer) -> None:
    Client(gateway, "ph", token(oauth, "zoe")).whoami()  # refused: no entry for zoe
    records = audit_records(gateway)
    failed = [r for r in records if r["outcome"] == "upstream_credential_failed"]
    assert {"backend": "ph", "principal": "zoe", "reason": "no_credential_for_principal"}.items() <= failed[-1].items()
    issued = [r for r in records if r["outcome"] == "upstream_token_issued"]
    assert any(r["grant"] == "token_exchange" and r["backend"] == "ex" for r in issued)
    log = gateway.log() + json.dumps(records)
    assert "gw-secret" not in log and STATIC_SECRET not in log
    for request in oauth.token_requests():
        subject = request.form.get("subject_token")
        if subject:
            assert subject not in log


@pytest.mark.parametrize(
    ("name", "path", "gateway_is"), [("bx", "/bound-ex", "gw"), ("bph", "/bound-ph", "gateway-key")]
)
def test_a_backend_that_binds_sessions_gets_a_session_per_caller(
    gateway: RunningGateway, oauth: OAuthServer, backend: AuthBackend, name: str, path: str, gateway_is: str
) -> None:
    alice, bob = Client(gateway, name, token(oauth, "alice")), Client(gateway, name, token(oauth, "bob"))
    first, other, again = alice.seen(1), bob.seen(1), alice.seen(2)
    assert first["session"] == again["session"] != other["session"]
    opened = [who(s.headers) for s in backend.seen if s.path == path and s.method == "initialize"]
    callers = {"alice", "bob"} if name == "bx" else {"alice-key", "bob-key"}
    assert opened[0] == gateway_is and set(opened[1:]) == callers and len(opened) == 3
    # The backend forgets alice's session: her next call opens a new one, and nobody else notices.
    backend.end_sessions_of("alice" if name == "bx" else "alice-key")
    renewed = alice.seen(3)
    assert renewed["session"] not in (first["session"], other["session"])
    assert bob.seen(2)["session"] == other["session"]
    opened = [who(s.headers) for s in backend.seen if s.path == path and s.method == "initialize"]
    assert opened.count(gateway_is) == 1, "the shared connection was never lost"


async def ws_answer(ws: Any, rpc_id: int) -> dict[str, Any]:
    """The answer to request ``rpc_id`` on a WebSocket, within a bounded wait (other frames skipped)."""
    async with asyncio.timeout(20):
        while True:
            message = json.loads(await ws.recv())
            if message.get("id") == rpc_id and "method" not in message:
                return dict(message)


async def test_over_websocket_the_handshakes_token_is_exchanged(gateway: RunningGateway, oauth: OAuthServer) -> None:
    from websockets.asyncio.client import connect

    frank = token(oauth, "frank")
    url = gateway.ws("/servers/ex/mcp/ws")
    async with connect(url, subprotocols=["mcp"], additional_headers={"Authorization": f"Bearer {frank}"}) as ws:
        await ws.send(json.dumps(initialize_request(client="ws-test")))
        assert "result" in await ws_answer(ws, 0)
        await ws.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        for rpc_id in (1, 2):
            call = {
                "jsonrpc": "2.0",
                "id": rpc_id,
                "method": "tools/call",
                "params": {"name": "whoami", "arguments": {}},
            }
            await ws.send(json.dumps(call))
            answer = await ws_answer(ws, rpc_id)
            seen = json.loads(answer["result"]["content"][0]["text"])
            assert bearer_claims(oauth, seen["authorization"])["sub"] == "frank"
    assert exchanges_for(oauth, frank) == 1


def test_a_modern_client_is_exchanged_per_request(gateway: RunningGateway, oauth: OAuthServer) -> None:
    grace = token(oauth, "grace")
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "whoami", "arguments": {}, "_meta": modern_meta("modern-test")},
    }
    headers = {**modern_headers("tools/call", "whoami"), "authorization": f"Bearer {grace}"}
    with httpx.Client(timeout=20) as http:
        for _ in range(2):
            answer = answer_of(http.post(gateway.server("ex"), json=call, headers=headers))
            seen = json.loads(answer["result"]["content"][0]["text"])
            assert bearer_claims(oauth, seen["authorization"])["sub"] == "grace"
    assert exchanges_for(oauth, grace) == 1


def test_without_its_own_token_the_gateway_does_not_connect(gateway: RunningGateway, backend: AuthBackend) -> None:
    deadline = time.monotonic() + 10
    while True:  # the first connect attempt ends quickly (nothing listens there); bounded wait all the same
        state = httpx.get(f"{gateway.url}/readyz", timeout=5).json()["backends"]["ccdead"]
        if state["error"] or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert state["state"] != "ready" and "client_credentials token" in state["error"]
    assert not [s for s in backend.seen if s.path == "/ccdead"], "nothing went to the backend without a credential"
