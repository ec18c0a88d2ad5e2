"""JWKS over HTTP from a real authorization server: first fetch, rotation, rate limit, outages, staleness."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway.config import Auth, Jwt
from policies.auth import Authenticator, AuthError, PrincipalRegistry
from tests.support_oauth import OAuthServer

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def server() -> AsyncIterator[OAuthServer]:
    async with OAuthServer() as auth:
        yield auth


def authenticator(server: OAuthServer, **jwt: Any) -> Authenticator:
    config = Jwt(jwks_url=server.jwks_url, issuer=server.issuer, audience="gw", **jwt)
    return Authenticator(Auth(jwt=config), PrincipalRegistry({}))


async def decide(auth: Authenticator, token: str) -> str:
    """What a door would get after the entrance awaited the token's network needs."""
    return (await auth.authenticate_async(token)).name


async def test_the_first_token_waits_for_the_first_fetch(server: OAuthServer) -> None:
    auth = authenticator(server)
    for alg in ("RS256", "ES256", "EdDSA"):
        assert await decide(auth, server.mint({"sub": "alice", "aud": "gw"}, alg=alg)) == "alice"
    assert server.jwks_hits == 1


async def test_a_new_kid_is_accepted_after_one_refetch(server: OAuthServer) -> None:
    auth = authenticator(server, jwks_min_refresh_s=1)
    assert auth.jwt is not None and await auth.jwt.refresh()
    assert server.jwks_hits == 1
    await asyncio.sleep(1.05)  # past the rate limit
    kid = server.rotate("RS256", drop_old=True)
    token = server.mint({"sub": "alice", "aud": "gw"}, kid=kid)
    names = await asyncio.gather(*(decide(auth, token) for _ in range(20)))
    assert names == ["alice"] * 20
    assert server.jwks_hits == 2, "twenty concurrent callers shared one refetch"


async def test_a_flood_of_unknown_kids_costs_the_issuer_one_fetch_per_interval(server: OAuthServer) -> None:
    auth = authenticator(server)
    assert auth.jwt is not None and await auth.jwt.refresh()
    made_up = [server.mint({"sub": "mallory", "aud": "gw"}, headers={"kid": uuid.uuid4().hex}) for _ in range(200)]
    results = await asyncio.gather(*(decide(auth, token) for token in made_up), return_exceptions=True)
    assert all(isinstance(r, AuthError) and r.reason == "no key for this token in the JWKS" for r in results)
    assert server.jwks_hits == 1, "within jwks_min_refresh_s of the last fetch: no refetch at all"


async def test_a_failed_refresh_keeps_the_keys_in_hand(server: OAuthServer) -> None:
    auth = authenticator(server)
    assert auth.jwt is not None and await auth.jwt.refresh()
    token = server.mint({"sub": "alice", "aud": "gw"})
    for mode in ("status", "garbage"):
        server.fail(mode, status=503, paths=("/jwks",))
        assert not await auth.jwt.refresh()
        assert await decide(auth, token) == "alice"
    server.fail(None)
    assert await auth.jwt.refresh()


async def test_a_slow_issuer_is_bounded(server: OAuthServer) -> None:
    auth = authenticator(server, jwks_timeout_s=0.3)
    server.fail("slow", delay_s=3.0, paths=("/jwks",))
    assert auth.jwt is not None
    started = asyncio.get_running_loop().time()
    assert not await auth.jwt.refresh()
    assert asyncio.get_running_loop().time() - started < 2.0


async def test_stale_keys_are_refreshed_behind_and_served_meanwhile(server: OAuthServer) -> None:
    auth = authenticator(server, jwks_cache_s=10)
    assert auth.jwt is not None and await auth.jwt.refresh()
    token = server.mint({"sub": "alice", "aud": "gw"})
    auth.jwt._loaded_at -= 61  # as if fetched a minute ago (every fetch is rate-limited, this one too)
    auth.jwt._last_fetch -= 61
    assert auth.pending(token) is None, "a known kid does not wait, even on stale keys"
    assert auth.authenticate(token).name == "alice"
    assert auth.jwt._fetching is not None
    await auth.jwt._fetching
    assert server.jwks_hits == 2


async def test_the_audience_is_checked_against_the_resource(server: OAuthServer) -> None:
    auth = authenticator(server)
    backend = "https://gw.example/servers/files/mcp"
    token = server.mint({"sub": "alice", "aud": backend})
    with pytest.raises(AuthError, match="does not include this gateway"):
        await auth.authenticate_async(token)
    assert (await auth.authenticate_async(token, backend)).name == "alice"
    with pytest.raises(AuthError, match="neither this gateway nor this server"):
        await auth.authenticate_async(token, "https://gw.example/servers/other/mcp")
    both = server.mint({"sub": "alice", "aud": ["gw", "x"]})
    assert (await auth.authenticate_async(both, backend)).name == "alice", "a token for the gateway is good everywhere"
