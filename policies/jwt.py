"""JSON Web Tokens: strict parsing and signature checks (RFC 7515, RFC 7519), bounded in cost.

A token reaches this module before anything about its sender is known, so it is attacker input.
Invariants (issue 10, holes 6 and 7):

- Every malformed, unsigned or unverifiable token raises :class:`TokenError`, never anything else,
  so the front doors answer 401 with ``WWW-Authenticate`` and log no traceback.
- The cost is bounded before any decoding: at most ``max_bytes`` (default 8 KiB), exactly three
  segments of strict base64url (RFC 7515 §2: the URL-safe alphabet without padding; a lenient
  decoder that skips stray characters would make tokens malleable).
- Header and claims are JSON objects, parsed by orjson: nesting is bounded (1024 levels, an error
  rather than a ``RecursionError``) and ``NaN``/``Infinity`` are refused, so ``exp: Infinity``
  cannot mint an immortal token.
- Header members have the types RFC 7515 §4.1 gives them (``alg``, ``kid``, ``typ`` strings); a
  ``crit`` header is refused, since this verifier understands no extension (§4.1.11).
- The algorithm is one of HS256, RS256, ES256 and the key must be of its type (no algorithm
  confusion): HS256 only with the configured secret, RS256/ES256 only with a JWKS key of the
  matching ``kty`` whose own ``alg`` (if any) agrees and whose ``use`` (if any) is ``sig``.
- Registered claims are typed (RFC 7519 §4.1): ``exp``/``nbf``/``iat`` numbers (not booleans),
  ``iss`` and ``sub`` strings, ``aud`` a string or a list of strings.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import logging
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from gateway.config import Jwt

log = logging.getLogger(__name__)

ALGORITHMS = ("HS256", "RS256", "ES256")
_KEY_TYPE = {"RS256": "RSA", "ES256": "EC"}
_B64URL = re.compile(r"[A-Za-z0-9_-]*")
_JWKS_MIN_INTERVAL_S = 60.0
_MAX_JWKS_KEYS = 64


class TokenError(ValueError):
    """The token is refused; ``reason`` is safe to show the caller (it echoes nothing of the token)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def b64url_decode(segment: str) -> bytes:
    """Strict base64url without padding (RFC 7515 §2 and Appendix C)."""
    if len(segment) % 4 == 1 or not _B64URL.fullmatch(segment):
        raise TokenError("malformed token: a segment is not base64url")
    try:
        return base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))
    except (binascii.Error, ValueError):
        raise TokenError("malformed token: a segment is not base64url") from None


def b64url_encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _hs256(secret: str, signing_input: bytes) -> bytes:
    return hmac.new(secret.encode(), signing_input, hashlib.sha256).digest()


def mint_hs256(claims: dict[str, Any], secret: str) -> str:
    """An HS256 JWT that :class:`JwtVerifier` accepts with the same secret (MCPx dev tokens)."""
    head = b64url_encode(json.dumps({"alg": "HS256", "typ": "JWT"}, separators=(",", ":")).encode())
    body = b64url_encode(json.dumps(claims, separators=(",", ":")).encode())
    return f"{head}.{body}.{b64url_encode(_hs256(secret, f'{head}.{body}'.encode()))}"


def _json_object(raw: bytes, what: str) -> dict[str, Any]:
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise TokenError(f"malformed token: the {what} is not JSON") from None
    if not isinstance(value, dict):
        raise TokenError(f"malformed token: the {what} is not a JSON object")
    return value


def _optional(mapping: dict[str, Any], key: str, types: type | tuple[type, ...], what: str) -> Any:
    value = mapping.get(key)
    if value is not None and (not isinstance(value, types) or isinstance(value, bool)):
        raise TokenError(f"malformed token: {what} {key!r} has the wrong type")
    return value


