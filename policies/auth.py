"""Identity: every request maps to exactly one principal, or it is refused.

Sources, in order: a static bearer token of a configured principal; a JWT (verified by
policies/jwt.py: HMAC with the shared secret, or RSA/EC/EdDSA keys from a JWKS); an opaque token
checked at the authorization server (RFC 7662, policies/introspection.py); otherwise the anonymous
principal when the config allows it. A token's ``capabilities`` claim can only narrow what the
principal is configured with; a token for a principal not listed gets exactly its claim, capped by
``max_capabilities`` of its kind (``auth.jwt`` or ``auth.introspection``).

Invariants:

- The decision is synchronous and needs no network: what a token needs from the network (a JWKS
  refresh for an unknown ``kid``, an introspection) is :meth:`Authenticator.pending`, awaited by the
  entrance before the door asks (gateway/app.py), so static tokens and cached JWTs pay no await.
- Audience binding (RFC 8707; MCP authorization spec): when an audience is configured for a token's
  kind, its ``aud`` must name this gateway, or the backend whose own paths (/servers/NAME/...) it is
  presented on. It is checked on every request, not only when the token is first verified, since a
  cached token may be presented to another resource.

Without an ``auth`` section at all, every caller is anonymous with every capability; the CLI only
allows that on a loopback listener.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from policies.introspection import Introspector
from policies.jwt import Fetch, JwtVerifier, Observe, TokenError, audiences
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

    kind: str  # anonymous | static | jwt | introspected
    name: str
    token_capabilities: tuple[str, ...] | None = None  # a token's capabilities claim, when present
    expires: float | None = None
    topic: str | None = None  # a JWT's ``topic`` claim: the one MCPx topic the token is for
    # The token's 'aud' when an audience is configured for its kind (checked per request against the
    # resource it is presented to: :meth:`Authenticator.check_audience`); None: not checked. Not part of
    # equality: one principal, whichever resource its token was presented to.
    audience: tuple[str, ...] | None = field(default=None, compare=False)


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
    def __init__(
        self,
        auth: Auth | None,
        registry: PrincipalRegistry,
        fetch: Fetch | None = None,
        observe: Observe | None = None,
    ) -> None:
        self.auth = auth
        self.registry = registry
        self.jwt = JwtVerifier(auth.jwt, fetch, observe) if auth is not None and auth.jwt is not None else None
        self.introspection = (
            Introspector(auth.introspection, fetch, observe)
            if auth is not None and auth.introspection is not None
            else None
        )
        # Whether some token may need a network exchange before it can be decided (see pending()).
        self.may_wait = self.introspection is not None or (self.jwt is not None and bool(self.jwt.config.jwks_url))

    def close(self) -> None:
        """Cancel the network exchanges in progress (JWKS refresh, introspections)."""
        if self.jwt is not None:
            self.jwt.close()
        if self.introspection is not None:
            self.introspection.close()

    @property
    def required(self) -> bool:
        """Whether unauthenticated callers are refused."""
        return self.auth is not None and self.auth.anonymous is None

    def pending(self, token: str | None) -> Awaitable[object] | None:
        """What to await before :meth:`authenticate` can decide ``token`` without the network: a JWKS
        refresh for an unknown ``kid``, or an introspection. None (the common case) when nothing is
        needed. Awaiting it may raise :class:`~policies.introspection.IntrospectionUnavailable`."""
        if token is None or not self.may_wait or self.registry.by_token(token) is not None:
            return None
        if token.count(".") == 2 and self.jwt is not None:
            return self.jwt.pending(token)
        if self.introspection is not None:
            return self.introspection.pending(token)
        return None

    async def authenticate_async(self, token: str | None, resource: str | None = None) -> Credentials:
        """:meth:`authenticate` after whatever network exchange the token needs (callers outside the doors)."""
        waiting = self.pending(token)
        if waiting is not None:
            await waiting
        return self.authenticate(token, resource)

    def authenticate(self, token: str | None, resource: str | None = None) -> Credentials:
        """Who presents ``token`` to ``resource`` (None: the gateway itself). Raises AuthError.

        An opaque token is decided from the introspection cache, which :meth:`pending` fills: a door
        that did not await it gets "not checked yet" (401)."""
        credentials = self.identify(token)
        self.check_audience(credentials, resource)
        return credentials

    def identify(self, token: str | None) -> Credentials:
        """Who presents ``token``, before any audience check (:meth:`check_audience`). Raises AuthError."""
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
            config = self.jwt.config
            return self._token_credentials("jwt", claims, config.principal_claim, "participantId", config.audience)
        if self.introspection is not None:
            try:
                answer = self.introspection.claims(token)
            except TokenError as exc:
                raise AuthError(exc.reason, True) from None
            if answer is None:
                raise AuthError("token not checked yet: try again", True)
            config_i = self.introspection.config
            return self._token_credentials(
                "introspected", answer, config_i.principal_claim, "username", config_i.audience
            )
        raise AuthError("unknown token", True)

    def _token_credentials(
        self, kind: str, claims: dict[str, Any], principal_claim: str, fallback: str, audience: str | None
    ) -> Credentials:
        """What a verified token says. A claim of the wrong shape refuses the token: read leniently, a
        ``capabilities`` string or a ``topic`` list would be ignored, and so *widen* what it grants."""
        subject = claims.get(principal_claim)
        if subject is None:
            subject = claims.get(fallback)
        if not isinstance(subject, str) or not subject or len(subject) > _MAX_NAME:
            raise AuthError(f"token names no principal ({principal_claim!r})", True)
        caps = claims.get("capabilities")
        if caps is not None and not (isinstance(caps, list) and all(isinstance(c, str) for c in caps)):
            raise AuthError("token claim 'capabilities' must be a list of strings", True)
        topic = claims.get("topic")
        if topic is not None and not isinstance(topic, str):
            raise AuthError("token claim 'topic' must be a string", True)
        exp = claims.get("exp")
        return Credentials(
            kind,
            subject,
            tuple(caps) if caps is not None else None,
            float(exp) if exp is not None else None,
            topic,
            audiences(claims) if audience is not None else None,
        )

    def check_audience(self, credentials: Credentials, resource: str | None) -> None:
        """RFC 8707 audience binding: a token is for this gateway (its configured audience) or, on a
        backend's own paths, for that backend's ``resource`` (MCP authorization spec, "token audience
        binding"). Tokens of a kind without a configured audience are not checked (``audience`` None)."""
        aud = credentials.audience
        if aud is None:
            return
        if credentials.kind == "jwt":
            gateway = self.jwt.config.audience if self.jwt is not None else None
        else:
            gateway = self.introspection.config.audience if self.introspection is not None else None
        if (gateway is not None and gateway in aud) or (resource is not None and resource in aud):
            return
        raise AuthError(
            "token audience does not include this gateway"
            if resource is None
            else "token audience includes neither this gateway nor this server",
            True,
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
        if credentials.kind == "introspected":
            ceiling = self.introspection.config.max_capabilities if self.introspection is not None else []
        else:
            ceiling = self.jwt.config.max_capabilities if self.jwt is not None else []
        return Principal(credentials.name, CapabilitySet(token_caps or ()).narrowed(CapabilitySet(ceiling)))


def bearer_token(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()
