"""RFC 7662 introspection of opaque tokens against a real authorization server (tests/support_oauth.py)."""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import unquote

import pytest

from gateway.config import Auth, Introspection, PrincipalConfig
from policies.auth import Authenticator, AuthError, PrincipalRegistry
from policies.introspection import IntrospectionUnavailable, basic_credentials
from tests.support_oauth import OAuthServer

pytestmark = pytest.mark.timeout(60)

CLIENT, CLIENT_SECRET = "switchboard", "gw-secret:with/odd chars"


@pytest.fixture
async def server() -> AsyncIterator[OAuthServer]:
    async with OAuthServer(algorithms=("ES256",)) as auth:
        auth.add_client(CLIENT, CLIENT_SECRET)
        yield auth


def authenticator(
    server: OAuthServer, principals: dict[str, PrincipalConfig] | None = None, **extra: Any
) -> Authenticator:
    config = Introspection(endpoint=server.introspect_url, client_id=CLIENT, client_secret=CLIENT_SECRET, **extra)
    return Authenticator(Auth(introspection=config), PrincipalRegistry(principals or {}))


def introspections(server: OAuthServer) -> int:
    return server.hits("/introspect")


async def test_an_active_opaque_token_is_a_principal(server: OAuthServer) -> None:
    auth = authenticator(server, principals={"alice": PrincipalConfig(capabilities=["mcp/*", "chat"])})
    token = server.issue_opaque({"sub": "alice", "capabilities": ["mcp/request:tools/list"]})
    credentials = await auth.authenticate_async(token)
    assert (credentials.kind, credentials.name) == ("introspected", "alice")
    principal = auth.principal(credentials)
    assert principal.capabilities.allows("mcp/request:tools/list"), "the claim narrows..."
    assert not principal.capabilities.allows("chat"), "...and never widens"
    (request,) = [r for r in server.requests if r.path == "/introspect"]
    assert request.auth_method == "client_secret_basic" and request.client_id == CLIENT
    assert request.form == {"token": token, "token_type_hint": "access_token"}


async def test_an_unlisted_principal_is_capped_and_username_is_read(server: OAuthServer) -> None:
    auth = authenticator(server, max_capabilities=["mcp/request:*"])
    token = server.issue_opaque({"username": "bob", "capabilities": ["mcp/request:x", "chat"]})
    principal = auth.principal(await auth.authenticate_async(token))
    assert principal.name == "bob" and principal.capabilities.allows("mcp/request:x")
    assert not principal.capabilities.allows("chat")


async def test_inactive_revoked_and_expired_tokens_are_401(server: OAuthServer) -> None:
    auth = authenticator(server)
    revoked = server.issue_opaque({"sub": "alice"})
    server.revoke(revoked)
    expired = server.issue_opaque({"sub": "alice", "exp": int(time.time()) - 5})
    for token in ("never-issued-token", revoked, expired):
        with pytest.raises(AuthError) as refused:
            await auth.authenticate_async(token)
        assert refused.value.error == "invalid_token" and refused.value.reason == "token is not active"


async def test_answers_are_cached_and_inactive_ones_briefly(server: OAuthServer) -> None:
    auth = authenticator(server)
    good = server.issue_opaque({"sub": "alice"})
    for _ in range(5):
        assert (await auth.authenticate_async(good)).name == "alice"
    assert introspections(server) == 1
    assert auth.pending(good) is None, "a cached answer needs no await"
    for _ in range(5):
        with pytest.raises(AuthError):
            await auth.authenticate_async("bad-token-0123")
    assert introspections(server) == 2, "an inactive answer is cached too"


async def test_concurrent_requests_with_one_token_share_one_exchange(server: OAuthServer) -> None:
    auth = authenticator(server)
    token = server.issue_opaque({"sub": "alice"})
    names = await asyncio.gather(*(auth.authenticate_async(token) for _ in range(30)))
    assert {c.name for c in names} == {"alice"} and introspections(server) == 1


async def test_the_cache_never_outlives_the_token(server: OAuthServer) -> None:
    auth = authenticator(server, cache_s=300)
    token = server.issue_opaque({"sub": "alice"}, expires_in=1)
    assert (await auth.authenticate_async(token)).name == "alice"
    await asyncio.sleep(1.2)
    with pytest.raises(AuthError, match=r"token expired|not active"):
        await auth.authenticate_async(token)


