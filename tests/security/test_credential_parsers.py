"""Every credential parser refuses bad input with AuthError (a 401 at the doors), in bounded time.

Issue 10, holes 6 and 7: a 2.7 KB token whose header is ``[[[[…]]]]`` raised ``RecursionError``, and
``{"alg":"RS256","kid":{"x":1}}`` raised ``TypeError`` with a JWKS configured; both became HTTP 500.
Beyond those two: strict base64url (no malleable tokens), typed header members and claims, no
``crit``, no algorithm/key confusion, and claims of the wrong shape refuse the token instead of
being ignored (an ignored ``capabilities`` string would have widened the grant).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from hypothesis import HealthCheck, given, settings, strategies as st

from gateway.config import Auth, Jwt, PrincipalConfig
from policies.auth import Authenticator, AuthError, PrincipalRegistry, bearer_token
from policies.jwt import JwtVerifier, TokenError, b64url_decode
from tests.support import b64url as b64, hs256_jwt

SECRET = "s3cret-for-tests"
RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEY = ec.generate_private_key(ec.SECP256R1())


def b64int(value: int) -> str:
    return b64(value.to_bytes((value.bit_length() + 7) // 8, "big"))


def raw_token(header: Any, claims: Any, signature: bytes | None = None) -> str:
    if signature is None:
        return hs256_jwt(header, claims, SECRET)
    head = b64(header if isinstance(header, bytes) else json.dumps(header).encode())
    body = b64(claims if isinstance(claims, bytes) else json.dumps(claims).encode())
    return f"{head}.{body}.{b64(signature)}"


def rs256(header: dict[str, Any], claims: dict[str, Any]) -> str:
    head, body = b64(json.dumps(header).encode()), b64(json.dumps(claims).encode())
    signature = RSA_KEY.sign(f"{head}.{body}".encode(), padding.PKCS1v15(), hashes.SHA256())
    return f"{head}.{body}.{b64(signature)}"


def claims(**extra: Any) -> dict[str, Any]:
    return {"sub": "carol", "aud": "switchboard", "exp": time.time() + 300, **extra}


@pytest.fixture(scope="module")
def jwks_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rsa_numbers = RSA_KEY.public_key().public_numbers()
    ec_numbers = EC_KEY.public_key().public_numbers()
    document = {
        "keys": [
            {"kty": "RSA", "kid": "rsa-1", "n": b64int(rsa_numbers.n), "e": b64int(rsa_numbers.e), "alg": "RS256"},
            {"kty": "EC", "kid": "ec-1", "crv": "P-256", "x": b64int(ec_numbers.x), "y": b64int(ec_numbers.y)},
            {"kty": "RSA", "kid": "enc-1", "use": "enc", "n": b64int(rsa_numbers.n), "e": b64int(rsa_numbers.e)},
            {"kty": "RSA", "kid": {"x": 1}, "n": "AQAB", "e": "AQAB"},  # a malformed key is skipped
            {"kty": "EC", "kid": "bad-ec", "crv": "P-256", "x": "!!", "y": 3},
            "not a key",
        ]
    }
    path = tmp_path_factory.mktemp("jwks") / "jwks.json"
    path.write_text(json.dumps(document))
    return path


@pytest.fixture(scope="module")
def auth(jwks_file: Path) -> Authenticator:
    jwt = Jwt(hs256_secret=SECRET, jwks_file=str(jwks_file), audience="switchboard")
    registry = PrincipalRegistry({"carol": PrincipalConfig(tokens=["carol-static"], capabilities=["mcp/*"])})
    return Authenticator(Auth(jwt=jwt), registry)


def refused(auth: Authenticator, token: str) -> AuthError:
    started = time.perf_counter()
    with pytest.raises(AuthError) as caught:
        auth.authenticate(token)
    assert time.perf_counter() - started < 0.5, "a refusal must be cheap"
    assert caught.value.error == "invalid_token"
    return caught.value


# ---- the two holes -----------------------------------------------------------------------------


def test_deeply_nested_header_is_a_refusal_not_a_recursion_error(auth: Authenticator) -> None:
    nested = b"[" * 2000 + b"]" * 2000
    token = raw_token(nested, claims())
    assert 2_500 < len(token) < 8192
    refused(auth, token)
    refused(auth, raw_token(claims(), b'{"a":' * 2000 + b"1" + b"}" * 2000))
    refused(auth, raw_token({"alg": "HS256", "x": json.loads("[" * 900 + "]" * 900)}, claims(sub=[[[]]])))


@pytest.mark.parametrize("kid", [{"x": 1}, ["rsa-1"], 1, 1.5, True])
def test_a_kid_that_is_not_a_string_is_a_refusal(auth: Authenticator, kid: Any) -> None:
    refused(auth, rs256({"alg": "RS256", "kid": kid}, claims()))


# ---- the rest of the token's form --------------------------------------------------------------


def test_good_tokens_still_pass(auth: Authenticator) -> None:
    assert auth.authenticate(raw_token({"alg": "HS256", "typ": "JWT"}, claims())).name == "carol"
    assert auth.authenticate(rs256({"alg": "RS256", "kid": "rsa-1"}, claims())).name == "carol"


@pytest.mark.parametrize(
    "header",
    [
        {"alg": "none"},
        {"alg": "HS512"},
        {"alg": ["HS256"]},
        {"alg": None},
        {},
        {"alg": "HS256", "typ": 7},
        {"alg": "HS256", "crit": ["exp"]},
        {"alg": "HS256", "kid": {"$ref": "x"}},
        [],
        "HS256",
        1,
        None,
    ],
)
def test_header_of_the_wrong_shape_is_refused(auth: Authenticator, header: Any) -> None:
    refused(auth, raw_token(header, claims()))


@pytest.mark.parametrize(
    "body",
    [
        claims(exp="tomorrow"),
        claims(exp=True),
        claims(nbf=[1]),
        claims(iat="now"),
        claims(sub=7),
        claims(sub=""),
        claims(sub="x" * 300),
        claims(aud=7),
        claims(aud=["switchboard", 7]),
        claims(iss=["a"]),
        claims(capabilities="mcp/*"),
        claims(capabilities=["mcp/*", 7]),
        claims(topic=["room"]),
        [],
        "carol",
    ],
)
def test_claims_of_the_wrong_shape_refuse_the_token(auth: Authenticator, body: Any) -> None:
    refused(auth, raw_token({"alg": "HS256"}, body))


@pytest.mark.parametrize("literal", [b"Infinity", b"NaN", b"1e999"])
def test_non_finite_expiry_never_makes_an_immortal_token(auth: Authenticator, literal: bytes) -> None:
    # "1e999" looks finite but overflows a double: Python's json module would read it as infinity.
    body = b'{"sub":"carol","aud":"switchboard","exp":' + literal + b"}"
    refused(auth, raw_token({"alg": "HS256"}, body))


def test_base64url_is_strict(auth: Authenticator) -> None:
    good = raw_token({"alg": "HS256"}, claims())
    head, body, sig = good.split(".")
    for forged in (
        f"{head}.{body}.{sig}=",  # padding
        f"{head}.{body}.{sig}!!",  # stray characters a lenient decoder skips
        f"{head}.{body}.{sig[:-1]}+",  # the standard alphabet
        f"{head} .{body}.{sig}",
        f"{head}.{body}.{sig}A",  # one more character: 4n+1 is never valid base64
        f"{head}.{body}.{sig}.",
        f"{head}..{sig}",
    ):
        refused(auth, forged)
    with pytest.raises(TokenError):
        b64url_decode("a=")


def test_algorithm_and_key_confusion_is_refused(auth: Authenticator) -> None:
    # An RS256 token naming the EC key, an ES256 token naming the RSA key, an "enc" key.
    refused(auth, rs256({"alg": "RS256", "kid": "ec-1"}, claims()))
    refused(auth, rs256({"alg": "RS256", "kid": "enc-1"}, claims()))
    head, body = b64(json.dumps({"alg": "ES256", "kid": "rsa-1"}).encode()), b64(json.dumps(claims()).encode())
    refused(auth, f"{head}.{body}.{b64(b'0' * 64)}")
    # HS256 signed with the RSA public key's bytes (the classic confusion) is just a bad signature.
    refused(auth, raw_token({"alg": "HS256"}, claims(), signature=b"\x00" * 32))


def test_oversize_tokens_are_refused_before_decoding(auth: Authenticator) -> None:
    huge = raw_token({"alg": "HS256", "pad": "x" * 100_000}, claims())
    assert "longer than" in refused(auth, huge).reason


def test_an_hs256_token_without_a_secret_and_rs256_without_keys_are_refused() -> None:
    only_secret = JwtVerifier(Jwt(hs256_secret=SECRET))
    with pytest.raises(TokenError):
        only_secret.verify(rs256({"alg": "RS256", "kid": "rsa-1"}, claims()))
    no_secret = JwtVerifier(Jwt(jwks_file=None))
    with pytest.raises(TokenError):
        no_secret.verify(raw_token({"alg": "HS256"}, claims()))


def test_bearer_header_parsing_is_total() -> None:
    for value in ("", " ", "Bearer", "Bearer\t", "Bearer \x00", "bearer x y", "Basic Zm9v", "\u2028Bearer x"):
        result = bearer_token(value)
        assert result is None or isinstance(result, str)


# ---- fuzz: arbitrary input is always a clean refusal -----------------------------------------

segment = st.one_of(
    st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", max_size=40),
    st.binary(max_size=60).map(b64),
    st.text(max_size=20),
)
json_values = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=False) | st.integers() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=12,
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(max_size=300))
def test_any_text_is_accepted_or_refused_cleanly(auth: Authenticator, text: str) -> None:
    try:
        auth.authenticate(text)
    except AuthError:
        pass


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(segment, segment, segment)
def test_any_three_segments_are_refused_cleanly(auth: Authenticator, a: str, b: str, c: str) -> None:
    with pytest.raises(AuthError):
        auth.authenticate(f"{a}.{b}.{c}")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(json_values, json_values)
def test_any_json_header_and_claims_are_refused_cleanly(auth: Authenticator, header: Any, body: Any) -> None:
    # Signed with the right secret, so only the shape decides; nothing but AuthError may escape.
    try:
        credentials = auth.authenticate(raw_token(header, body))
    except AuthError:
        return
    assert credentials.kind == "jwt" and isinstance(credentials.name, str)


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_any_jwks_document_loads_or_is_skipped(document: Any) -> None:
    verifier = JwtVerifier(Jwt())
    verifier.load_jwks(document if isinstance(document, dict) else {"keys": [document]})
    verifier.load_jwks({"keys": document})
