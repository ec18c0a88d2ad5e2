"""Identity end to end (issue 17): a real gateway process, a real authorization server (tests/support_oauth.py).

RFC 9728 metadata per resource (the gateway's and each backend's own, with the matching WWW-Authenticate on every
path), JWTs from the server's JWKS (rotation accepted on the first try), audience binding per resource (RFC 8707),
and opaque tokens by introspection (RFC 7662) with a 503 when the server cannot say.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from tests.support import JSON_HEADERS, RunningGateway, initialize_request, run_gateway
from tests.support_oauth import OAuthServer

pytestmark = pytest.mark.timeout(90)

INIT = initialize_request(1)
BASE = "https://gw.example.test"  # the public base the operator configures (auth.resource)
PINNED = "https://files.example.test/mcp"  # a backend with a resource id of its own
PINNED_V = "https://pinned.example.test/mcp"  # a virtual server with one


@pytest.fixture(scope="module")
def oauth() -> Iterator[OAuthServer]:
    with OAuthServer() as server:
        server.add_client("switchboard", "gw-secret")
        yield server


@pytest.fixture(scope="module")
def gateway(oauth: OAuthServer) -> Iterator[RunningGateway]:
    config: dict[str, Any] = {
        "backends": {
            "demo": {"transport": "builtin", "required": True},
            "files": {"transport": "builtin", "resource": PINNED},
        },
        # A virtual server is a resource of its own, as a backend is (virtual_servers.NAME.resource).
        "virtual_servers": {
            "curated": {"tools": ["demo:echo"]},
            "pinned": {"tools": ["files:add"], "resource": PINNED_V},
        },
        "auth": {
            "authorization_servers": [oauth.issuer],
            "resource": f"{BASE}/mcp",
            "jwt": {
                "jwks_url": oauth.jwks_url,
                "issuer": oauth.issuer,
                "audience": f"{BASE}/mcp",
                "jwks_min_refresh_s": 1,
                "max_capabilities": ["mcp/*"],
            },
            "introspection": {
                "endpoint": oauth.introspect_url,
                "client_id": "switchboard",
                "client_secret": "gw-secret",
                "max_capabilities": ["mcp/*"],
            },
        },
    }
    config["security"] = {"allowed_hosts": ["127.0.0.1:*", "evil.example"]}  # a Host the client chooses
    with run_gateway(config) as gw:
        yield gw


def post(url: str, token: str | None = None) -> httpx.Response:
    headers = {**JSON_HEADERS, **({"authorization": f"Bearer {token}"} if token else {})}
    return httpx.post(url, json=INIT, headers=headers, timeout=20)


def metadata_of(challenge: str) -> str:
    return challenge.split('resource_metadata="', 1)[1].split('"', 1)[0]


def test_metadata_of_the_gateway_and_of_each_backend(gateway: RunningGateway, oauth: OAuthServer) -> None:
    root = httpx.get(f"{gateway.url}/.well-known/oauth-protected-resource").json()
    assert root["resource"] == f"{BASE}/mcp" and root["authorization_servers"] == [oauth.issuer]
    assert httpx.get(f"{gateway.url}/.well-known/oauth-protected-resource/mcp").json() == root
    demo = httpx.get(f"{gateway.url}/.well-known/oauth-protected-resource/servers/demo/mcp").json()
    assert demo["resource"] == f"{BASE}/servers/demo/mcp", "derived from the configured base, not the Host"
    assert demo["authorization_servers"] == [oauth.issuer] and demo["bearer_methods_supported"] == ["header"]
    files = httpx.get(f"{gateway.url}/.well-known/oauth-protected-resource/servers/files/mcp").json()
    assert files["resource"] == PINNED
    curated = httpx.get(f"{gateway.url}/.well-known/oauth-protected-resource/servers/curated/mcp").json()
    assert curated["resource"] == f"{BASE}/servers/curated/mcp", "a virtual server's, derived as a backend's"
    pinned = httpx.get(f"{gateway.url}/.well-known/oauth-protected-resource/servers/pinned/mcp").json()
    assert pinned["resource"] == PINNED_V
    for unknown in ("servers/ghost/mcp", "servers/demo/other", "servers/Demo/mcp"):
        assert httpx.get(f"{gateway.url}/.well-known/oauth-protected-resource/{unknown}").status_code == 404


@pytest.mark.parametrize(
    ("path", "server"),
    [
        ("/mcp", None),
        ("/servers/demo/mcp", "demo"),
        ("/servers/files/mcp", "files"),
        ("/servers/curated/mcp", "curated"),
    ],
)
def test_each_401_names_the_metadata_of_its_own_resource(
    gateway: RunningGateway, path: str, server: str | None
) -> None:
    response = post(gateway.url + path)
    assert response.status_code == 401
    expected = f"{gateway.url}/.well-known/oauth-protected-resource" + (f"/servers/{server}/mcp" if server else "")
    assert metadata_of(response.headers["www-authenticate"]) == expected
    assert httpx.get(expected).status_code == 200


def test_the_legacy_sse_and_websocket_doors_name_it_too(gateway: RunningGateway) -> None:
    sse = httpx.get(f"{gateway.url}/servers/demo/sse", timeout=10)
    assert sse.status_code == 401
    assert metadata_of(sse.headers["www-authenticate"]).endswith("/oauth-protected-resource/servers/demo/mcp")
    with pytest.raises(InvalidStatus) as refused, connect(gateway.ws("/servers/demo/mcp/ws"), subprotocols=["mcp"]):  # type: ignore[list-item]
        pass
    challenge = refused.value.response.headers["www-authenticate"]
    assert metadata_of(challenge).endswith("/oauth-protected-resource/servers/demo/mcp")


def test_a_jwt_from_the_jwks_works_and_is_bound_to_its_audience(gateway: RunningGateway, oauth: OAuthServer) -> None:
    for alg in ("RS256", "ES256", "EdDSA"):
        token = oauth.mint({"sub": "alice", "aud": f"{BASE}/mcp"}, alg=alg)
        assert post(gateway.mcp, token).status_code == 200, alg
        assert post(gateway.server("demo"), token).status_code == 200, "a token for the gateway is good everywhere"
    for_demo = oauth.mint({"sub": "alice", "aud": f"{BASE}/servers/demo/mcp"})
    assert post(gateway.server("demo"), for_demo).status_code == 200
    for path in (gateway.mcp, gateway.server("files")):
        refused = post(path, for_demo)
        assert refused.status_code == 401 and 'error="invalid_token"' in refused.headers["www-authenticate"]
    for_files = oauth.mint({"sub": "alice", "aud": PINNED})
    assert post(gateway.server("files"), for_files).status_code == 200
    assert post(gateway.server("demo"), for_files).status_code == 401
    # The Host header picks no audience: a token for a resource named after an attacker's host stays out.
    evil = oauth.mint({"sub": "alice", "aud": "http://evil.example/servers/demo/mcp"})
    response = httpx.post(
        gateway.server("demo"),
        json=INIT,
        headers={**JSON_HEADERS, "authorization": f"Bearer {evil}", "host": "evil.example"},
        timeout=10,
    )
    assert response.status_code == 401 and 'error="invalid_token"' in response.headers["www-authenticate"]
    assert 'resource_metadata="http://evil.example/' in response.headers["www-authenticate"], "metadata may follow it"


def test_a_rotated_key_is_accepted_on_the_first_try(gateway: RunningGateway, oauth: OAuthServer) -> None:
    time.sleep(1.1)  # past jwks_min_refresh_s of the last fetch
    hits = oauth.jwks_hits
    kid = oauth.rotate("ES256")
    token = oauth.mint({"sub": "alice", "aud": f"{BASE}/mcp"}, kid=kid)
    assert post(gateway.mcp, token).status_code == 200, "the entrance waited for the refetch"
    assert oauth.jwks_hits == hits + 1
    started = time.monotonic()
    for i in range(30):  # made-up kids: refused, and at most one fetch per jwks_min_refresh_s (1 s here)
        bogus = oauth.mint({"sub": "mallory", "aud": f"{BASE}/mcp"}, headers={"kid": f"made-up-{i}"})
        assert post(gateway.mcp, bogus).status_code == 401
    assert oauth.jwks_hits - (hits + 1) <= int(time.monotonic() - started) + 1


def test_opaque_tokens_by_introspection(gateway: RunningGateway, oauth: OAuthServer) -> None:
    token = oauth.issue_opaque({"sub": "bob"})
    assert post(gateway.mcp, token).status_code == 200
    assert post(gateway.mcp, token).status_code == 200
    assert oauth.hits("/introspect") == 1, "the answer is cached"
    oauth.revoke(token)  # still active until the cached answer expires: the documented price of cache_s
    inactive = post(gateway.mcp, "never-issued-opaque-token")
    assert inactive.status_code == 401 and 'error="invalid_token"' in inactive.headers["www-authenticate"]


def test_an_authorization_server_that_cannot_answer_is_a_503(gateway: RunningGateway, oauth: OAuthServer) -> None:
    token = oauth.issue_opaque({"sub": "carol"})
    oauth.fail("status", status=500, paths=("/introspect",))
    try:
        response = post(gateway.mcp, token)
    finally:
        oauth.fail(None)
    assert response.status_code == 503 and response.headers["retry-after"] == "5"
    assert response.json()["error"]["code"] == -32099 and token not in response.text
    assert "www-authenticate" not in response.headers, "not a 401: the client need not re-authenticate"
    assert post(gateway.mcp, token).status_code == 200, "the failure was not cached"
    assert "Traceback" not in gateway.log() and token not in gateway.log()


def test_websockets_wait_for_introspection_too(gateway: RunningGateway, oauth: OAuthServer) -> None:
    token = oauth.issue_opaque({"sub": "dave"})
    with connect(gateway.ws(), subprotocols=["mcp"], additional_headers={"authorization": f"Bearer {token}"}):  # type: ignore[list-item]
        pass
    other = oauth.issue_opaque({"sub": "erin"})
    oauth.fail("status", status=503, paths=("/introspect",))
    try:
        with (
            pytest.raises(InvalidStatus),
            connect(gateway.ws(), subprotocols=["mcp"], additional_headers={"authorization": f"Bearer {other}"}),  # type: ignore[list-item]
        ):
            pass
    finally:
        oauth.fail(None)
    assert oauth.hits("/introspect") >= 2


def test_exchanges_with_the_authorization_server_are_counted(gateway: RunningGateway) -> None:
    # Runs after the tests above (one gateway for the module): they fetched keys and introspected tokens.
    metrics = httpx.get(f"{gateway.url}/metrics", timeout=10).text

    def count(exchange: str, outcome: str) -> float:
        prefix = f'switchboard_auth_exchanges_total{{exchange="{exchange}",outcome="{outcome}"}} '
        lines = [line for line in metrics.splitlines() if line.startswith(prefix)]
        return float(lines[0].split()[-1]) if lines else 0.0

    assert count("jwks", "ok") >= 2, "at start and after the rotation"
    assert count("introspection", "active") >= 1 and count("introspection", "inactive") >= 1
    assert count("introspection", "unavailable") >= 1


def test_an_mcpx_agent_with_an_opaque_token_in_the_query(gateway: RunningGateway, oauth: OAuthServer) -> None:
    token = oauth.issue_opaque({"sub": "agent-7", "capabilities": ["*"]})
    with connect(gateway.ws(f"/ws?topic=room&token={token}")) as ws:
        welcome = ws.recv(timeout=10)
    assert "agent-7" in str(welcome)
    with (
        pytest.raises((InvalidStatus, ConnectionClosed)),
        connect(gateway.ws("/ws?topic=room&token=never-issued-token")) as refused,
    ):
        refused.recv(timeout=10)  # the MCPx door refuses at the handshake or closes before answering
