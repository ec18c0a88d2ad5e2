"""Upstream credentials: which headers authenticate the gateway's request to a backend, per call (issue 17).

One provider per backend whose ``auth`` is dynamic (gateway/config_upstream_auth.py; ``static`` needs none: its
headers are the carrier's own). A provider answers two questions:

- ``for_call(principal)``: the headers of a request made *for* a caller — the gateway's client_credentials
  token, the caller's token exchanged for the backend (RFC 8693), or the caller's configured headers;
- ``identity()``: the headers of the gateway's *own* requests on the shared connection (the initialize
  handshake, the catalog's lists, the GET stream, notifications): client_credentials, configured connection
  headers, or none. One connection serves every caller, so backend-initiated traffic is never anyone's.

How a call's headers reach its request: the forwarder (gateway/routing/forwarding.py) awaits :meth:`bind`
around the call, which puts ``(backend, headers)`` in a context variable; ``BackendConnection.begin`` reads it
with :func:`call_headers` for requests that have an owner (a caller) and stores them on the ``Pending``; the
HTTP carrier sends them on that request only. The subject token of an exchange is the bearer token the client
presented on *this* request, noted by the gateway's ``authenticate`` (:func:`note_presented`) in a context
variable of the request's task: it lives in memory only, never in a session record, a log or an error.

Invariants:

- Never a silent fallback: a call whose credential cannot be had fails with -32096 (``UPSTREAM_CREDENTIAL``)
  naming the backend and a reason (``no_subject_token``, ``no_credential_for_principal``, ``refused``,
  ``unavailable``, ``malformed``), audited as ``upstream_credential_failed`` without secrets.
- Static bearer tokens of ``principals.*.tokens`` and anonymous callers are never exchanged: a gateway secret is
  not sent to an authorization server.
- Exchanged tokens are cached per (principal, SHA-256 of the subject token) until their expires_in minus the
  margin (never past the subject token's own exp; an expired subject is not exchanged), at most ``cache_size``
  per backend (least recently used dropped); concurrent calls with one key share one exchange (single flight),
  and so do concurrent refreshes of a client_credentials token. A failure is not cached. Every exchange or
  grant is audited as ``upstream_token_issued`` (backend, principal, grant).
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from gateway import jsonrpc
from gateway.config_backend import Backend as BackendConfig
from gateway.config_upstream_auth import ClientCredentialsAuth, PrincipalHeadersAuth, TokenExchangeAuth
from gateway.errors import UPSTREAM_CREDENTIAL
from gateway.upstreams.fetch import fetch
from gateway.upstreams.oauth_client import Fetch, IssuedToken, TokenClient, TokenError
from gateway.upstreams.user_sessions import CallHeaders

log = logging.getLogger(__name__)

Audit = Callable[..., None]  # gateway.audit.Audit.record: (outcome, /, **fields)
Headers = Mapping[str, str]
_NOT_EXCHANGED = frozenset({"anonymous", "static"})  # credential kinds whose token never leaves the gateway


@dataclass(frozen=True, slots=True)
class Presented:
    """The bearer token of the current request and the kind of credential it proved (policies/auth.py)."""

    token: str = field(repr=False)
    kind: str
    expires: float | None = None  # the token's exp (epoch seconds), when it has one


_PRESENTED: contextvars.ContextVar[Presented | None] = contextvars.ContextVar("sb_presented", default=None)
_CALL: contextvars.ContextVar[tuple[str, Headers] | None] = contextvars.ContextVar("sb_call_credential", default=None)


def note_presented(token: str | None, kind: str, expires: float | None = None) -> None:
    """The request being handled presented ``token`` (proved as ``kind``, valid until ``expires``)."""
    _PRESENTED.set(Presented(token, kind, expires) if token else None)


def call_headers(backend: str) -> Headers | None:
    """The headers bound for a call to ``backend`` in this context (None: not a bound call)."""
    bound = _CALL.get()
    return bound[1] if bound is not None and bound[0] == backend else None


# What the client is told when the authorization server failed: where it is and how it failed stay in the audit
# record and the log (the client learns nothing of the gateway's infrastructure).
_TOLD = {
    "unavailable": "the authorization server is unavailable",
    "malformed": "the authorization server answered something unusable",
}


class UpstreamCredentialError(jsonrpc.RpcError):
    """No credential for this call to this backend; never answered with a shared one instead."""

    def __init__(self, backend: str, reason: str, detail: str) -> None:
        told = _TOLD.get(reason, detail)
        super().__init__(
            UPSTREAM_CREDENTIAL, f"cannot call backend {backend}: {told}", {"backend": backend, "reason": reason}
        )
        self.reason = reason
        self.detail = detail  # the whole story, for the audit record


K = TypeVar("K", bound=Hashable)


class SingleFlight(Generic[K]):
    """At most one task per key; every caller of that key awaits the same result (or exception).

    A caller's cancellation does not cancel the shared task (others may wait on it); ``close`` does."""

    def __init__(self) -> None:
        self._tasks: dict[K, asyncio.Task[IssuedToken]] = {}

    async def run(self, key: K, make: Callable[[], Awaitable[IssuedToken]]) -> IssuedToken:
        task = self._tasks.get(key)
        if task is None:
            task = asyncio.ensure_future(make())
            self._tasks[key] = task
            task.add_done_callback(lambda done, key=key: self._done(key, done))  # type: ignore[misc]
        return await asyncio.shield(task)

    def _done(self, key: K, task: asyncio.Task[IssuedToken]) -> None:
        if self._tasks.get(key) is task:
            del self._tasks[key]
        if not task.cancelled():
            task.exception()  # retrieved: a failure nobody waited for any more is not "never retrieved"

    async def close(self) -> None:
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class _Granted:
    """One client_credentials token, renewed before it expires; single flight."""

    def __init__(self, client: TokenClient, on_issued: Callable[[], None]) -> None:
        self._client = client
        self._token: IssuedToken | None = None
        self._flight: SingleFlight[str] = SingleFlight()
        self._issued = on_issued
        self._renewal: asyncio.Task[None] | None = None

    async def token(self) -> IssuedToken:
        token = self._token
        if token is not None and token.fresh(time.monotonic()):
            return token
        return await self._flight.run("cc", self._fetch)

    async def _fetch(self) -> IssuedToken:
        token = await self._client.client_credentials()
        self._token = token
        self._issued()
        return token

    def current(self) -> Headers | None:
        """The latest token's headers, at once (the GET stream and notifications cannot wait); a stale one
        starts a renewal in the background, used from the next request on."""
        token = self._token
        if (token is None or not token.fresh(time.monotonic())) and (self._renewal is None or self._renewal.done()):
            self._renewal = asyncio.ensure_future(self._quietly())
        return token.headers if token is not None else None

    async def _quietly(self) -> None:
        try:
            await self.token()
        except TokenError as exc:
            log.warning("client_credentials renewal at %s failed: %s", self._client.endpoint, exc.detail)

    async def close(self) -> None:
        if self._renewal is not None:
            self._renewal.cancel()
        await self._flight.close()


