"""The gateway's side of identity: the entrance awaits what a token needs, the door decides from caches."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway.config import Config
from gateway.core import Gateway
from policies.auth import AuthError
from tests.support_oauth import OAuthServer

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def oauth() -> AsyncIterator[OAuthServer]:
    async with OAuthServer(algorithms=("ES256",)) as server:
        server.add_client("gw", "gw-secret")
        yield server


def scope(token: str, path: str = "/mcp") -> dict[str, Any]:
    return {"type": "http", "path": path, "headers": [(b"authorization", f"Bearer {token}".encode())]}


async def test_a_jwt_shaped_token_checked_by_introspection_is_not_kept_past_cache_s(oauth: OAuthServer) -> None:
    """Only verified JWTs go to the gateway's long-lived token cache: an introspected token, JWT-shaped or not,
    must be asked about again after cache_s, or a revocation at the server would never be heard."""
    introspection = {"endpoint": oauth.introspect_url, "client_id": "gw", "client_secret": "gw-secret", "cache_s": 1}
    gw = Gateway(Config.model_validate({"auth": {"introspection": introspection}}))
    token = oauth.mint({"sub": "alice"})
    request = scope(token)
    waiting = gw.auth_pending(request)
    assert waiting is not None
    await waiting
    assert gw.authenticate(request).kind == "introspected"
    assert gw.auth_pending(request) is None, "answered from the cache"
    oauth.revoke(token)
    await asyncio.sleep(1.1)
    waiting = gw.auth_pending(request)
    assert waiting is not None, "asked again once cache_s has passed"
    await waiting
    with pytest.raises(AuthError, match="not active"):
        gw.authenticate(request)


async def test_nothing_to_wait_for_without_a_jwks_url_or_introspection() -> None:
    gw = Gateway(Config.model_validate({"auth": {"jwt": {"hs256_secret": "x" * 32}}}))
    assert gw.auth_pending(scope("a.b.c")) is None and gw.auth_pending(scope("opaque")) is None


async def test_stopping_cancels_the_exchanges_in_progress(oauth: OAuthServer) -> None:
    introspection = {"endpoint": oauth.introspect_url, "client_id": "gw", "client_secret": "gw-secret"}
    gw = Gateway(Config.model_validate({"auth": {"introspection": introspection}}))
    oauth.fail("slow", delay_s=5.0, paths=("/introspect",))
    waiting = gw.auth_pending(scope(oauth.issue_opaque({"sub": "alice"})))
    assert waiting is not None
    await asyncio.sleep(0.05)
    gw.authenticator.close()
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(2):
            await waiting
    assert gw.authenticator.introspection is not None and not gw.authenticator.introspection._inflight
