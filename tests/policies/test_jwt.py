"""JWT verification on PyJWT: every safe algorithm family, keys bound to their family, the attacks refused.

Tokens are made by PyJWT with keys made by `cryptography`; the verifier reads them from a JWKS document
(policies/jwks.py) exactly as it reads a fetched one.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import warnings
from typing import Any

import jwt as pyjwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

from gateway.config import Jwt
from policies.jwks import SAFE_ALGORITHMS, load_keys
from policies.jwt import JwtVerifier, TokenError, b64url_encode

SECRET = "a-64-byte-hmac-secret-so-that-hs512-is-accepted-too-0123456789abcdef"
RSA = rsa.generate_private_key(public_exponent=65537, key_size=2048)
P256 = ec.generate_private_key(ec.SECP256R1())
P384 = ec.generate_private_key(ec.SECP384R1())
P521 = ec.generate_private_key(ec.SECP521R1())
K256 = ec.generate_private_key(ec.SECP256K1())
ED25519 = ed25519.Ed25519PrivateKey.generate()
ED448 = ed448.Ed448PrivateKey.generate()


def jwk(private: Any, kid: str, **extra: Any) -> dict[str, Any]:
    public = private.public_key()
    if isinstance(private, rsa.RSAPrivateKey):
        data = RSAAlgorithm.to_jwk(public, as_dict=True)
    elif isinstance(private, ec.EllipticCurvePrivateKey):
        data = ECAlgorithm.to_jwk(public, as_dict=True)
    else:
        data = OKPAlgorithm.to_jwk(public, as_dict=True)
    return {**data, "kid": kid, **extra}


KEYS = {"rsa": RSA, "p256": P256, "p384": P384, "p521": P521, "k256": K256, "ed25519": ED25519, "ed448": ED448}
JWKS = {"keys": [jwk(key, kid) for kid, key in KEYS.items()]}

# algorithm -> the kid of the key that signs it (None: the HMAC secret)
SIGNERS: dict[str, str | None] = {
    "HS256": None,
    "HS384": None,
    "HS512": None,
    "RS256": "rsa",
    "RS384": "rsa",
    "RS512": "rsa",
    "PS256": "rsa",
    "PS384": "rsa",
    "PS512": "rsa",
    "ES256": "p256",
    "ES384": "p384",
    "ES512": "p521",
    "ES256K": "k256",
    "EdDSA": "ed25519",
}


def claims(**extra: Any) -> dict[str, Any]:
    return {"sub": "alice", "iss": "iss", "aud": "gw", "exp": time.time() + 60, **extra}


def sign(alg: str, body: dict[str, Any], kid: str | None = None, **headers: Any) -> str:
    signer = SIGNERS.get(alg) if kid is None else kid
    key: Any = SECRET if signer is None else KEYS[signer]
    head = {**({"kid": signer} if signer is not None else {}), **headers}
    return pyjwt.encode(body, key, algorithm=alg, headers=head)


def verifier(**config: Any) -> JwtVerifier:
    verify = JwtVerifier(Jwt(**{"hs256_secret": SECRET, "issuer": "iss", **config}))
    verify.load_jwks(JWKS)
    return verify


def refused(verify: JwtVerifier, token: str) -> str:
    with pytest.raises(TokenError) as caught:
        verify.verify(token)
    return caught.value.reason


@pytest.mark.parametrize("alg", sorted(SIGNERS))
def test_every_safe_algorithm_verifies_with_its_own_key(alg: str) -> None:
    assert verifier().verify(sign(alg, claims()))["sub"] == "alice"


def test_ed448_is_eddsa_too() -> None:
    token = pyjwt.encode(claims(), ED448, algorithm="EdDSA", headers={"kid": "ed448"})
    assert verifier().verify(token)["sub"] == "alice"


def test_the_default_allow_list_is_every_safe_algorithm_and_never_none() -> None:
    assert sorted(Jwt().algorithms) == sorted(SAFE_ALGORITHMS)
    assert "none" not in SAFE_ALGORITHMS
    with pytest.raises(ValueError):
        Jwt(algorithms=["none"])  # type: ignore[list-item]
    with pytest.raises(ValueError):
        Jwt(algorithms=[])


def test_algorithms_outside_the_allow_list_are_refused() -> None:
    only_es = verifier(algorithms=["ES256"])
    assert only_es.verify(sign("ES256", claims()))["sub"] == "alice"
    for alg in ("RS256", "PS256", "HS256", "EdDSA"):
        assert refused(only_es, sign(alg, claims())) == "token algorithm is not accepted"


def raw(header: dict[str, Any], body: bytes | dict[str, Any], signature: bytes | None = None) -> str:
    """A token with exactly this header and body, HMAC-signed with the secret unless ``signature`` is given."""
    head = b64url_encode(json.dumps(header).encode())
    payload = b64url_encode(body if isinstance(body, bytes) else json.dumps(body).encode())
    if signature is None:
        signature = hmac.new(SECRET.encode(), f"{head}.{payload}".encode(), hashlib.sha256).digest()
    return f"{head}.{payload}.{b64url_encode(signature)}"


def test_a_key_verifies_only_its_own_family() -> None:
    verify = verifier()
    # An RSA signature presented as ES256 under the RSA key's kid.
    rs256 = sign("RS256", claims(), kid="rsa")
    head = b64url_encode(json.dumps({"alg": "ES256", "kid": "rsa"}).encode())
    assert refused(verify, head + rs256[rs256.index(".") :]) == "the key of this token is not for ES256"
    forged = pyjwt.encode(claims(), P256, algorithm="ES256", headers={"kid": "rsa"})
    assert refused(verify, forged) == "the key of this token is not for ES256"
    forged = pyjwt.encode(claims(), RSA, algorithm="RS256", headers={"kid": "p256"})
    assert refused(verify, forged) == "the key of this token is not for RS256"
    # ES384 on the P-256 key: right family, wrong curve.
    forged = pyjwt.encode(claims(), P384, algorithm="ES384", headers={"kid": "p256"})
    assert refused(verify, forged) == "the key of this token is not for ES384"


def test_a_jwks_keys_own_alg_and_use_are_honoured() -> None:
    verify = verifier()
    verify.load_jwks(
        {"keys": [jwk(RSA, "pinned", alg="PS256"), jwk(P256, "enc", use="enc"), jwk(P384, "ops", key_ops=["encrypt"])]}
    )
    assert verify.verify(pyjwt.encode(claims(), RSA, "PS256", {"kid": "pinned"}))["sub"] == "alice"
    assert refused(verify, pyjwt.encode(claims(), RSA, "RS256", {"kid": "pinned"})) == (
        "the key of this token is not for RS256"
    )
    assert refused(verify, pyjwt.encode(claims(), P256, "ES256", {"kid": "enc"})) == "no key for this token in the JWKS"
    assert refused(verify, pyjwt.encode(claims(), P384, "ES384", {"kid": "ops"})) == "no key for this token in the JWKS"


def test_weak_and_symmetric_jwks_keys_are_dropped() -> None:
    weak = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    oct_key = {"kty": "oct", "kid": "oct", "k": b64url_encode(SECRET.encode())}
    keys = load_keys({"keys": [jwk(weak, "weak"), oct_key, jwk(P256, "ok")]}, SAFE_ALGORITHMS)
    assert list(keys) == ["ok"]


def test_alg_none_is_refused_even_unsigned_and_even_with_a_secret() -> None:
    verify = verifier()
    unsigned = pyjwt.encode(claims(), None, algorithm="none")
    assert refused(verify, unsigned) == "token algorithm is not accepted"
    for alg in ("None", "NONE", "nOnE", ""):
        head = b64url_encode(json.dumps({"alg": alg}).encode())
        assert refused(verify, f"{head}.{unsigned.split('.')[1]}.") == "token algorithm is not accepted"


def test_hs256_signed_with_the_rsa_public_key_is_refused() -> None:
    """The classic confusion: the attacker signs HS256 with the published RSA key's PEM as the secret."""
    pem = RSA.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    head = b64url_encode(json.dumps({"alg": "HS256", "kid": "rsa"}).encode())
    body = b64url_encode(json.dumps(claims()).encode())
    mac = hmac.new(pem, f"{head}.{body}".encode(), hashlib.sha256).digest()
    forged = f"{head}.{body}.{b64url_encode(mac)}"
    assert refused(verifier(), forged) == "token signature does not verify"
    no_secret = JwtVerifier(Jwt(issuer="iss"))
    no_secret.load_jwks(JWKS)
    assert refused(no_secret, forged) == "token algorithm is not accepted"


