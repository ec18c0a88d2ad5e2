"""How the gateway's connections to backends are made: one per backend, a legacy twin, or a pool of children.

Every connection gets what its backend's config asks for, decided once here (issue 17): its egress
(proxy and TLS, gateway/upstreams/egress.py), its upstream credential provider (gateway/upstreams/
credentials.py: a backend whose credential is dynamic gets it per request, and so no legacy HTTP+SSE
fallback, whose one stream serves every user), and, for ``sharing: per-principal`` stdio backends, a
pool of children behind a head that stands for the backend in ``connections``
(gateway/upstreams/principal_pool.py). Children speak plain MCP: no MCPL offer, no MGP kernel.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from gateway.routing.pool_events import ChildEvents
from gateway.sessions import level_rank
from gateway.upstreams import make_carrier
from gateway.upstreams.connection import BackendConnection
from gateway.upstreams.egress import BackendEgress, Defaults as EgressDefaults, backend_egress
from gateway.upstreams.principal_pool import PoolHead, PrincipalPool
from policies.principal_pool import PoolAdmission

if TYPE_CHECKING:
    from gateway.config import Backend as BackendConfig, Config
    from gateway.mgp.kernel import Kernel
    from gateway.routing.backend_events import BackendEvents
    from gateway.sessions import SessionStore
    from gateway.upstreams.affinity import TwinEvents
    from gateway.upstreams.credentials import UpstreamCredentials


class BackendFactory:
    def __init__(
        self,
        config: Config,
        egress_defaults: EgressDefaults,
        upstream_auth: UpstreamCredentials,
        events: BackendEvents,
        twin_events: TwinEvents,
        client_info: dict[str, Any],
        kernel: Kernel,
        sessions: SessionStore,
        children_report: Callable[[str, dict[str, int]], None],
        audit: Callable[..., Any],
    ) -> None:
        self._limits = config.limits
        self._list_cache_s = config.federation.list_cache_s
        self._egress_defaults = egress_defaults
        self._egress: dict[str, BackendEgress] = {}
        self._upstream_auth = upstream_auth
        self._events = events
        self._twin_events = twin_events
        self._client_info = client_info
        self._kernel = kernel
        self._sessions = sessions
        self._children_report = children_report
        self._audit = audit

    def connection(self, name: str, cfg: BackendConfig) -> BackendConnection:
        """The connection to one backend (from the config, or registered at runtime: MGP §15)."""
        egress = None
        if cfg.transport in ("http", "sse", "ws"):
            egress = self._egress[name] = backend_egress(name, cfg, self._egress_defaults)
        provider = self._upstream_auth.provider_for(name, cfg)
        identity = provider.identity if provider is not None else None
        return BackendConnection(
            name,
            cfg,
            partial(make_carrier, name, cfg, self._limits, egress, identity),
            self._events,
            self._client_info,
            sse_fallback=partial(make_carrier, name, cfg.model_copy(update={"transport": "sse"}), self._limits, egress)
            if cfg.transport == "http" and provider is None
            else None,
            kernel=self._kernel,
            identity=identity,
            prepare=provider.prepare if provider is not None else None,
        )

    def legacy_twin(self, primary: BackendConnection) -> BackendConnection:
        """A legacy-era connection to ``primary``'s backend, for its legacy clients (gateway/upstreams/affinity.py).
        MCPL is not offered on it: MCPL state is the primary's. Its egress and credentials are the primary's."""
        config = primary.config.model_copy(update={"era": "legacy"})
        provider = self._upstream_auth.provider_for(primary.name, primary.config)
        identity = provider.identity if provider is not None else None
        egress = self._egress.get(primary.name)
        return BackendConnection(
            primary.name,
            config,
            partial(make_carrier, primary.name, config, self._limits, egress, identity),
            self._twin_events,
            self._client_info,
            offer_mcpl=False,
            kernel=self._kernel,
            identity=identity,
            prepare=provider.prepare if provider is not None else None,
        )

    def pool(self, name: str, cfg: BackendConfig) -> PrincipalPool:
        """The pool of a per-principal stdio backend; its head stands for it in ``connections``."""
        limits, sessions = self._limits, self._sessions
        head = PoolHead(name, cfg, partial(make_carrier, name, cfg, limits), self._events, self._client_info)
        admission = PoolAdmission(name, cfg.principal_env, cfg.default_env, cfg.principal_env_var)

        def connect(backend: str, child_cfg: BackendConfig, principal: str) -> BackendConnection:
            return BackendConnection(
                backend,
                child_cfg,
                partial(make_carrier, backend, child_cfg, limits),
                ChildEvents(principal, pool, self._events, sessions),
                self._client_info,
                offer_mcpl=False,
            )

        def level_of(principal: str) -> str | None:
            # The most verbose level that principal's own sessions on this backend asked for.
            levels = [
                s.log_level
                for s in sessions
                if s.log_level and not s.closed and s.principal.name == principal and name in s.view.backends
            ]
            return min(levels, key=level_rank) if levels else None

        pool = PrincipalPool(
            head, admission, connect, self._list_cache_s, self._children_report, level_of, audit=self._audit
        )
        return pool  # connect() above closes over it: each child's events know their pool
