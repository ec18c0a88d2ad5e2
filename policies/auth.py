"""Identity: every request maps to exactly one principal, or it is refused.

Sources, in order: a static bearer token of a configured principal; a JWT (HS256 with the shared
secret, or RS256/ES256 with a key from a JWKS); otherwise the anonymous principal when the config
allows it. A JWT's ``capabilities`` claim can only narrow what the principal is configured with; a
JWT for a principal not listed gets exactly its claim, capped by ``auth.jwt.max_capabilities``.

Without an ``auth`` section at all, every caller is anonymous with every capability; the CLI only
allows that on a loopback listener.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from policies.patterns import CapabilitySet
from policies.principal import ANONYMOUS_ALL, Principal

if TYPE_CHECKING:
    from gateway.config import Auth, Jwt, PrincipalConfig

log = logging.getLogger(__name__)


class AuthError(Exception):
    """Refused: answer 401 with ``WWW-Authenticate`` (``error`` per RFC 6750 when a token was sent)."""

    def __init__(self, reason: str, token_sent: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.error = "invalid_token" if token_sent else None


@dataclass(frozen=True, slots=True)
class Credentials:
    """How a session authenticated, kept so that its principal can be re-resolved when config changes."""

    kind: str  # anonymous | static | jwt
    name: str
    token_capabilities: tuple[str, ...] | None = None  # a JWT's capabilities claim, when present
    expires: float | None = None
    topic: str | None = None  # a JWT's ``topic`` claim: the one MCPx topic the token is for


_JWKS_MIN_INTERVAL_S = 60.0


def _b64url(data: str) -> bytes:
    return base64.urlsafe_b64decode(data + "=" * (-len(data) % 4))


def _b64url_encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _hs256(secret: str, signing_input: bytes) -> bytes:
    return hmac.new(secret.encode(), signing_input, hashlib.sha256).digest()


def mint_hs256(claims: dict[str, Any], secret: str) -> str:
    """An HS256 JWT that :class:`JwtVerifier` accepts with the same secret (MCPx dev tokens)."""
    head = _b64url_encode(json.dumps({"alg": "HS256", "typ": "JWT"}, separators=(",", ":")).encode())
    body = _b64url_encode(json.dumps(claims, separators=(",", ":")).encode())
    return f"{head}.{body}.{_b64url_encode(_hs256(secret, f'{head}.{body}'.encode()))}"


def _token_hash(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


class PrincipalRegistry:
    """The configured principals, changeable at runtime (admin API, config reload)."""

    def __init__(self, principals: dict[str, PrincipalConfig]) -> None:
        self._principals: dict[str, PrincipalConfig] = {}
        self._by_token: dict[bytes, str] = {}
        self.version = 0
        self.replace(principals)

    def replace(self, principals: dict[str, PrincipalConfig]) -> None:
        self._principals = dict(principals)
        self._reindex()

    def upsert(self, name: str, config: PrincipalConfig) -> None:
        self._principals[name] = config
        self._reindex()

    def remove(self, name: str) -> bool:
        existed = self._principals.pop(name, None) is not None
        self._reindex()
        return existed

    def _reindex(self) -> None:
        # Tokens are looked up by their SHA-256: the lookup time says nothing about the secret.
        self._by_token = {_token_hash(t): name for name, p in self._principals.items() for t in p.tokens if t}
        self.version += 1

    def get(self, name: str) -> PrincipalConfig | None:
        return self._principals.get(name)

    def names(self) -> list[str]:
        return sorted(self._principals)

    def by_token(self, token: str) -> str | None:
        digest = _token_hash(token)
        name = self._by_token.get(digest)
        if name is None:
            return None
        # Confirm in constant time against the stored token (guards against a hash collision).
        config = self._principals[name]
        return name if any(hmac.compare_digest(t.encode(), token.encode()) for t in config.tokens) else None


class JwtVerifier:
    def __init__(self, config: Jwt) -> None:
        self.config = config
        self._keys: dict[str | None, Any] = {}
        self._last_fetch = 0.0
        self._fetching: Any = None  # the background refresh in progress, if any
        if config.jwks_file:
            self.load_jwks(json.loads(Path(config.jwks_file).read_text()))

    async def refresh(self) -> bool:
        """Fetch ``jwks_url`` (keys rotate: an unknown kid triggers this, at most once a minute)."""
        if not self.config.jwks_url:
            return False
        from gateway.upstreams.httpclient import ConnectionPool, HttpError, target_of

        self._last_fetch = time.monotonic()
        pool = ConnectionPool(self.config.jwks_url, max_connections=1)
        try:
            response = await pool.request("GET", target_of(self.config.jwks_url), {"accept": "application/json"})
            body = await response.read()
            if response.status != 200:
                raise HttpError(f"HTTP {response.status}")
            self.load_jwks(json.loads(body))
            log.info("JWKS loaded from %s: %d key(s)", self.config.jwks_url, len(self._keys))
            return True
        except (HttpError, ValueError) as exc:
            log.error("JWKS fetch from %s failed: %s", self.config.jwks_url, exc)
            return False
        finally:
            await pool.aclose()

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
        from cryptography.hazmat.primitives.asymmetric import ec, rsa

        keys: dict[str | None, Any] = {}
        for jwk in document.get("keys", []):
            kty = jwk.get("kty")
            try:
                if kty == "RSA":
                    n = int.from_bytes(_b64url(jwk["n"]), "big")
                    e = int.from_bytes(_b64url(jwk["e"]), "big")
                    keys[jwk.get("kid")] = rsa.RSAPublicNumbers(e, n).public_key()
                elif kty == "EC" and jwk.get("crv") == "P-256":
                    x = int.from_bytes(_b64url(jwk["x"]), "big")
                    y = int.from_bytes(_b64url(jwk["y"]), "big")
                    keys[jwk.get("kid")] = ec.EllipticCurvePublicNumbers(x, y, ec.SECP256R1()).public_key()
            except (KeyError, ValueError) as exc:
                log.warning("JWKS key %r skipped: %s", jwk.get("kid"), exc)
        self._keys = keys

    def verify(self, token: str) -> dict[str, Any]:
        try:
            head_b64, body_b64, sig_b64 = token.split(".")
            header = json.loads(_b64url(head_b64))
            claims = json.loads(_b64url(body_b64))
            signature = _b64url(sig_b64)
        except (ValueError, json.JSONDecodeError) as exc:
            raise AuthError(f"malformed token: {exc}", True) from None
        if not isinstance(header, dict) or not isinstance(claims, dict):
            raise AuthError("malformed token", True)
        signed = f"{head_b64}.{body_b64}".encode()
        alg = header.get("alg")
        if alg == "HS256" and self.config.hs256_secret:
            if not hmac.compare_digest(_hs256(self.config.hs256_secret, signed), signature):
                raise AuthError("token signature does not verify", True)
        elif alg in ("RS256", "ES256") and (self._keys or self.config.jwks_url):
            self._verify_asymmetric(alg, header.get("kid"), signed, signature)
        else:
            raise AuthError(f"token algorithm {alg!r} is not accepted", True)
        self._check_claims(claims)
        return claims

    def _verify_asymmetric(self, alg: str, kid: Any, signed: bytes, signature: bytes) -> None:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec, padding, utils

        key = (
            self._keys.get(kid)
            if kid is not None
            else (next(iter(self._keys.values())) if len(self._keys) == 1 else None)
        )
        if key is None:
            self._refresh_soon()  # keys rotate; the client's next try may find the new key
            raise AuthError(f"no key {kid!r} in the JWKS", True)
        try:
            if alg == "RS256":
                key.verify(signature, signed, padding.PKCS1v15(), hashes.SHA256())
            else:
                if len(signature) != 64:
                    raise AuthError("ES256 signature has the wrong length", True)
                der = utils.encode_dss_signature(
                    int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big")
                )
                key.verify(der, signed, ec.ECDSA(hashes.SHA256()))
        except InvalidSignature:
            raise AuthError("token signature does not verify", True) from None
        except (TypeError, ValueError) as exc:
            raise AuthError(f"token key mismatch: {exc}", True) from None

    def _check_claims(self, claims: dict[str, Any]) -> None:
        now = time.time()
        leeway = self.config.leeway_s
        exp = claims.get("exp")
        if exp is not None and (not isinstance(exp, (int, float)) or now > exp + leeway):
            raise AuthError("token expired", True)
        nbf = claims.get("nbf")
        if nbf is not None and (not isinstance(nbf, (int, float)) or now + leeway < nbf):
            raise AuthError("token not valid yet", True)
        if self.config.issuer is not None and claims.get("iss") != self.config.issuer:
            raise AuthError("token issuer is not accepted", True)
        if self.config.audience is not None:
            aud = claims.get("aud")
            audiences = aud if isinstance(aud, list) else [aud]
            if self.config.audience not in audiences:
                raise AuthError("token audience does not include this gateway", True)


class Authenticator:
    def __init__(self, auth: Auth | None, registry: PrincipalRegistry) -> None:
        self.auth = auth
        self.registry = registry
        self.jwt = JwtVerifier(auth.jwt) if auth is not None and auth.jwt is not None else None

    @property
    def required(self) -> bool:
        """Whether unauthenticated callers are refused."""
        return self.auth is not None and self.auth.anonymous is None

    def authenticate(self, token: str | None) -> Credentials:
        if token is None:
            if self.auth is None or self.auth.anonymous is not None:
                return Credentials("anonymous", "anonymous")
            raise AuthError("authentication required", False)
        name = self.registry.by_token(token)
        if name is not None:
            return Credentials("static", name)
        if self.jwt is not None and token.count(".") == 2:
            claims = self.jwt.verify(token)
            subject = claims.get(self.jwt.config.principal_claim) or claims.get("participantId")
            if not isinstance(subject, str) or not subject:
                raise AuthError(f"token names no principal ({self.jwt.config.principal_claim!r})", True)
            caps = claims.get("capabilities")
            token_caps = tuple(c for c in caps if isinstance(c, str)) if isinstance(caps, list) else None
            exp = claims.get("exp")
            topic = claims.get("topic")
            return Credentials(
                "jwt",
                subject,
                token_caps,
                float(exp) if isinstance(exp, (int, float)) else None,
                topic if isinstance(topic, str) else None,
            )
        raise AuthError("unknown token", True)

    def principal(self, credentials: Credentials) -> Principal:
        """The principal those credentials stand for *now* (config changes apply to live sessions)."""
        if credentials.kind == "anonymous":
            if self.auth is None:
                return ANONYMOUS_ALL
            anonymous = self.auth.anonymous
            return Principal("anonymous", CapabilitySet(anonymous.capabilities if anonymous else []), anonymous=True)
        configured = self.registry.get(credentials.name)
        if credentials.kind == "static":
            if configured is None:
                return Principal(credentials.name, CapabilitySet([]))  # removed at runtime: nothing left
            return Principal(credentials.name, CapabilitySet(configured.capabilities))
        token_caps = credentials.token_capabilities
        if configured is not None:
            base = CapabilitySet(configured.capabilities)
            return Principal(credentials.name, base if token_caps is None else base.narrowed(CapabilitySet(token_caps)))
        cap = CapabilitySet(self.jwt.config.max_capabilities if self.jwt else [])
        return Principal(credentials.name, CapabilitySet(token_caps or ()).narrowed(cap))


def bearer_token(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()
