"""JSON Web Tokens: verified with PyJWT (RFC 7515, RFC 7519, RFC 8725), bounded in cost before it runs.

A token reaches this module before anything about its sender is known, so it is attacker input.
The signature and the registered claims are checked by PyJWT (a maintained JOSE library); this
module decides which key and which algorithms it may use, and keeps the checks that bound the cost
and the shape of what PyJWT is given. Invariants (issue 10, holes 6 and 7; issue 17):

- Every malformed, unsigned or unverifiable token raises :class:`TokenError`, never anything else,
  so the front doors answer 401 with ``WWW-Authenticate`` and log no traceback. Reasons are fixed
  sentences: they never echo the token or a library message that might quote it.
- The cost is bounded before any decoding: at most ``max_token_bytes`` (default 8 KiB), exactly
  three segments of strict base64url (RFC 7515 §2: the URL-safe alphabet without padding; a lenient
  decoder that skips stray characters would make tokens malleable).
- Header and claims are JSON objects parsed by orjson: nesting is bounded (an error rather than a
  ``RecursionError``) and ``NaN``/``Infinity`` are refused, so ``exp: Infinity`` cannot mint an
  immortal token (PyJWT's own ``json.loads`` would accept them, hence :class:`_StrictJwt`).
- Header members have the types RFC 7515 §4.1 gives them (``alg``, ``kid``, ``typ`` strings), and
  ``typ`` is the configured one when ``require_typ`` is set (RFC 8725 §3.11); a ``crit`` header is
  refused, since this verifier understands no extension (§4.1.11), and so is ``b64`` (RFC 7797).
  Keys are never taken from the token (``jwk``, ``jku``, ``x5u``, ``x5c`` are ignored): only the
  configured secret and the configured JWKS vouch for a token.
- ``alg: none`` is never accepted, whatever ``algorithms`` says (RFC 8725 §3.1). The algorithms
  PyJWT may use are derived from the key, never from the token (RFC 8725 §2.1): HS* only with the
  configured ``hs256_secret`` (RFC 7518 §3.2), asymmetric ones only with a JWKS key of the matching
  family whose own ``alg`` (if any) agrees and whose ``use`` (if any) is ``sig`` (policies/jwks.py).
  The HS256-signed-with-an-RSA-public-key confusion therefore never reaches an RSA key.
- Registered claims are typed (RFC 7519 §4.1): ``exp``/``nbf``/``iat`` finite numbers (not
  booleans), ``iss`` and ``sub`` strings, ``aud`` a string or a list of strings. ``exp``, ``nbf``
  and ``iat`` are checked with ``leeway_s`` (§4.1.4-6); ``iss`` when ``issuer`` is set. ``aud`` is
  checked by the caller, which knows the resource the token is presented to (policies/auth.py).
- JWKS keys (``jwks_url``) are cached: refetched after ``jwks_cache_s``, and on a ``kid`` this
  verifier does not know at most once per ``jwks_min_refresh_s`` (concurrent callers share one
  fetch), so a flood of made-up kids cannot flood the issuer; a failed refresh keeps the old keys.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import json
import logging
import math
import re
import time
import warnings
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
from jwt import PyJWT, exceptions as jwt_errors
from jwt.warnings import InsecureKeyLengthWarning

from policies.jwks import ASYMMETRIC_ALGORITHMS, HMAC_ALGORITHMS, SAFE_ALGORITHMS, SigningKey, load_keys

if TYPE_CHECKING:
    from gateway.config import Jwt
    from gateway.upstreams.fetch import Fetched

log = logging.getLogger(__name__)

ALGORITHMS = SAFE_ALGORITHMS
_B64URL = re.compile(r"[A-Za-z0-9_-]*")
_MIN_HMAC_BYTES = {"HS256": 32, "HS384": 48, "HS512": 64}  # RFC 7518 §3.2: a key as long as the hash

Fetch = Callable[..., Awaitable["Fetched"]]
# Told of every exchange with the authorization server: (exchange, outcome), for metrics.
Observe = Callable[[str, str], None]


def _unobserved(_exchange: str, _outcome: str) -> None:
    pass


def default_fetch() -> Fetch:
    """gateway/upstreams/fetch.py's bounded exchange (imported late: policies do not import the gateway)."""
    from gateway.upstreams.fetch import fetch

    return fetch


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


