"""Who calls: the credentials of a request, and the principal they stand for now.

Every front door asks here on every request (the ``FrontDesk`` seam, gateway/transports/front_desk.py),
so the common cases cost no signature check and no hashing in Python:

- A verified JWT is kept (up to ``_JWT_CACHE`` of them, until it expires) keyed by the token; an
  introspected token lives by the introspection cache instead (its ``cache_s`` bounds how long a
  revoked token stays usable, policies/introspection.py).
- Audience binding (RFC 8707, ADR 0018) is checked on every request, cached tokens included: a token
  cached on one path may be presented on another resource's path.
- One :class:`Principal` object per credentials, so that its capability verdicts stay cached across
  requests; found by the credentials object's identity first (the frozen dataclass's ``__hash__``
  runs in Python). :meth:`forget` drops both caches when principals or auth change.
- A session is bound to the principal that opened it (:meth:`caller_of`, issue 10 hole 2).
- The presented token is noted, in memory only, for this request's calls to token-exchange backends
  (gateway/upstreams/credentials.py), and only when such a backend exists.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable
from typing import TYPE_CHECKING

from gateway.protected_resource import bound_resource, configured_resources, server_of
from gateway.transports.http_common import Scope, header, query_token
from gateway.upstreams.credentials import UpstreamCredentials, note_presented
from policies.auth import Authenticator, AuthError, Credentials, bearer_token

if TYPE_CHECKING:
    from gateway.config import Auth, Config
    from gateway.sessions import ClientSession
    from gateway.telemetry.observe import Tracing
    from policies.principal import Principal

_JWT_CACHE = 4096  # verified JWTs kept (until they expire) so that a request costs no signature check


class Callers:
    def __init__(
        self,
        config: Config,
        authenticator: Authenticator,
        upstream_auth: UpstreamCredentials,
        tracing: Tracing | None,
    ) -> None:
        self.authenticator = authenticator
        self._auth: Auth | None = config.auth
        # Backends and virtual servers change only with a restart: their resource ids are known now.
        self._resources = configured_resources(config)
        self._upstream_auth = upstream_auth
        self._tracing = tracing
        self._jwt_cache: dict[str, Credentials] = {}
        self._principals: dict[Credentials, Principal] = {}
        self._principals_by_id: dict[int, tuple[Credentials, Principal]] = {}
        # The last answer of principal_of (it holds the credentials, so their id is not reused meanwhile).
        self._last: tuple[Credentials | None, Principal | None] = (None, None)

    def reconfigure(self, authenticator: Authenticator, auth: Auth | None) -> None:
        """A reloaded ``auth`` section: new verifications from now on, nothing cached from before."""
        self.authenticator = authenticator
        self._auth = auth
        self.forget()

    def forget(self) -> None:
        """Principals or auth changed: every cached verdict goes."""
        self._jwt_cache.clear()
        self._principals.clear()
        self._principals_by_id.clear()
        self._last = (None, None)

    def authenticate(self, scope: Scope, token: str | None = None) -> Credentials:
        """Who is calling (raises AuthError).

        The token is the Authorization header's, unless a door found it elsewhere (MCPx ``?token=``).
        """
        if self._tracing is not None:  # the request's W3C trace context, for its server spans
            self._tracing.note_http(header(scope, b"traceparent"), header(scope, b"tracestate"))
        if token is None:
            authorization = header(scope, b"authorization")
            token = bearer_token(authorization) if authorization else None  # (no call without the header)
        if token is not None and token.count(".") == 2:
            credentials = self._jwt_cache.get(token)
            if credentials is None or (credentials.expires is not None and credentials.expires <= time.time()):
                credentials = self.authenticator.identify(token)
                if credentials.kind == "jwt":  # an introspected one lives by its own cache (cache_s: revocation)
                    if len(self._jwt_cache) >= _JWT_CACHE:
                        self._jwt_cache.pop(next(iter(self._jwt_cache)))
                    self._jwt_cache[token] = credentials
        else:
            credentials = self.authenticator.identify(token)
        if credentials.audience is not None:  # per request: a cached token may be presented to another resource
            server = server_of(scope.get("path", ""), scope.get("root_path", ""))
            resource = bound_resource(server, self._auth, self._resources) if server else None
            self.authenticator.check_audience(credentials, resource)
        if self._upstream_auth.exchanges:  # only a token-exchange backend needs it (no cost otherwise)
            note_presented(token, credentials.kind, credentials.expires)
        return credentials

    def auth_pending(self, scope: Scope) -> Awaitable[object] | None:
        """What the entrance awaits before a door may ask :meth:`authenticate` (gateway/app.py): a JWKS
        refresh or an introspection the request's token needs. None, at the cost of one check, when
        the configuration needs no network for any token."""
        if not self.authenticator.may_wait:
            return None
        token = bearer_token(header(scope, b"authorization"))
        if token is None and scope.get("type") == "websocket":
            token = query_token(scope)  # MCPx agents send ?token= (gateway/mcpx/door.py)
        if token is None or token in self._jwt_cache:
            return None
        return self.authenticator.pending(token)

    def principal_of(self, credentials: Credentials) -> Principal:
        """The principal those credentials stand for now (one object per credentials)."""
        last_credentials, last_principal = self._last
        if credentials is last_credentials and last_principal is not None:
            return last_principal  # the same object as the last request's (the anonymous one, a cached token's)
        known = self._principals_by_id.get(id(credentials))
        if known is not None and known[0] is credentials:  # the entry holds the object: its id is not reused
            self._last = known
            return known[1]
        principal = self._principals.get(credentials)
        if principal is None:
            principal = self.authenticator.principal(credentials)
            if len(self._principals) >= _JWT_CACHE:
                self._principals.pop(next(iter(self._principals)))
            self._principals[credentials] = principal
        if len(self._principals_by_id) >= _JWT_CACHE:
            self._principals_by_id.pop(next(iter(self._principals_by_id)))
        self._principals_by_id[id(credentials)] = self._last = (credentials, principal)
        return principal

    def caller_of(self, session: ClientSession, scope: Scope) -> Principal:
        """Who sends this request on ``session``, held to the credential it presents (raises AuthError).

        A session is bound to the principal that opened it: another principal, or the same name by
        another kind of credential, is refused. Authorization then uses what *this* request's
        credential grants (a JWT claim can only narrow), never what the session was opened with, so
        a narrower token cannot ride a broader session (security review, issue 10, hole 2).
        """
        credentials = self.authenticate(scope)
        if credentials is session.credentials or credentials == session.credentials:
            return session.principal
        if credentials.name != session.credentials.name or credentials.kind != session.credentials.kind:
            raise AuthError("this session belongs to another principal", True)
        return self.principal_of(credentials)