def test_registered_claims_with_leeway() -> None:
    verify = verifier(leeway_s=30)
    now = time.time()
    assert verify.verify(sign("ES256", claims(exp=now - 10)))["sub"] == "alice", "expired within the leeway"
    assert refused(verify, sign("ES256", claims(exp=now - 60))) == "token expired"
    assert verify.verify(sign("ES256", claims(nbf=now + 10)))["sub"] == "alice"
    assert refused(verify, sign("ES256", claims(nbf=now + 60))) == "token not valid yet"
    assert verify.verify(sign("ES256", claims(iat=now + 10)))["sub"] == "alice"
    assert refused(verify, sign("ES256", claims(iat=now + 60))) == "token not valid yet"
    assert refused(verify, sign("ES256", claims(iss="evil"))) == "token issuer is not accepted"
    strict = verifier(require_exp=True)
    body = {k: v for k, v in claims().items() if k != "exp"}
    assert refused(strict, sign("ES256", body)) == "token has no expiry ('exp')"
    assert verifier().verify(sign("ES256", body))["sub"] == "alice", "exp optional unless required"


@pytest.mark.parametrize(
    ("name", "value"),
    [("exp", True), ("exp", "tomorrow"), ("nbf", [1]), ("iat", {"a": 1}), ("iss", 5), ("sub", 7), ("aud", [1])],
)
def test_registered_claims_of_the_wrong_type_are_refused(name: str, value: Any) -> None:
    assert "wrong type" in refused(verifier(), raw({"alg": "HS256"}, claims(**{name: value})))