async def test_an_unreachable_or_misconfigured_server_is_unavailable_not_401(server: OAuthServer) -> None:
    auth = authenticator(server)
    token = server.issue_opaque({"sub": "alice"})
    for mode in ("status", "garbage"):
        server.fail(mode, status=503, paths=("/introspect",))
        with pytest.raises(IntrospectionUnavailable):
            await auth.authenticate_async(token)
    server.fail(None)
    wrong = Authenticator(
        Auth(introspection=Introspection(endpoint=server.introspect_url, client_id=CLIENT, client_secret="nope")),
        PrincipalRegistry({}),
    )
    with pytest.raises(IntrospectionUnavailable, match="refused the gateway"):
        await wrong.authenticate_async(token)
    assert (await auth.authenticate_async(token)).name == "alice", "a failure is not cached"


async def test_a_slow_server_is_bounded(server: OAuthServer) -> None:
    auth = authenticator(server, timeout_s=0.3)
    server.fail("slow", delay_s=3.0, paths=("/introspect",))
    started = time.monotonic()
    with pytest.raises(IntrospectionUnavailable):
        await auth.authenticate_async(server.issue_opaque({"sub": "alice"}))
    assert time.monotonic() - started < 2.0


async def test_nothing_unchecked_gets_in_without_the_await(server: OAuthServer) -> None:
    auth = authenticator(server)
    token = server.issue_opaque({"sub": "alice"})
    with pytest.raises(AuthError, match="not checked yet"):
        auth.authenticate(token)
    assert introspections(server) == 0


async def test_malformed_tokens_are_refused_without_asking(server: OAuthServer) -> None:
    auth = authenticator(server)
    for token in ("has space", 'quote"', "x" * 9000, "é", "a\x00b", "=leading"):
        assert auth.pending(token) is None
        with pytest.raises(AuthError):
            await auth.authenticate_async(token)
    assert introspections(server) == 0


async def test_issuer_audience_and_refresh_tokens(server: OAuthServer) -> None:
    auth = authenticator(server, issuer=server.issuer, audience="gw")
    assert (await auth.authenticate_async(server.issue_opaque({"sub": "a", "aud": ["gw"]}))).name == "a"
    with pytest.raises(AuthError, match="audience"):
        await auth.authenticate_async(server.issue_opaque({"sub": "a", "aud": "other"}))
    resource = "https://gw.example/servers/files/mcp"
    assert (await auth.authenticate_async(server.issue_opaque({"sub": "a", "aud": resource}), resource)).name == "a"
    with pytest.raises(AuthError, match="issuer"):
        await auth.authenticate_async(server.issue_opaque({"sub": "a", "aud": "gw", "iss": "https://evil"}))
    with pytest.raises(AuthError, match="refresh token"):
        await auth.authenticate_async(server.issue_opaque({"sub": "a", "aud": "gw", "token_type": "refresh_token"}))
    with pytest.raises(AuthError, match="wrong type"):
        await auth.authenticate_async(server.issue_opaque({"sub": "a", "aud": "gw", "nbf": "soon"}))


async def test_the_cache_is_bounded(server: OAuthServer) -> None:
    auth = authenticator(server, max_entries=3)
    tokens = [server.issue_opaque({"sub": f"u{i}"}) for i in range(5)]
    for token in tokens:
        await auth.authenticate_async(token)
    assert auth.introspection is not None and len(auth.introspection._answers) == 3
    await auth.authenticate_async(tokens[0])
    assert introspections(server) == 6, "the oldest answer was evicted and asked again"


def test_client_secret_basic_form_encodes_before_base64() -> None:
    header = basic_credentials("id:1", "s p/é")
    user, _, password = base64.b64decode(header.removeprefix("Basic ")).decode().partition(":")
    assert (unquote(user), unquote(password)) == ("id:1", "s p/é")


def test_the_client_secret_is_redacted_from_the_admin_config() -> None:
    from gateway.admin import redacted

    config = Auth(introspection=Introspection(endpoint="https://as.example/i", client_id="gw", client_secret="s3"))
    shown = redacted(config.model_dump(mode="json"))
    assert shown["introspection"]["client_secret"] == "***" and "s3" not in str(shown)