class JwtVerifier:
    def __init__(self, config: Jwt) -> None:
        self.config = config
        self._keys: dict[str | None, tuple[str, Any, Any]] = {}  # kid -> (kty, public key, the JWK's alg)
        self._last_fetch = 0.0
        self._fetching: Any = None  # the background refresh in progress, if any
        if config.jwks_file:
            self.load_jwks(json.loads(Path(config.jwks_file).read_text()))

    # ---- keys --------------------------------------------------------------------------------

    async def refresh(self) -> bool:
        """Fetch ``jwks_url`` (keys rotate: an unknown kid triggers this, at most once a minute)."""
        if not self.config.jwks_url:
            return False
        from gateway.upstreams.fetch import fetch
        from gateway.upstreams.httpclient import HttpError

        self._last_fetch = time.monotonic()
        try:
            answer = await fetch("GET", self.config.jwks_url, headers={"accept": "application/json"})
            if answer.status != 200:
                raise HttpError(f"HTTP {answer.status}")
            document = orjson.loads(answer.body)
            if not isinstance(document, dict):
                raise ValueError("the JWKS is not a JSON object")
            self.load_jwks(document)
            log.info("JWKS loaded from %s: %d key(s)", self.config.jwks_url, len(self._keys))
            return True
        except (HttpError, ValueError) as exc:
            log.error("JWKS fetch from %s failed: %s", self.config.jwks_url, exc)
            return False

    def _refresh_soon(self) -> None:
        import asyncio

        if not self.config.jwks_url or time.monotonic() - self._last_fetch < _JWKS_MIN_INTERVAL_S:
            return
        if self._fetching is not None and not self._fetching.done():
            return
        try:
            self._fetching = asyncio.get_running_loop().create_task(self.refresh())
        except RuntimeError:
            pass

    def load_jwks(self, document: dict[str, Any]) -> None:
        """Keep the signing keys of a JWKS; a key that is malformed or not for signatures is skipped."""
        from cryptography.hazmat.primitives.asymmetric import ec, rsa

        keys: dict[str | None, tuple[str, Any, Any]] = {}
        entries = document.get("keys") if isinstance(document, dict) else None
        for jwk in entries if isinstance(entries, list) else []:
            if len(keys) >= _MAX_JWKS_KEYS:
                log.warning("JWKS has more than %d keys; the rest are ignored", _MAX_JWKS_KEYS)
                break
            if not isinstance(jwk, dict):
                continue
            kid, kty = jwk.get("kid"), jwk.get("kty")
            if (kid is not None and not isinstance(kid, str)) or jwk.get("use", "sig") != "sig":
                continue
            try:
                if kty == "RSA":
                    n = int.from_bytes(b64url_decode(jwk["n"]), "big")
                    e = int.from_bytes(b64url_decode(jwk["e"]), "big")
                    keys[kid] = ("RSA", rsa.RSAPublicNumbers(e, n).public_key(), jwk.get("alg"))
                elif kty == "EC" and jwk.get("crv") == "P-256":
                    x = int.from_bytes(b64url_decode(jwk["x"]), "big")
                    y = int.from_bytes(b64url_decode(jwk["y"]), "big")
                    point = ec.EllipticCurvePublicNumbers(x, y, ec.SECP256R1())
                    keys[kid] = ("EC", point.public_key(), jwk.get("alg"))
            except (KeyError, TypeError, ValueError) as exc:
                log.warning("JWKS key %r skipped: %s", kid, exc)
        self._keys = keys

    def _key_for(self, alg: str, kid: str | None) -> Any:
        if kid is not None:
            entry = self._keys.get(kid)
        else:
            entry = next(iter(self._keys.values())) if len(self._keys) == 1 else None
        if entry is None:
            self._refresh_soon()  # keys rotate; the client's next try may find the new key
            raise TokenError("no key for this token in the JWKS")
        kty, key, key_alg = entry
        if kty != _KEY_TYPE[alg] or (key_alg is not None and key_alg != alg):
            raise TokenError(f"the key of this token is not for {alg}")
        return key

    # ---- tokens ------------------------------------------------------------------------------

    def verify(self, token: str) -> dict[str, Any]:
        """The token's claims, once its form, signature and registered claims check out."""
        try:
            return self._verify(token)
        except TokenError:
            raise
        except Exception as exc:  # defense in depth: no token may ever become a 500
            log.warning("JWT refused by an unexpected %s: %s", type(exc).__name__, exc)
            raise TokenError("malformed token") from None

    def _verify(self, token: str) -> dict[str, Any]:
        if len(token) > self.config.max_token_bytes:
            raise TokenError(f"token longer than {self.config.max_token_bytes} bytes")
        segments = token.split(".")
        if len(segments) != 3:
            raise TokenError("malformed token: not three segments")
        head_b64, body_b64, sig_b64 = segments
        header = _json_object(b64url_decode(head_b64), "header")
        signature = b64url_decode(sig_b64)
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in ALGORITHMS:
            raise TokenError("token algorithm is not accepted")
        kid = _optional(header, "kid", str, "header")
        _optional(header, "typ", str, "header")
        if "crit" in header:
            raise TokenError("token names critical header extensions this gateway does not understand")
        signed = f"{head_b64}.{body_b64}".encode()
        if alg == "HS256":
            if not self.config.hs256_secret:
                raise TokenError("token algorithm is not accepted")
            if not hmac.compare_digest(_hs256(self.config.hs256_secret, signed), signature):
                raise TokenError("token signature does not verify")
        else:
            if not self._keys and not self.config.jwks_url:
                raise TokenError("token algorithm is not accepted")
            self._verify_asymmetric(alg, self._key_for(alg, kid), signed, signature)
        # The claims are parsed only once the signature vouches for them.
        claims = _json_object(b64url_decode(body_b64), "claims")
        self._check_claims(claims)
        return claims

    @staticmethod
    def _verify_asymmetric(alg: str, key: Any, signed: bytes, signature: bytes) -> None:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec, padding, utils

        try:
            if alg == "RS256":
                key.verify(signature, signed, padding.PKCS1v15(), hashes.SHA256())
            else:
                if len(signature) != 64:
                    raise TokenError("ES256 signature has the wrong length")
                der = utils.encode_dss_signature(
                    int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big")
                )
                key.verify(der, signed, ec.ECDSA(hashes.SHA256()))
        except InvalidSignature:
            raise TokenError("token signature does not verify") from None
        except (TypeError, ValueError) as exc:
            if isinstance(exc, TokenError):
                raise
            raise TokenError("token signature does not verify") from None

    def _check_claims(self, claims: dict[str, Any]) -> None:
        now = time.time()
        leeway = self.config.leeway_s
        exp = _optional(claims, "exp", (int, float), "claim")
        nbf = _optional(claims, "nbf", (int, float), "claim")
        _optional(claims, "iat", (int, float), "claim")
        _optional(claims, "iss", str, "claim")
        _optional(claims, "sub", str, "claim")
        if exp is None and self.config.require_exp:
            raise TokenError("token has no expiry ('exp')")
        if exp is not None and now > exp + leeway:
            raise TokenError("token expired")
        if nbf is not None and now + leeway < nbf:
            raise TokenError("token not valid yet")
        if self.config.issuer is not None and claims.get("iss") != self.config.issuer:
            raise TokenError("token issuer is not accepted")
        aud = claims.get("aud")
        if aud is not None and not (
            isinstance(aud, str) or (isinstance(aud, list) and all(isinstance(a, str) for a in aud))
        ):
            raise TokenError("malformed token: claim 'aud' has the wrong type")
        if self.config.audience is not None:
            audiences = aud if isinstance(aud, list) else [aud]
            if self.config.audience not in audiences:
                raise TokenError("token audience does not include this gateway")
