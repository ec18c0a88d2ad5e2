"""The gateway's token endpoint client (gateway/upstreams/oauth_client.py) against the test authorization server.

Each client authentication method, both grants, every failure class; and, by Hypothesis, the reading of any
answer at all: a usable Bearer token with a safe header value, or a TokenError — never anything else.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from hypothesis import given, settings, strategies as st

from gateway.config_upstream_auth import ClientCredentialsAuth, TokenExchangeAuth
from gateway.upstreams.fetch import Fetched
from gateway.upstreams.oauth_client import TokenClient, TokenError
from tests.support import free_port
from tests.support_oauth import GRANT_TOKEN_EXCHANGE, OAuthServer

pytestmark = pytest.mark.timeout(30)


def cc_config(oauth: OAuthServer | None = None, **fields: Any) -> ClientCredentialsAuth:
    base: dict[str, Any] = {
        "type": "client_credentials",
        "token_endpoint": oauth.token_url if oauth else "http://127.0.0.1:1/token",
        "client_id": "gw",
        "client_secret": "pw",
    }
    return ClientCredentialsAuth.model_validate({**base, **fields})


def claims_of(oauth: OAuthServer, headers: Any) -> dict[str, Any]:
    value = headers["Authorization"]
    assert value.startswith("Bearer ")
    claims = oauth.claims_of(value[7:])
    assert claims is not None
    return claims


async def test_client_secret_basic_and_post() -> None:
    async with OAuthServer() as oauth:
        oauth.add_client("gw", "p:w&=")  # characters that must be form-encoded inside Basic (RFC 6749 §2.3.1)
        basic = await TokenClient(cc_config(oauth, client_secret="p:w&=", audience="a")).client_credentials()
        post = await TokenClient(
            cc_config(oauth, client_secret="p:w&=", client_auth="client_secret_post", scope="x y")
        ).client_credentials()
        assert claims_of(oauth, basic.headers)["aud"] == "a"
        assert claims_of(oauth, post.headers)["scope"] == "x y"
        assert [r.auth_method for r in oauth.token_requests()] == ["client_secret_basic", "client_secret_post"]


async def test_private_key_jwt_and_exchange(tmp_path: Path) -> None:
    async with OAuthServer() as oauth:
        client = oauth.add_client("gw", with_key=True, alg="EdDSA")
        assert client.key is not None
        key_file = tmp_path / "k.pem"
        key_file.write_bytes(
            client.key.private.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
        config = TokenExchangeAuth.model_validate(
            {
                "type": "token_exchange",
                "token_endpoint": oauth.token_url,
                "client_id": "gw",
                "client_assertion": {"private_key_file": str(key_file), "alg": "EdDSA", "kid": client.key.kid},
                "resource": "https://backend.example/mcp",
            }
        )
        subject = oauth.mint({"sub": "alice"})
        issued = await TokenClient(config).exchange(subject, "urn:ietf:params:oauth:token-type:access_token")
        claims = claims_of(oauth, issued.headers)
        assert claims["sub"] == "alice" and claims["aud"] == "https://backend.example/mcp"
        (request,) = oauth.token_requests(GRANT_TOKEN_EXCHANGE)
        assert request.auth_method == "private_key_jwt"
        assert request.form["subject_token_type"] == "urn:ietf:params:oauth:token-type:access_token"


async def test_failures_are_classified_and_say_no_secret() -> None:
    async with OAuthServer() as oauth:
        oauth.add_client("gw", "pw")
        client = TokenClient(cc_config(oauth, timeout_s=0.5))
        cases = [
            ("error", "refused"),
            ("status", "unavailable"),
            ("garbage", "malformed"),
            ("no_token", "malformed"),
            ("slow", "unavailable"),
        ]
        for mode, reason in cases:
            oauth.fail(mode, delay_s=2)  # type: ignore[arg-type]
            with pytest.raises(TokenError) as caught:
                await client.client_credentials()
            assert caught.value.reason == reason, (mode, caught.value.detail)
            assert "pw" not in caught.value.detail
        oauth.fail(None)
        with pytest.raises(TokenError) as wrong:
            await TokenClient(cc_config(oauth, client_secret="nope")).client_credentials()
        assert wrong.value.reason == "refused" and "invalid_client" in wrong.value.detail
    with pytest.raises(TokenError) as down:
        await TokenClient(cc_config(token_endpoint=f"http://127.0.0.1:{free_port()}/token")).client_credentials()
    assert down.value.reason == "unavailable"


def test_a_missing_key_file_fails_at_start(tmp_path: Path) -> None:
    config = cc_config(client_secret=None, client_assertion={"private_key_file": str(tmp_path / "none.pem")})
    with pytest.raises(ValueError, match="private_key_file"):
        TokenClient(config)


answers = st.one_of(
    st.binary(max_size=200),
    st.dictionaries(
        st.sampled_from(["access_token", "token_type", "expires_in", "error", "scope"]),
        st.one_of(st.text(max_size=40), st.integers(-5, 10**6), st.floats(allow_nan=True), st.none(), st.booleans()),
    ).map(lambda doc: __import__("orjson").dumps(doc)),
)


@settings(max_examples=300, deadline=None)
@given(status=st.sampled_from([200, 400, 401, 403, 500, 302]), body=answers)
def test_any_answer_is_a_safe_token_or_a_token_error(status: int, body: bytes) -> None:
    client = TokenClient(cc_config(refresh_margin_s=5))
    try:
        issued = client._read(Fetched(status, {}, body), now=100.0)
    except TokenError as exc:
        assert exc.reason in ("refused", "unavailable", "malformed")
        return
    value = issued.headers["Authorization"]
    assert status == 200 and value.startswith("Bearer ")
    assert all(0x21 <= ord(c) <= 0x7E for c in value[7:]) and "\r" not in value and "\n" not in value
    assert issued.expires_at >= 100.0