class Provider:
    """The credentials of one backend (see the module docstring); subclasses per ``auth.type``."""

    per_user = False  # its calls carry the caller's own credential (so: the caller's own legacy session)
    source: object = None  # the auth section it was made from

    def __init__(self, backend: str, audit: Audit) -> None:
        self.backend = backend
        self._audit = audit

    async def for_call(self, principal: str) -> Headers:
        raise NotImplementedError

    def identity(self) -> Headers | None:
        return None

    async def prepare(self) -> None:
        """Before each connect attempt (the handshake goes out with ``identity()``)."""

    async def close(self) -> None:
        """Cancel what is in flight."""

    def _fail(self, principal: str, reason: str, detail: str) -> UpstreamCredentialError:
        self._audit(
            "upstream_credential_failed", backend=self.backend, principal=principal, reason=reason, detail=detail
        )
        return UpstreamCredentialError(self.backend, reason, detail)

    def _issued(self, principal: str, grant: str) -> None:
        self._audit("upstream_token_issued", backend=self.backend, principal=principal, grant=grant)


class ClientCredentialsProvider(Provider):
    """The gateway's own token, for its own requests and for every call alike."""

    def __init__(
        self, backend: str, config: ClientCredentialsAuth, audit: Audit, client: TokenClient | None = None
    ) -> None:
        super().__init__(backend, audit)
        self._granted = _Granted(client or TokenClient(config), lambda: self._issued("gateway", "client_credentials"))
        self._principal = "gateway"

    async def for_call(self, principal: str) -> Headers:
        try:
            return (await self._granted.token()).headers
        except TokenError as exc:
            raise self._fail(principal, exc.reason, f"the gateway's own token: {exc.detail}") from None

    def identity(self) -> Headers | None:
        return self._granted.current()

    async def prepare(self) -> None:
        try:
            await self._granted.token()
        except TokenError as exc:  # the connect attempt fails with this reason, and is retried with backoff
            raise ConnectionError(f"client_credentials token: {exc.detail}") from None

    async def close(self) -> None:
        await self._granted.close()


