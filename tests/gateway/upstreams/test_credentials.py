"""Upstream credential providers (gateway/upstreams/credentials.py) against the test authorization server.

The cache of exchanged tokens (per principal and subject token, bounded, expiring), single flight, failures
that are not cached, the kinds of credential that are never exchanged, the client_credentials token renewed,
principal_headers, and the binding of a call's headers to its context only.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from gateway.config import Config
from gateway.upstreams.credentials import (
    Provider,
    UpstreamCredentialError,
    UpstreamCredentials,
    call_headers,
    note_presented,
)
from tests.support_oauth import GRANT_CLIENT_CREDENTIALS, GRANT_TOKEN_EXCHANGE, OAuthServer

pytestmark = pytest.mark.timeout(30)


class Audit:
    def __init__(self) -> None:
        self.records: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, outcome: str, /, **fields: Any) -> None:
        self.records.append((outcome, fields))


def registry(oauth: OAuthServer, audit: Audit, **auth: Any) -> tuple[UpstreamCredentials, Provider]:
    base = {"token_endpoint": oauth.token_url, "client_id": "gw", "client_secret": "pw"}
    backend = {"transport": "http", "url": "http://127.0.0.1:1/mcp", "auth": {**base, **auth}}
    config = Config.model_validate({"backends": {"b": backend}})
    credentials = UpstreamCredentials(audit)
    provider = credentials.provider_for("b", config.backends["b"])
    assert provider is not None and credentials.provider_for("b", config.backends["b"]) is provider  # one per backend
    return credentials, provider


async def call_as(credentials: UpstreamCredentials, principal: str) -> str:
    bound = await credentials.bind("b", principal)
    try:
        headers = call_headers("b")
        assert headers is not None and call_headers("other") is None
        return headers["Authorization"]
    finally:
        credentials.unbind(bound)


async def test_exchange_cache_per_principal_and_subject_bounded() -> None:
    async with OAuthServer() as oauth:
        oauth.add_client("gw", "pw")
        audit = Audit()
        credentials, _provider = registry(oauth, audit, type="token_exchange", connection="none", cache_size=2)
        tokens = {name: oauth.mint({"sub": name}) for name in ("a", "b", "c")}
        for name in ("a", "a", "b", "a", "c", "b"):
            note_presented(tokens[name], "jwt")
            await call_as(credentials, name)
        # a was used after b, so c (the third key, cache_size 2) evicts b: b's next call exchanges again.
        counts = {
            n: sum(r.form["subject_token"] == t for r in oauth.token_requests(GRANT_TOKEN_EXCHANGE))
            for n, t in tokens.items()
        }
        assert counts == {"a": 1, "b": 2, "c": 1}
        assert call_headers("b") is None  # unbound after the call
        assert [o for o, _ in audit.records] == ["upstream_token_issued"] * 4
        await credentials.close()


async def test_single_flight_and_failures_not_cached() -> None:
    async with OAuthServer() as oauth:
        oauth.add_client("gw", "pw")
        audit = Audit()
        credentials, _provider = registry(oauth, audit, type="token_exchange", connection="none")
        note_presented(oauth.mint({"sub": "alice"}), "jwt")
        oauth.fail("slow", delay_s=0.3)
        answers = await asyncio.gather(*(call_as(credentials, "alice") for _ in range(8)))
        assert len(set(answers)) == 1 and len(oauth.token_requests(GRANT_TOKEN_EXCHANGE)) == 1
        note_presented(oauth.mint({"sub": "bob"}), "jwt")
        oauth.fail("status")
        with pytest.raises(UpstreamCredentialError) as failed:
            await call_as(credentials, "bob")
        assert failed.value.data == {"backend": "b", "reason": "unavailable"}
        assert audit.records[-1][0] == "upstream_credential_failed"
        assert audit.records[-1][1]["principal"] == "bob" and "pw" not in repr(audit.records[-1])
        oauth.fail(None)
        await call_as(credentials, "bob")  # the failure was not remembered
        await credentials.close()


async def test_tokens_that_are_never_exchanged() -> None:
    async with OAuthServer() as oauth:
        oauth.add_client("gw", "pw")
        credentials, _provider = registry(oauth, Audit(), type="token_exchange", connection="none")
        for token, kind in (("static-secret", "static"), ("anything", "anonymous"), (None, "jwt")):
            note_presented(token, kind)
            with pytest.raises(UpstreamCredentialError) as refused:
                await call_as(credentials, "x")
            assert refused.value.reason == "no_subject_token"
        assert oauth.token_requests() == []


async def test_client_credentials_renewed_before_expiry() -> None:
    async with OAuthServer(token_lifetime_s=2) as oauth:
        oauth.add_client("gw", "pw")
        credentials, provider = registry(oauth, Audit(), type="client_credentials", refresh_margin_s=1.5)
        assert provider.identity() is None  # no token yet: renewal started
        await provider.prepare()
        first = await call_as(credentials, "alice")
        assert await call_as(credentials, "bob") == first and provider.identity() == {"Authorization": first}
        await asyncio.sleep(0.6)  # past 2 - 1.5 s
        assert await call_as(credentials, "alice") != first
        assert len(oauth.token_requests(GRANT_CLIENT_CREDENTIALS)) == 2
        oauth.fail("error", error="invalid_client")
        await asyncio.sleep(0.6)
        with pytest.raises(UpstreamCredentialError) as refused:
            await call_as(credentials, "alice")
        assert refused.value.reason == "refused"
        with pytest.raises(ConnectionError, match="invalid_client"):
            await provider.prepare()
        await credentials.close()


async def test_principal_headers() -> None:
    if True:  # no authorization server: nothing is asked of one
        config = Config.model_validate(
            {
                "backends": {
                    "b": {
                        "transport": "http",
                        "url": "http://127.0.0.1:1/mcp",
                        "auth": {
                            "type": "principal_headers",
                            "principals": {"alice": {"Authorization": "Bearer A"}},
                            "default": {"Authorization": "Bearer D"},
                        },
                    }
                }
            }
        )
        credentials = UpstreamCredentials(Audit())
        provider = credentials.provider_for("b", config.backends["b"])
        assert provider is not None and provider.identity() is None
        assert await call_as(credentials, "alice") == "Bearer A"
        assert await call_as(credentials, "zed") == "Bearer D"


async def test_an_expired_subject_is_not_acted_for() -> None:
    async with OAuthServer() as oauth:
        oauth.add_client("gw", "pw")
        credentials, _provider = registry(oauth, Audit(), type="token_exchange", connection="none")
        note_presented(oauth.mint({"sub": "ws-user"}), "jwt", time.time() + 0.4)  # a WebSocket's handshake token
        first = await call_as(credentials, "ws-user")
        assert await call_as(credentials, "ws-user") == first
        await asyncio.sleep(0.5)
        with pytest.raises(UpstreamCredentialError, match="expired") as expired:
            await call_as(credentials, "ws-user")
        assert expired.value.reason == "no_subject_token"
        assert len(oauth.token_requests(GRANT_TOKEN_EXCHANGE)) == 1
        await credentials.close()