def mint_hs256(claims: dict[str, Any], secret: str) -> str:
    """An HS256 JWT that :class:`JwtVerifier` accepts with the same secret (MCPx dev tokens)."""
    head = b64url_encode(json.dumps({"alg": "HS256", "typ": "JWT"}, separators=(",", ":")).encode())
    body = b64url_encode(json.dumps(claims, separators=(",", ":")).encode())
    mac = hmac.new(secret.encode(), f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{b64url_encode(mac)}"


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
    if isinstance(value, float) and not math.isfinite(value):
        raise TokenError(f"malformed token: {what} {key!r} has the wrong type")
    return value


def _media_type(typ: str | None) -> str | None:
    """A ``typ`` as RFC 7515 §4.1.9 compares it: case-insensitive, ``application/`` implied."""
    if typ is None:
        return None
    lowered = typ.lower()
    return lowered[len("application/") :] if lowered.startswith("application/") else lowered


def typed_claims(claims: dict[str, Any]) -> None:
    """RFC 7519 §4.1 types of the registered claims (raises TokenError)."""
    for name in ("exp", "nbf", "iat"):
        _optional(claims, name, (int, float), "claim")
    _optional(claims, "iss", str, "claim")
    _optional(claims, "sub", str, "claim")
    aud = claims.get("aud")
    if aud is not None and not (
        isinstance(aud, str) or (isinstance(aud, list) and all(isinstance(a, str) for a in aud))
    ):
        raise TokenError("malformed token: claim 'aud' has the wrong type")


def audiences(claims: dict[str, Any]) -> tuple[str, ...]:
    """The ``aud`` claim as a tuple (RFC 7519 §4.1.3: a string or a list of strings; typed already)."""
    aud = claims.get("aud")
    if aud is None:
        return ()
    return (aud,) if isinstance(aud, str) else tuple(aud)


class _StrictJwt(PyJWT):
    """PyJWT with the claims parsed by orjson (no NaN/Infinity, bounded nesting) and typed first."""

    def _decode_payload(self, decoded: dict[str, Any]) -> dict[str, Any]:
        claims = _json_object(decoded["payload"], "claims")
        typed_claims(claims)
        return claims


# PyJWT's failures, as the fixed sentences a caller may see (a library message may quote the token).
_REASONS: tuple[tuple[type[Exception], str], ...] = (
    (jwt_errors.ExpiredSignatureError, "token expired"),
    (jwt_errors.ImmatureSignatureError, "token not valid yet"),
    (jwt_errors.InvalidIssuerError, "token issuer is not accepted"),
    (jwt_errors.InvalidAudienceError, "token audience is not accepted"),
    (jwt_errors.InvalidSignatureError, "token signature does not verify"),
    (jwt_errors.InvalidAlgorithmError, "token algorithm is not accepted"),
    (jwt_errors.InvalidKeyError, "the key of this token is not usable"),
    (jwt_errors.InvalidIssuedAtError, "malformed token: claim 'iat' has the wrong type"),
)


def _reason(exc: Exception) -> str:
    if isinstance(exc, jwt_errors.MissingRequiredClaimError):
        return "token has no expiry ('exp')" if exc.claim == "exp" else f"token has no {exc.claim!r} claim"
    for kind, reason in _REASONS:
        if isinstance(exc, kind):
            return reason
    return "malformed token"


class JwtVerifier:
    def __init__(self, config: Jwt, fetch: Fetch | None = None, observe: Observe | None = None) -> None:
        self.config = config
        self._fetch = fetch
        self._observe = observe or _unobserved
        allowed = [a for a in (config.algorithms or ALGORITHMS) if a in ALGORITHMS]
        self._secret = config.hs256_secret.encode() if config.hs256_secret else b""
        # RFC 7518 §3.2: an HMAC key at least as long as the hash. HS384/HS512 are accepted only with a
        # secret that long; a short secret still serves HS256 (deployments with one keep working) and is
        # warned about once, here.
        self.hmac_algorithms = [
            a for a in allowed if a in HMAC_ALGORITHMS and self._secret and (a == "HS256" or self._long_enough(a))
        ]
        self.asymmetric_algorithms = [a for a in allowed if a in ASYMMETRIC_ALGORITHMS]
        self._short_secret = bool(self._secret) and not self._long_enough("HS256")
        if self._short_secret:
            log.warning("auth.jwt.hs256_secret is shorter than 32 bytes (RFC 7518 §3.2): use a longer random secret")
        self._pyjwt = _StrictJwt()
        self._keys: dict[str | None, SigningKey] = {}
        self._loaded_at = 0.0  # monotonic time of the last good JWKS document
        self._last_fetch = 0.0  # monotonic time of the last fetch attempt (the rate limit)
        self._fetching: asyncio.Task[bool] | None = None  # the refresh in progress, shared by every caller
        if config.jwks_file:
            self.load_jwks(json.loads(Path(config.jwks_file).read_text()))

    def _long_enough(self, algorithm: str) -> bool:
        return len(self._secret) >= _MIN_HMAC_BYTES[algorithm]

    # ---- keys --------------------------------------------------------------------------------

    def load_jwks(self, document: Any) -> None:
        """Keep the signing keys of a JWKS; a key that is malformed or not for signatures is skipped."""
        self._keys = load_keys(document, self.asymmetric_algorithms)
        self._loaded_at = time.monotonic()

    @property
    def key_count(self) -> int:
        return len(self._keys)

    async def refresh(self) -> bool:
        """Fetch ``jwks_url`` now; on failure the keys in hand stay in force."""
        if not self.config.jwks_url:
            return False
        from gateway.upstreams.httpclient import HttpError

        fetch = self._fetch or default_fetch()
        self._last_fetch = time.monotonic()
        try:
            answer = await fetch(
                "GET",
                self.config.jwks_url,
                headers={"accept": "application/json"},
                timeout_s=self.config.jwks_timeout_s,
            )
            if answer.status != 200:
                raise HttpError(f"HTTP {answer.status}")
            document = orjson.loads(answer.body)
            if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
                raise ValueError("the JWKS is not a JSON object with 'keys'")
            self.load_jwks(document)
            self._observe("jwks", "ok")
            log.info("JWKS loaded from %s: %d key(s)", self._where(), len(self._keys))
            return True
        except (HttpError, ValueError) as exc:
            self._observe("jwks", "failed")
            log.error("JWKS fetch from %s failed (the %d key(s) in hand stay): %s", self._where(), len(self._keys), exc)
            return False

    def _where(self) -> str:
        """The JWKS URL without credentials or query (it may carry a secret)."""
        url = self.config.jwks_url or ""
        scheme, sep, rest = url.partition("://")
        host = rest.split("/", 1)[0].rpartition("@")[2]
        return f"{scheme}{sep}{host}"

    def refresh_shared(self) -> asyncio.Task[bool] | None:
        """The refresh in progress, or a new one when the rate limit allows (None otherwise)."""
        if self._fetching is not None and not self._fetching.done():
            return self._fetching
        if not self.config.jwks_url or time.monotonic() - self._last_fetch < self.config.jwks_min_refresh_s:
            return None
        try:
            self._fetching = asyncio.get_running_loop().create_task(self.refresh())
        except RuntimeError:  # no loop (a synchronous caller): the next request on the loop refreshes
            return None
        return self._fetching

    def pending(self, token: str) -> Awaitable[Any] | None:
        """What to await before :meth:`verify` can decide this token: a JWKS refresh when its ``kid`` is
        unknown (rate-limited); None when there is nothing to wait for. Never raises."""
        if not self.config.jwks_url:
            return None
        if time.monotonic() - self._loaded_at > self.config.jwks_cache_s:
            self.refresh_shared()  # stale keys: refreshed behind, served meanwhile
        try:
            header = self._header(token)
        except TokenError:
            return None
        alg = header.get("alg")
        if alg not in self.asymmetric_algorithms or self._lookup(header.get("kid")) is not None:
            return None
        refresh = self.refresh_shared()
        return asyncio.shield(refresh) if refresh is not None else None

    def close(self) -> None:
        """Cancel a refresh in progress (the gateway stops, or a reload replaced this verifier)."""
        if self._fetching is not None and not self._fetching.done():
            self._fetching.cancel()

    def _lookup(self, kid: str | None) -> SigningKey | None:
        if kid is not None:
            return self._keys.get(kid)
        return next(iter(self._keys.values())) if len(self._keys) == 1 else None

    # ---- tokens ------------------------------------------------------------------------------

    def verify(self, token: str) -> dict[str, Any]:
        """The token's claims, once its form, signature and registered claims check out."""
        try:
            return self._verify(token)
        except TokenError:
            raise
        except jwt_errors.PyJWTError as exc:
            raise TokenError(_reason(exc)) from None
        except Exception as exc:  # defense in depth: no token may ever become a 500
            log.warning("JWT refused by an unexpected %s", type(exc).__name__)
            raise TokenError("malformed token") from None

    def _header(self, token: str) -> dict[str, Any]:
        """The header, after the checks that bound the cost: size, three strict base64url segments."""
        if len(token) > self.config.max_token_bytes:
            raise TokenError(f"token longer than {self.config.max_token_bytes} bytes")
        segments = token.split(".")
        if len(segments) != 3:
            raise TokenError("malformed token: not three segments")
        for segment in segments[1:]:
            if len(segment) % 4 == 1 or not _B64URL.fullmatch(segment):
                raise TokenError("malformed token: a segment is not base64url")
        header = _json_object(b64url_decode(segments[0]), "header")
        if not isinstance(header.get("alg"), str):
            raise TokenError("token algorithm is not accepted")
        _optional(header, "kid", str, "header")
        typ = _optional(header, "typ", str, "header")
        if self.config.require_typ is not None and _media_type(typ) != _media_type(self.config.require_typ):
            raise TokenError("token type is not accepted")
        if "crit" in header or "b64" in header:
            raise TokenError("token names critical header extensions this gateway does not understand")
        return header

    def _verify(self, token: str) -> dict[str, Any]:
        header = self._header(token)
        alg: str = header["alg"]
        key: Any
        if alg in self.hmac_algorithms:
            key, algorithms = self._secret, self.hmac_algorithms
        elif alg in self.asymmetric_algorithms and (self._keys or self.config.jwks_url):
            entry = self._lookup(header.get("kid"))
            if entry is None:
                self.refresh_shared()  # keys rotate; the client's next try may find the new key
                raise TokenError("no key for this token in the JWKS")
            key = entry.by_algorithm.get(alg)
            if key is None:
                raise TokenError(f"the key of this token is not for {alg}")
            algorithms = entry.algorithms  # from the key, never from the token (RFC 8725 §2.1)
        else:
            raise TokenError("token algorithm is not accepted")
        options: dict[str, Any] = {"verify_aud": False, "require": ["exp"] if self.config.require_exp else []}
        if self._short_secret and alg in HMAC_ALGORITHMS:
            with warnings.catch_warnings():  # warned once at startup; PyJWT would warn on every token
                warnings.simplefilter("ignore", InsecureKeyLengthWarning)
                return self._decode(token, key, algorithms, options)
        return self._decode(token, key, algorithms, options)

    def _decode(self, token: str, key: Any, algorithms: list[str], options: dict[str, Any]) -> dict[str, Any]:
        claims: dict[str, Any] = self._pyjwt.decode(
            token,
            key,
            algorithms=algorithms,
            options=options,  # type: ignore[arg-type]  # a plain dict of Options keys
            issuer=self.config.issuer,
            leeway=self.config.leeway_s,
        )
        return claims
