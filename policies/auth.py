"""Identity: every request maps to exactly one principal, or it is refused.

Sources, in order: a static bearer token of a configured principal; a JWT (HS256 with the shared
secret, or RS256/ES256 with a key from a JWKS); otherwise the anonymous principal when the config
allows it. A JWT's ``capabilities`` claim can only narrow what the principal is configured with; a
JWT for a principal not listed gets exactly its claim, capped by ``auth.jwt.max_capabilities``.

Without an ``auth`` section at all, every caller is anonymous with every capability; the CLI only
allows that on a loopback listener.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from policies.jwt import JwtVerifier, TokenError
from policies.patterns import CapabilitySet
from policies.principal import ANONYMOUS_ALL, Principal

if TYPE_CHECKING:
    from gateway.config import Auth, PrincipalConfig

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


# One object for every anonymous request: no allocation per call, and the door's session check
# (gateway/core.py caller_of) then matches by identity.
ANONYMOUS_CREDENTIALS = Credentials("anonymous", "anonymous")

_MAX_NAME = 256  # a principal's name is logged and audited: a JWT may not make it arbitrarily long


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
                return ANONYMOUS_CREDENTIALS
            raise AuthError("authentication required", False)
        name = self.registry.by_token(token)
        if name is not None:
            return Credentials("static", name)
        if self.jwt is not None and token.count(".") == 2:
            try:
                claims = self.jwt.verify(token)
            except TokenError as exc:
                raise AuthError(exc.reason, True) from None
            return self._jwt_credentials(claims)
        raise AuthError("unknown token", True)

    def _jwt_credentials(self, claims: dict[str, Any]) -> Credentials:
        """What a verified JWT says. A claim of the wrong shape refuses the token: read leniently, a
        ``capabilities`` string or a ``topic`` list would be ignored, and so *widen* what it grants."""
        assert self.jwt is not None
        subject = claims.get(self.jwt.config.principal_claim)
        if subject is None:
            subject = claims.get("participantId")
        if not isinstance(subject, str) or not subject or len(subject) > _MAX_NAME:
            raise AuthError(f"token names no principal ({self.jwt.config.principal_claim!r})", True)
        caps = claims.get("capabilities")
        if caps is not None and not (isinstance(caps, list) and all(isinstance(c, str) for c in caps)):
            raise AuthError("token claim 'capabilities' must be a list of strings", True)
        topic = claims.get("topic")
        if topic is not None and not isinstance(topic, str):
            raise AuthError("token claim 'topic' must be a string", True)
        exp = claims.get("exp")
        return Credentials(
            "jwt", subject, tuple(caps) if caps is not None else None, float(exp) if exp is not None else None, topic
        )

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
