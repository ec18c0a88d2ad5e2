"""The test OAuth authorization server (tests/support_oauth.py) does what the other tests rely on.

Real HTTP against it: JWKS with rotation, client_credentials and RFC 8693 token exchange with the three client
authentication methods, RFC 6749 §5.2 errors, RFC 7662 introspection, RFC 8414 metadata, failure injection.
"""

from __future__ import annotations

import base64

import httpx
import jwt
import pytest

from tests.support_oauth import GRANT_CLIENT_CREDENTIALS, GRANT_TOKEN_EXCHANGE, TOKEN_TYPE_ACCESS, OAuthServer


def verify(auth: OAuthServer, token: str) -> dict[str, object]:
    keys = jwt.PyJWKSet.from_dict(httpx.get(auth.jwks_url).json())
    kid = jwt.get_unverified_header(token)["kid"]
    key = next(k for k in keys.keys if k.key_id == kid)
    return dict(jwt.decode(token, key, algorithms=[key.algorithm_name], options={"verify_aud": False}))


def test_jwks_mint_and_rotation() -> None:
    with OAuthServer() as auth:
        assert {k["kty"] for k in auth.jwks()["keys"]} == {"RSA", "EC", "OKP"}
        for alg in ("RS256", "ES256", "EdDSA"):
            assert verify(auth, auth.mint({"sub": "alice"}, alg=alg))["sub"] == "alice"
        old = auth.kids
        new = auth.rotate("ES256")
        assert auth.kids == [*old, new]
        assert jwt.get_unverified_header(auth.mint({"sub": "a"}))["kid"] == new
        auth.rotate(drop_old=True)
        assert len(auth.kids) == 1
        stale = auth.mint({"sub": "a"}, kid=old[0])  # signed by a key no longer published
        with pytest.raises(StopIteration):
            verify(auth, stale)
        assert auth.jwks_hits == 4


def test_client_credentials_with_each_client_authentication() -> None:
    with OAuthServer() as auth:
        auth.add_client("gw", "s3cret")
        keyed = auth.add_client("kgw", with_key=True)
        basic = base64.b64encode(b"gw:s3cret").decode()
        grant = {"grant_type": GRANT_CLIENT_CREDENTIALS, "scope": "tools"}
        answers = [
            httpx.post(auth.token_url, data=grant, headers={"authorization": f"Basic {basic}"}),
            httpx.post(auth.token_url, data={**grant, "client_id": "gw", "client_secret": "s3cret"}),
            httpx.post(
                auth.token_url,
                data={
                    **grant,
                    "client_assertion_type": "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
                    "client_assertion": keyed.assertion(auth.token_url),
                },
            ),
        ]
        for answer in answers:
            assert answer.status_code == 200, answer.text
            body = answer.json()
            assert body["token_type"] == "Bearer" and body["expires_in"] == 300
            assert verify(auth, body["access_token"])["scope"] == "tools"
        assert [r.auth_method for r in auth.token_requests()] == [
            "client_secret_basic",
            "client_secret_post",
            "private_key_jwt",
        ]
        wrong = httpx.post(
            auth.token_url, data=grant, headers={"authorization": "Basic " + base64.b64encode(b"gw:x").decode()}
        )
        assert wrong.status_code == 401 and wrong.json()["error"] == "invalid_client"
        assert wrong.headers["www-authenticate"].startswith("Basic")
        bad_grant = httpx.post(
            auth.token_url, data={"grant_type": "password", "client_id": "gw", "client_secret": "s3cret"}
        )
        assert bad_grant.status_code == 400 and bad_grant.json()["error"] == "unsupported_grant_type"


def test_token_exchange() -> None:
    with OAuthServer() as auth:
        auth.add_client("gw", "s3cret")
        subject = auth.mint({"sub": "alice", "scope": "read"})
        form = {
            "grant_type": GRANT_TOKEN_EXCHANGE,
            "client_id": "gw",
            "client_secret": "s3cret",
            "subject_token": subject,
            "subject_token_type": TOKEN_TYPE_ACCESS,
            "audience": "backend-a",
        }
        answer = httpx.post(auth.token_url, data=form)
        assert answer.status_code == 200, answer.text
        assert answer.json()["issued_token_type"] == TOKEN_TYPE_ACCESS
        claims = verify(auth, answer.json()["access_token"])
        assert claims["sub"] == "alice" and claims["aud"] == "backend-a" and claims["act"] == {"sub": "gw"}
        opaque = auth.issue_opaque({"sub": "bob"})
        assert httpx.post(auth.token_url, data={**form, "subject_token": opaque}).status_code == 200
        forged = OAuthServer().mint({"sub": "alice", "iss": auth.issuer})  # another server's keys
        refused = httpx.post(auth.token_url, data={**form, "subject_token": forged})
        assert refused.status_code == 400 and refused.json()["error"] == "invalid_grant"
        auth.refuse_subjects.add("alice")
        assert httpx.post(auth.token_url, data=form).json()["error"] == "invalid_grant"
        auth.allowed_audiences = {"other"}
        assert httpx.post(auth.token_url, data={**form, "subject_token": opaque}).json()["error"] == "invalid_target"
        missing = httpx.post(auth.token_url, data={**form, "subject_token_type": ""})
        assert missing.status_code == 400 and missing.json()["error"] == "invalid_request"


def test_introspection_and_metadata() -> None:
    with OAuthServer() as auth:
        auth.add_client("rs", "pw")
        creds = {"client_id": "rs", "client_secret": "pw"}
        opaque = auth.issue_opaque({"sub": "alice", "scope": "x"})
        signed = auth.mint({"sub": "bob"})
        assert httpx.post(auth.introspect_url, data={**creds, "token": opaque}).json()["sub"] == "alice"
        assert httpx.post(auth.introspect_url, data={**creds, "token": signed}).json()["active"] is True
        auth.revoke(opaque)
        assert httpx.post(auth.introspect_url, data={**creds, "token": opaque}).json() == {"active": False}
        expired = auth.issue_opaque({"sub": "c"}, expires_in=-1)
        assert httpx.post(auth.introspect_url, data={**creds, "token": expired}).json() == {"active": False}
        assert httpx.post(auth.introspect_url, data={"token": signed}).status_code == 401
        meta = httpx.get(auth.metadata_url).json()
        assert meta["issuer"] == auth.issuer and meta["token_endpoint"] == auth.token_url


async def test_failure_injection_async() -> None:
    async with OAuthServer() as auth, httpx.AsyncClient(timeout=5) as http:
        auth.add_client("gw", "s")
        form = {"grant_type": GRANT_CLIENT_CREDENTIALS, "client_id": "gw", "client_secret": "s"}
        auth.fail("status", status=503)
        assert (await http.post(auth.token_url, data=form)).status_code == 503
        auth.fail("garbage")
        assert (await http.post(auth.token_url, data=form)).text.startswith("<html>")
        auth.fail("no_token")
        assert "access_token" not in (await http.post(auth.token_url, data=form)).json()
        auth.fail("error", error="invalid_client")
        assert (await http.post(auth.token_url, data=form)).json()["error"] == "invalid_client"
        auth.fail("slow", delay_s=0.3)
        with pytest.raises(httpx.ReadTimeout):
            await http.post(auth.token_url, data=form, timeout=0.1)
        auth.fail("status", paths=("/jwks",))
        assert (await http.get(auth.jwks_url)).status_code == 503
        assert (await http.post(auth.token_url, data=form)).status_code == 200
        auth.fail(None)
        assert (await http.get(auth.jwks_url)).status_code == 200
