"""Identity: static tokens, JWTs (HS256, RS256 and ES256 from a JWKS file or URL), narrowing."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa, utils

from gateway.config import Anonymous, Auth, Jwt, PrincipalConfig
from policies.auth import Authenticator, AuthError, Credentials, PrincipalRegistry, bearer_token
from policies.principal import ANONYMOUS_ALL


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def b64int(value: int, size: int | None = None) -> str:
    return b64(value.to_bytes(size or (value.bit_length() + 7) // 8, "big"))


def token(header: dict[str, Any], claims: dict[str, Any], sign: Any) -> str:
    signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(claims).encode())}"
    return f"{signing_input}.{b64(sign(signing_input.encode()))}"


def hs256(claims: dict[str, Any], secret: str = "s3cret") -> str:
    return token({"alg": "HS256"}, claims, lambda m: hmac.new(secret.encode(), m, hashlib.sha256).digest())


REGISTRY = {
    "alice": PrincipalConfig(tokens=["alice-token"], capabilities=["mcp/*", "chat"]),
    "svc": PrincipalConfig(tokens=["svc-token"], capabilities=["mcp/request:tools/*"]),
}


def authenticator(**jwt: Any) -> Authenticator:
    config = Jwt(hs256_secret="s3cret", audience="gw", issuer="iss", **jwt)
    return Authenticator(Auth(jwt=config), PrincipalRegistry(REGISTRY))


def good(**extra: Any) -> dict[str, Any]:
    return {"sub": "alice", "aud": "gw", "iss": "iss", "exp": time.time() + 60, **extra}


def test_bearer_token_parsing() -> None:
    assert bearer_token("Bearer abc") == "abc"
    assert bearer_token("bearer  abc ") == "abc"
    assert bearer_token("Basic abc") is None
    assert bearer_token("Bearer ") is None
    assert bearer_token(None) is None


def test_without_auth_everyone_is_anonymous_with_everything() -> None:
    auth = Authenticator(None, PrincipalRegistry({}))
    credentials = auth.authenticate(None)
    assert credentials == Credentials("anonymous", "anonymous")
    assert auth.principal(credentials) is ANONYMOUS_ALL
    assert not auth.required


def test_anonymous_is_refused_or_limited_as_configured() -> None:
    strict = Authenticator(Auth(), PrincipalRegistry(REGISTRY))
    with pytest.raises(AuthError) as refused:
        strict.authenticate(None)
    assert refused.value.error is None, "no token sent: no invalid_token error"
    limited = Authenticator(Auth(anonymous=Anonymous(capabilities=["mcp/request:tools/list"])), PrincipalRegistry({}))
    principal = limited.principal(limited.authenticate(None))
    assert principal.anonymous and principal.capabilities.allows("mcp/request:tools/list")
    assert not principal.capabilities.allows("mcp/request:tools/call:x")


def test_static_tokens_and_runtime_changes() -> None:
    registry = PrincipalRegistry(REGISTRY)
    auth = Authenticator(Auth(), registry)
    credentials = auth.authenticate("svc-token")
    assert credentials == Credentials("static", "svc")
    assert auth.principal(credentials).capabilities.allows("mcp/request:tools/call:x")
    with pytest.raises(AuthError) as unknown:
        auth.authenticate("svc-token-but-longer")
    assert unknown.value.error == "invalid_token"
    registry.upsert("svc", PrincipalConfig(tokens=["svc-token"], capabilities=["chat"]))
    assert not auth.principal(credentials).capabilities.allows("mcp/request:tools/call:x")
    registry.remove("svc")
    with pytest.raises(AuthError):
        auth.authenticate("svc-token")
    assert not auth.principal(credentials).capabilities.allows("chat"), "a removed principal keeps nothing"


def test_hs256_jwt_and_its_claims() -> None:
    auth = authenticator()
    credentials = auth.authenticate(hs256(good()))
    assert credentials.kind == "jwt" and credentials.name == "alice"
    assert auth.principal(credentials).capabilities.allows("chat")
    for bad in (
        hs256(good(), secret="other"),
        hs256(good(exp=time.time() - 120)),
        hs256(good(nbf=time.time() + 120)),
        hs256(good(aud="else")),
        hs256(good(iss="else")),
        hs256({"aud": "gw", "iss": "iss"}),
        "a.b.c",
        token({"alg": "none"}, good(), lambda m: b""),
    ):
        with pytest.raises(AuthError) as refused:
            auth.authenticate(bad)
        assert refused.value.error == "invalid_token"
    assert auth.authenticate(hs256(good(aud=["x", "gw"]))).name == "alice", "aud may be a list"
    assert auth.authenticate(hs256(good(exp=time.time() - 10))).name == "alice", "within the leeway"


def test_participant_id_and_principal_claim() -> None:
    auth = authenticator()
    claims = {k: v for k, v in good().items() if k != "sub"}
    assert auth.authenticate(hs256({**claims, "participantId": "agent-7"})).name == "agent-7"
    custom = authenticator(principal_claim="email")
    assert custom.authenticate(hs256(good(email="alice@example.test"))).name == "alice@example.test"


def test_a_capabilities_claim_narrows_and_never_widens() -> None:
    auth = authenticator(max_capabilities=["mcp/request:*"])
    narrowed = auth.principal(auth.authenticate(hs256(good(capabilities=["mcp/request:tools/list"]))))
    assert narrowed.capabilities.allows("mcp/request:tools/list")
    assert not narrowed.capabilities.allows("mcp/request:tools/call:x") and not narrowed.capabilities.allows("chat")
    widened = auth.principal(auth.authenticate(hs256(good(sub="svc", capabilities=["*"]))))
    assert widened.capabilities.allows("mcp/request:tools/call:x") and not widened.capabilities.allows("chat")
    stranger = auth.principal(auth.authenticate(hs256(good(sub="bob", capabilities=["mcp/request:x", "chat"]))))
    assert stranger.capabilities.allows("mcp/request:x")
    assert not stranger.capabilities.allows("chat"), "capped by max_capabilities"
    nothing = auth.principal(auth.authenticate(hs256(good(sub="bob"))))
    assert not nothing.capabilities.allows("mcp/request:x"), "an unlisted principal without a claim gets nothing"


def _rsa_jwk(key: rsa.RSAPrivateKey, kid: str) -> dict[str, Any]:
    numbers = key.public_key().public_numbers()
    return {"kty": "RSA", "kid": kid, "n": b64int(numbers.n), "e": b64int(numbers.e)}


def _ec_jwk(key: ec.EllipticCurvePrivateKey, kid: str) -> dict[str, Any]:
    numbers = key.public_key().public_numbers()
    return {"kty": "EC", "crv": "P-256", "kid": kid, "x": b64int(numbers.x, 32), "y": b64int(numbers.y, 32)}


def _rs256(key: rsa.RSAPrivateKey, kid: str, claims: dict[str, Any]) -> str:
    return token({"alg": "RS256", "kid": kid}, claims, lambda m: key.sign(m, padding.PKCS1v15(), hashes.SHA256()))


def _es256(key: ec.EllipticCurvePrivateKey, kid: str, claims: dict[str, Any]) -> str:
    def sign(message: bytes) -> bytes:
        r, s = utils.decode_dss_signature(key.sign(message, ec.ECDSA(hashes.SHA256())))
        return r.to_bytes(32, "big") + s.to_bytes(32, "big")

    return token({"alg": "ES256", "kid": kid}, claims, sign)


def test_rs256_and_es256_from_a_jwks_file(tmp_path: Path) -> None:
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ec_key = ec.generate_private_key(ec.SECP256R1())
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps({"keys": [_rsa_jwk(rsa_key, "r1"), _ec_jwk(ec_key, "e1")]}))
    auth = authenticator(jwks_file=str(jwks))
    assert auth.authenticate(_rs256(rsa_key, "r1", good())).name == "alice"
    assert auth.authenticate(_es256(ec_key, "e1", good())).name == "alice"
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    with pytest.raises(AuthError):
        auth.authenticate(_rs256(other, "r1", good()))
    with pytest.raises(AuthError):
        auth.authenticate(_rs256(rsa_key, "unknown", good()))


@pytest.fixture
async def jwks_server() -> AsyncIterator[tuple[str, dict[str, Any]]]:
    document: dict[str, Any] = {"keys": []}

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        body = json.dumps(document).encode()
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
        )
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/jwks.json", document
    finally:
        server.close()
        await server.wait_closed()


async def test_jwks_url_is_fetched_and_refetched_for_a_new_kid(jwks_server: tuple[str, dict[str, Any]]) -> None:
    url, document = jwks_server
    first = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    document["keys"] = [_rsa_jwk(first, "k1")]
    auth = authenticator(jwks_url=url)
    assert auth.jwt is not None and await auth.jwt.refresh()
    assert auth.authenticate(_rs256(first, "k1", good())).name == "alice"
    rotated = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    document["keys"] = [_rsa_jwk(first, "k1"), _rsa_jwk(rotated, "k2")]
    auth.jwt._last_fetch = 0.0  # the once-a-minute guard would otherwise hold the refresh back
    with pytest.raises(AuthError):
        auth.authenticate(_rs256(rotated, "k2", good()))  # unknown kid: refused now, refetched behind
    assert auth.jwt._fetching is not None
    await auth.jwt._fetching
    assert auth.authenticate(_rs256(rotated, "k2", good())).name == "alice"