class TokenExchangeProvider(Provider):
    """The caller's token exchanged for one for this backend; cached per (principal, subject token)."""

    per_user = True

    def __init__(
        self, backend: str, config: TokenExchangeAuth, audit: Audit, client: TokenClient | None = None
    ) -> None:
        super().__init__(backend, audit)
        self._config = config
        self._client = client or TokenClient(config)
        self._cache: OrderedDict[tuple[str, bytes], IssuedToken] = OrderedDict()
        self._flight: SingleFlight[tuple[str, bytes]] = SingleFlight()
        self._own: _Granted | None = None
        if config.connection == "client_credentials":
            self._own = _Granted(self._client, lambda: self._issued("gateway", "client_credentials"))

    async def for_call(self, principal: str) -> Headers:
        presented = _PRESENTED.get()
        if presented is None or presented.kind in _NOT_EXCHANGED:
            raise self._fail(principal, "no_subject_token", "this backend needs the caller's OAuth access token")
        key = (principal, hashlib.sha256(presented.token.encode()).digest())
        now = time.monotonic()
        cached = self._cache.get(key)
        if cached is not None:
            if cached.fresh(now):
                self._cache.move_to_end(key)
                return cached.headers
            del self._cache[key]
        if presented.expires is not None and presented.expires <= time.time():
            # A WebSocket outlives its handshake's token: the gateway does not act for its user any longer.
            raise self._fail(principal, "no_subject_token", "the caller's access token has expired")
        subject, until = presented.token, presented.expires
        try:
            token = await self._flight.run(key, lambda: self._exchange(key, principal, subject, until))
        except TokenError as exc:
            raise self._fail(principal, exc.reason, f"token exchange: {exc.detail}") from None
        return token.headers

    async def _exchange(self, key: tuple[str, bytes], principal: str, subject: str, until: float | None) -> IssuedToken:
        token = await self._client.exchange(subject, self._config.requested_token_type)
        self._issued(principal, "token_exchange")
        if until is not None:  # never kept past the subject token's own expiry
            token = IssuedToken(token.headers, min(token.expires_at, time.monotonic() + until - time.time()))
        if token.fresh(time.monotonic()):  # a token within its margin is used once, not kept
            self._cache[key] = token
            while len(self._cache) > self._config.cache_size:
                self._cache.popitem(last=False)
        return token

    def identity(self) -> Headers | None:
        return self._own.current() if self._own is not None else None

    async def prepare(self) -> None:
        if self._own is not None:
            try:
                await self._own.token()
            except TokenError as exc:
                raise ConnectionError(f"client_credentials token for the connection: {exc.detail}") from None

    async def close(self) -> None:
        await self._flight.close()
        if self._own is not None:
            await self._own.close()


class PrincipalHeadersProvider(Provider):
    """Configured headers per principal; a principal without an entry is refused unless a default is set."""

    per_user = True

    def __init__(self, backend: str, config: PrincipalHeadersAuth, audit: Audit) -> None:
        super().__init__(backend, audit)
        self._config = config

    async def for_call(self, principal: str) -> Headers:
        headers = self._config.principals.get(principal)
        if headers is not None:
            return headers
        if isinstance(self._config.default, dict):
            return self._config.default
        raise self._fail(principal, "no_credential_for_principal", f"no credential is configured for {principal!r}")

    def identity(self) -> Headers | None:
        return self._config.connection or None


class UpstreamCredentials:
    """Every backend's provider, made from its config when its connection is made (config or runtime)."""

    def __init__(self, audit: Audit, fetcher: Fetch = fetch) -> None:
        """``fetcher``: the token endpoints' exchange (gateway/upstreams/fetch.py's, bound to the configured
        limits by gateway/core.py)."""
        self._audit = audit
        self._fetch = fetcher
        # Backend name → its provider; read by the forwarder on every call (a dict lookup, no Python call).
        self.providers: dict[str, Provider] = {}
        self._retired: list[Provider] = []  # replaced by a runtime re-registration: closed with the rest
        self.exchanges = False  # some backend exchanges the caller's token: requests must note it

    def provider_for(self, name: str, config: BackendConfig) -> Provider | None:
        """The provider of backend ``name`` (made on first need), or None when its auth needs none."""
        auth = config.auth
        provider = self.providers.get(name)
        if provider is not None:
            if provider.source == auth:  # the twin of a dual-era backend shares its primary's
                return provider
            # A backend registered again at runtime (MGP §15) with another auth: a provider of its own.
            self._retired.append(self.providers.pop(name))
        if isinstance(auth, ClientCredentialsAuth):
            provider = ClientCredentialsProvider(name, auth, self._audit, TokenClient(auth, self._fetch))
        elif isinstance(auth, TokenExchangeAuth):
            provider = TokenExchangeProvider(name, auth, self._audit, TokenClient(auth, self._fetch))
            self.exchanges = True
        elif isinstance(auth, PrincipalHeadersAuth):
            provider = PrincipalHeadersProvider(name, auth, self._audit)
        else:
            return None
        provider.source = auth
        self.providers[name] = provider
        return provider

    async def bind(self, backend: str, principal: str) -> contextvars.Token[tuple[str, Headers] | None]:
        """Get the call's headers (may exchange; raises UpstreamCredentialError) and bind them to this context."""
        provider = self.providers[backend]
        headers = await provider.for_call(principal)
        if provider.per_user:  # the carrier keeps this caller's own legacy session (user_sessions.py)
            headers = CallHeaders(headers, principal)
        return _CALL.set((backend, headers))

    @staticmethod
    def unbind(token: contextvars.Token[tuple[str, Headers] | None]) -> None:
        _CALL.reset(token)

    async def close(self) -> None:
        for provider in [*self.providers.values(), *self._retired]:
            await provider.close()
