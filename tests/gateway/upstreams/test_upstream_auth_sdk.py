"""Token exchange toward a backend built on the official MCP Python SDK, with its own bearer-token auth (issue 17).

The SDK backend verifies every request's token with the test authorization server and binds each legacy session
to the principal that opened it (it answers 404 to anyone else). Through a real gateway process: each caller's
call reaches the tool as that caller (its ``whoami`` names the token's subject), on the legacy era (a session per
caller, opened with the caller's exchanged token) and on the modern era (no sessions); the gateway's own
connection is the gateway's (client_credentials), and the client's own token is refused by the backend anyway.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import mcp_types as types
import pytest
import uvicorn
from mcp.server import Server, ServerRequestContext
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings

from tests.gateway.upstreams.test_upstream_auth import Client, token
from tests.support import RunningGateway, run_gateway
from tests.support_oauth import GRANT_TOKEN_EXCHANGE, OAuthServer

pytestmark = pytest.mark.timeout(90)


class Verifier:
    """The SDK's TokenVerifier: tokens the authorization server issued for this backend (``aud`` "sdk")."""

    def __init__(self, oauth: OAuthServer) -> None:
        self._oauth = oauth

    async def verify_token(self, token: str) -> AccessToken | None:
        claims = self._oauth.claims_of(token)
        if claims is None or claims.get("aud") != "sdk":
            return None
        scopes = str(claims.get("scope", "")).split()
        client_id = str(claims.get("client_id", claims.get("sub")))
        return AccessToken(token=token, client_id=client_id, scopes=scopes, subject=claims.get("sub"), claims=claims)


async def on_list_tools(ctx: ServerRequestContext[Any, Any], params: Any) -> types.ListToolsResult:
    tool = types.Tool(name="whoami", description="The subject of this request's token", input_schema={"type": "object"})
    return types.ListToolsResult(tools=[tool])


async def on_call_tool(
    ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
) -> types.CallToolResult:
    access = get_access_token()
    subject = access.subject if access is not None else None
    return types.CallToolResult(content=[types.TextContent(text=f'{{"subject": "{subject}"}}')])


@pytest.fixture(scope="module")
def sdk_backend(oauth: OAuthServer) -> Iterator[str]:
    sock = socket.create_server(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
    server = Server("sdk-auth", version="1", on_list_tools=on_list_tools, on_call_tool=on_call_tool)
    app = server.streamable_http_app(
        streamable_http_path="/mcp",
        token_verifier=Verifier(oauth),
        auth=AuthSettings(
            issuer_url=oauth.issuer,  # type: ignore[arg-type]
            resource_server_url=url,  # type: ignore[arg-type]
            validate_token_resource=False,  # the verifier checks the audience itself
        ),
    )
    running = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=1))
    thread = threading.Thread(target=lambda: asyncio.run(running.serve(sockets=[sock])), daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not running.started:
        assert time.monotonic() < deadline and thread.is_alive(), "SDK backend did not start"
        time.sleep(0.01)
    yield url
    running.should_exit = True
    thread.join(10)


@pytest.fixture(scope="module")
def gateway(oauth: OAuthServer, sdk_backend: str) -> Iterator[RunningGateway]:
    auth = {
        "type": "token_exchange",
        "token_endpoint": oauth.token_url,
        "client_id": "gw",
        "client_secret": "gw-secret",
        "audience": "sdk",
    }
    config = {
        "auth": {"jwt": {"jwks_url": oauth.jwks_url, "issuer": oauth.issuer, "audience": "switchboard"}},
        "backends": {
            "legacy": {"transport": "http", "url": sdk_backend, "era": "legacy", "auth": auth},
            "modern": {"transport": "http", "url": sdk_backend, "era": "modern", "auth": auth},
        },
    }
    with run_gateway(config) as running:
        yield running


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_each_caller_reaches_the_sdk_backend_as_themselves(
    gateway: RunningGateway, oauth: OAuthServer, era: str
) -> None:
    alice, bob = Client(gateway, era, token(oauth, "alice")), Client(gateway, era, token(oauth, "bob"))
    for rpc_id in (1, 2):
        assert alice.seen(rpc_id) == {"subject": "alice"}
        assert bob.seen(rpc_id) == {"subject": "bob"}
    subjects = {oauth.claims_of(r.form["subject_token"])["sub"] for r in oauth.token_requests(GRANT_TOKEN_EXCHANGE)}  # type: ignore[index]
    assert {"alice", "bob"} <= subjects


def test_the_clients_own_token_would_not_do(sdk_backend: str, oauth: OAuthServer) -> None:
    """The backend accepts only tokens for itself: the client's token (for the gateway) is refused, so every
    successful call above went with an exchanged one."""
    own = token(oauth, "alice")
    request = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}}
    answer = httpx.post(sdk_backend, json=request, headers={"authorization": f"Bearer {own}"}, timeout=10)
    assert answer.status_code == 401