def test_infinity_and_nan_in_claims_are_refused() -> None:
    for body in (b'{"sub":"a","exp":Infinity}', b'{"sub":"a","exp":NaN}', b'{"sub":"a","exp":1e400}'):
        assert refused(verifier(), raw({"alg": "HS256"}, body)) == "malformed token: the claims is not JSON"


def test_crit_and_b64_headers_are_refused() -> None:
    verify = verifier()
    assert "critical" in refused(verify, sign("ES256", claims(), crit=["exp"], exp=1))
    assert "critical" in refused(verify, raw({"alg": "HS256", "crit": ["b64"], "b64": False}, b""))
    assert "critical" in refused(verify, raw({"alg": "HS256", "b64": True}, claims()))


def test_header_members_of_the_wrong_type_are_refused() -> None:
    verify = verifier()
    for header in ({"alg": ["HS256"]}, {"alg": "HS256", "kid": 5}, {"alg": "HS256", "typ": {}}, {"alg": None}):
        refused(verify, raw(header, claims()))


def test_keys_in_the_token_are_never_trusted() -> None:
    """A token carrying its own key (jwk/jku/x5u header) is verified against the configured keys only."""
    attacker = ec.generate_private_key(ec.SECP256R1())
    forged = pyjwt.encode(
        claims(),
        attacker,
        algorithm="ES256",
        headers={"kid": "p256", "jwk": jwk(attacker, "p256"), "jku": "http://127.0.0.1:1/jwks"},
    )
    assert refused(verifier(), forged) == "token signature does not verify"


def test_oversize_and_malformed_tokens_are_refused_before_decoding() -> None:
    verify = verifier()
    assert "longer than" in refused(verify, "a" * 9000 + ".b.c")
    for garbage in ("", "a", "a.b", "a.b.c.d", "e30.e30.!!", "e30.e30=.e30", "W10.e30.e30", "e30.e30.e30"):
        refused(verify, garbage)


def test_an_unknown_kid_and_a_kidless_token_among_many_keys_are_refused() -> None:
    verify = verifier()
    unknown = pyjwt.encode(claims(), P256, algorithm="ES256", headers={"kid": "zzzz"})
    assert refused(verify, unknown) == "no key for this token in the JWKS"
    kidless = pyjwt.encode(claims(), P256, algorithm="ES256")
    assert refused(verify, kidless) == "no key for this token in the JWKS"
    single = JwtVerifier(Jwt())
    single.load_jwks({"keys": [{k: v for k, v in jwk(P256, "x").items() if k != "kid"}]})
    assert single.verify(kidless)["sub"] == "alice", "one key without kid serves kidless tokens"


def test_a_short_hmac_secret_still_works_and_is_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    short = JwtVerifier(Jwt(hs256_secret="s3cret"))
    assert "shorter than 32 bytes" in caplog.text
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        token = pyjwt.encode(claims(), "s3cret", algorithm="HS256")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # PyJWT's per-token warning is not raised
        assert short.verify(token)["sub"] == "alice"


def test_explicit_typing_when_required() -> None:
    typed = verifier(require_typ="at+jwt")
    for typ in ("at+jwt", "AT+JWT", "application/at+jwt"):
        assert typed.verify(sign("ES256", claims(), typ=typ))["sub"] == "alice", typ
    assert refused(typed, sign("ES256", claims(), typ="JWT")) == "token type is not accepted"
    assert refused(typed, pyjwt.encode(claims(), P256, "ES256", {"kid": "p256", "typ": None})) == (
        "token type is not accepted"
    )
    assert verifier().verify(sign("ES256", claims(), typ="JWT"))["sub"] == "alice", "not required by default"


def test_hs384_and_hs512_need_a_secret_as_long_as_their_hash() -> None:
    short = JwtVerifier(Jwt(hs256_secret="x" * 40))
    assert short.hmac_algorithms == ["HS256"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        token = pyjwt.encode(claims(), "x" * 40, algorithm="HS384")
    assert refused(short, token) == "token algorithm is not accepted"
