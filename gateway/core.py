"""The gateway as one object: backends, sessions, views, policy chain, bus and metrics, with a lifecycle."""

from __future__ import annotations

import asyncio
import logging
from functools import partial
from typing import Any

from gateway import __version__, jsonrpc
from gateway.audit import AuditLog
from gateway.backend_factory import BackendFactory
from gateway.bus import Bus
from gateway.bus.configured import bus_from_config
from gateway.callers import Callers
from gateway.chain_assembly import policy_chain
from gateway.config import Config
from gateway.eras import EraBridge
from gateway.federation import BackendCatalog, Namer, View
from gateway.identity import ServerIdentity
from gateway.mcpc import Mcpc
from gateway.mcpl import McplRelay
from gateway.mcpx.bridge import BackendParticipants
from gateway.mcpx.hub import TopicHub
from gateway.metrics import Metrics
from gateway.mgp.access_store import BusAccessStore
from gateway.mgp.assembly import assemble as assemble_mgp
from gateway.mgp.lifecycle import Lifecycle
from gateway.mrtr import Parking
from gateway.reload_status import ReloadStatus
from gateway.replicas.assembly import Replicas, replica_id
from gateway.replicas.records import apply as apply_record, apply_mcpl, credentials_of, initialize_params
from gateway.routing import Router
from gateway.routing.backend_events import BackendEvents
from gateway.routing.catalog import Catalog
from gateway.routing.client_messages import ClientMessages
from gateway.routing.forwarding import Forwarder
from gateway.routing.levels import BackendLevels
from gateway.routing.subscriptions import Subscriptions
from gateway.runtime_backends import RuntimeBackends
from gateway.sessions import ClientSession, SessionStore
from gateway.telemetry import server_observer, tracing_from_config
from gateway.telemetry.observe import audit_tap
from gateway.upstreams.affinity import EraAffinity, TwinEvents
from gateway.upstreams.connection import BackendConnection
from gateway.upstreams.credentials import UpstreamCredentials
from gateway.upstreams.egress import (
    Defaults as EgressDefaults,
    configure_control_plane,
    control_plane_egress,
)
from gateway.upstreams.fetch import fetch
from gateway.upstreams.principal_pool import PrincipalPool
from gateway.virtual_servers import VirtualView, door_names
from policies import Decision
from policies.auth import Authenticator, Credentials, PrincipalRegistry
from policies.load import LoadPolicy
from policies.mgp_access import AccessTable
from policies.pinning import PinStore

log = logging.getLogger(__name__)


class Gateway:
    def __init__(self, config: Config, bus: Bus | None = None) -> None:
        self.config = config
        # Egress (issue 17): proxies read from the environment once, every TLS context built now; a
        # setting that cannot be used stops the start with an EgressError naming it.
        egress_defaults = EgressDefaults.load(config.egress)
        configure_control_plane(control_plane_egress(config.egress, egress_defaults))
        self.metrics = Metrics()
        self.tracing = tracing_from_config(config.telemetry, __version__)  # None: off (gateway/telemetry/)
        self.reload_status = ReloadStatus(self.metrics)  # what the last config reload did (gateway/cli.py)
        self.bus = bus or bus_from_config(config.bus)
        # Redis away: replicas serve what they can locally (gateway/bus/), /metrics and /readyz say so.
        self.bus.on_health(lambda up, _problem: self.metrics.bus_up.set(1 if up else 0))
        self.metrics.watch_bus(self.bus.stats)
        self.audit = AuditLog(config.audit, self.metrics)
        # The control plane's requests (JWKS, introspection, token endpoints: gateway/upstreams/fetch.py), with
        # the response head cap the backends' answers get (limits need a restart: bound once).
        self._fetch = partial(fetch, max_head_bytes=config.limits.max_response_head_bytes)
        # Upstream credentials per backend (issue 17): token exchange, client credentials, per-principal headers.
        self.upstream_auth = UpstreamCredentials(self.audit.record, self._fetch)
        # MGP §5: one access table for calls, lists and the mgp/access/* methods (gateway/mgp/access_methods.py).
        # Runtime grants and revocations go through the bus: every replica agrees (gateway/mgp/access_store.py).
        self.mgp_access_store = BusAccessStore(self.bus, lambda: self._tools_changed())
        self.mgp_access = AccessTable(
            (e.model_dump(exclude_none=True) for e in config.mgp.access),
            config.mgp.default_access,
            store=self.mgp_access_store,
        )
        mgp_lifecycle = Lifecycle()  # MGP §11: the state machine of every backend and of the gateway
        self.pins = PinStore(config.pinning.mode, self.bus, self.audit, self.metrics)
        self.chain = policy_chain(config, self.bus, self.pins, self.mgp_access, mgp_lifecycle)
        self.principals = PrincipalRegistry(config.principals)
        self.authenticator = Authenticator(config.auth, self.principals, self._fetch, observe=self._auth_exchange)
        # Who calls (gateway/callers.py): every door asks on every request; bound here, no extra call per request.
        self.callers = Callers(config, self.authenticator, self.upstream_auth, self.tracing)
        self.authenticate = self.callers.authenticate
        self.auth_pending = self.callers.auth_pending
        self.principal_of = self.callers.principal_of
        self.caller_of = self.callers.caller_of
        self.sessions = SessionStore(config.limits, self._session_ended)
        self.load = LoadPolicy(config.limits.max_sessions, config.limits.max_inflight_per_session)
        replica = replica_id()
        self.parking = Parking(config.limits.client_request_timeout_s, replica=replica)
        # Many replicas (gateway/replicas/): with the Redis bus, legacy sessions, parked calls, the
        # requestState key and admin changes are shared; the memory bus keeps them here, at no cost.
        self.replicas = Replicas(
            shared=config.bus.kind == "redis",
            replica=replica,
            bus=self.bus,
            store=self.sessions,
            restore=self._restore_session,
            session_ttl_s=config.limits.session_idle_s,
            parking=self.parking,
            principals=self.principals,
            principals_changed=self.principals_changed,
            refreshed=lambda session: self.mcpl.selection_changed(session) if session.mcpl is not None else None,
            history_keep=config.limits.sse_replay_events,
        )
        names = tuple(config.backends)
        fed = config.federation
        self.federated = View("*", names, Namer(fed.prefix, fed.separator, names))
        self.single: dict[str, View] = {n: View(n, (n,), Namer("never", fed.separator, (n,))) for n in names}
        self.catalogs = {n: BackendCatalog(n, fed.list_cache_s) for n in names}
        # Filled below, once the handler of their events exists; everyone holds the same mapping.
        self.connections: dict[str, BackendConnection] = {}
        # Virtual servers (issue 17): curated views at /servers/NAME/ beside the backends' own.
        self.virtual: dict[str, VirtualView] = {
            name: VirtualView(name, server, fed.separator, config.backends.__contains__, door_names(self.federated))
            for name, server in config.virtual_servers.items()
        }
        # per-principal stdio backends (issue 17): their entry in connections is the pool's head.
        self.pools: dict[str, PrincipalPool] = {}
        self.server_identity = ServerIdentity(self.connections, self.federated)  # what clients are told
        self.mcpl = McplRelay(
            config=config.mcpl,
            sessions=self.sessions,
            connections=self.connections,
            principals=self.principals,
            chain=self.chain,
            audit=self.audit,
            metrics=self.metrics,
            bus=self.bus,
            load=self.load,
            tracing=self.tracing,
        )
        self.catalog = Catalog(
            self.connections, self.catalogs, self.pins, self.chain, self.metrics, config, pools=self.pools
        )
        self.subscriptions = Subscriptions(self.connections, self.sessions)
        levels = BackendLevels(self.connections, self.sessions)
        # Backends registered at runtime (MGP §15) join and leave through here.
        self.runtime = RuntimeBackends(
            federation=fed,
            connections=self.connections,
            catalogs=self.catalogs,
            federated=self.federated,
            single=self.single,
            virtual=self.virtual,
            sessions=self.sessions,
            metrics=self.metrics,
            connect=lambda name, cfg: self.backend_factory.connection(name, cfg),
            lost=self._backend_lost,
        )
        # MGP (gateway/mgp/assembly.py): the kernel of every backend, one MGP server toward clients.
        self.mgp = assemble_mgp(
            config=config.mgp,
            list_cache_s=fed.list_cache_s,
            lifecycle=mgp_lifecycle,
            access=self.mgp_access,
            access_changed=self._tools_changed,
            chain=self.chain,
            audit=self.audit,
            sessions=self.sessions,
            connections=self.connections,
            catalog=self.catalog,
            catalogs=self.catalogs,
            add_backend=self.runtime.add,
            remove_backend=self.runtime.remove,
            backend_lost=self._backend_lost,
            replica=replica,
            registrations=self.replicas.registrations,
            permissions=self.replicas.permissions,
            federated=self.federated,
            virtual=self.virtual,  # listed by mgp/discovery/list like backends (gateway/mgp/registry.py)
        )
        # MCPC (gateway/mcpc/): detection on connect, the task table, callbacks, translation both ways.
        self.mcpc = Mcpc(
            config.mcpc,
            sessions=self.sessions,
            chain=self.chain,
            audit=self.audit,
            metrics=self.metrics,
            push_mcpc=self.mcpl.push_mcpc,
            speaks_changed=self.mcpl.mcpc_backend,
        )
        self.mgp.streams.cancels_held(self.mcpc.calls.cancel)
        shared = self.replicas.shared
        self.client_messages = ClientMessages(
            self.connections,
            self.subscriptions,
            self.mcpl,
            self.mgp.streams,
            self.mcpc.calls,
            elsewhere=shared.answer_elsewhere if shared is not None else None,
        )
        if shared is not None:
            shared.answered = partial(self.client_messages.response, forwarded=True)
        # Legacy-era twins of dual-era backends, opened on first need (the handler is made below).
        self.affinity = EraAffinity(
            lambda primary: self.backend_factory.legacy_twin(primary), config.limits.startup_wait_s
        )
        # A deregistered backend (MGP §15): MGP's kernel, lifecycle and news forget it; its legacy twin closes.
        self.runtime.on_removed(self.mgp.backend_removed)
        self.runtime.on_removed(lambda conn: self.affinity.retire(conn.name))
        self.router = Router(
            chain=self.chain,
            catalog=self.catalog,
            subscriptions=self.subscriptions,
            forwarder=Forwarder(
                self.connections,
                self.load,
                EraBridge(self.parking, config.limits),
                self.affinity,
                streams=self.mgp.streams,
                mcpc=self.mcpc.calls,
                metrics=self.metrics,
                tracing=self.tracing,
                upstream=self.upstream_auth,
                pools=self.pools,
            ),
            client_messages=self.client_messages,
            levels=levels,
            mcpl=self.mcpl,
            tool_facts=self.mgp.tools.for_call,
            mgp=self.mgp.server,
            mcpc=self.mcpc.calls,
            sessions=self.sessions,
            identity=self.server_identity,
            audit=self.audit,
            metrics=self.metrics,
            observer=server_observer(config, self.tracing),
            audit_tap=audit_tap(self.tracing),
        )
        for method, handler in self.mgp.server.methods().items():
            self.router.register(method, handler)  # MGP operations, answered by the gateway itself
        backend_events = self._backend_events = BackendEvents(
            self.catalogs,
            self.sessions,
            self.subscriptions,
            levels,
            self.mcpl,
            self.metrics,
            config.limits,
            self.mgp.news,
            self.mcpc,
        )
        self.backend_factory = BackendFactory(
            config,
            egress_defaults,
            self.upstream_auth,
            backend_events,
            TwinEvents(backend_events),
            {"name": "switchboard", "version": __version__},
            self.mgp.kernel,
            self.sessions,
            self._children_report,
            self.audit.record,
        )
        for name, cfg in config.backends.items():
            if cfg.sharing == "per-principal":  # issue 17: a pool of children, its head in connections
                self.pools[name] = pool = self.backend_factory.pool(name, cfg)
                self.connections[name] = pool.head
            else:
                self.connections[name] = self.backend_factory.connection(name, cfg)
        for name in names:
            self.metrics.backend_up.labels(name).set(0)
        # MCPx topics (gateway/mcpx/: the door is door.py); backends may sit in them as participants.
        # With a shared bus a topic spans the replicas (ADR 0015); the memory bus keeps it in this process.
        self.topics = TopicHub(
            config.mcpx.max_participants_per_topic,
            tuple(config.mcpx.topics),
            bus=self.bus if config.bus.kind != "memory" else None,
            tracing=self.tracing,
        )
        self.topic_backends = BackendParticipants(
            config.mcpx,
            topics=self.topics,
            connections=self.connections,
            catalog=self.catalog,
            catalogs=self.catalogs,
            views=self.single,
            virtual=self.virtual,  # a topic participant may be a virtual server (gateway/mcpx/virtual_routes.py)
            chain=self.chain,
            audit=self.audit,
            mcpc=self.mcpc.calls,
            tracing=self.tracing,
        )

    def _children_report(self, backend: str, counts: dict[str, int]) -> None:
        for state, count in counts.items():
            self.metrics.backend_children.labels(backend, state).set(count)
        self.metrics.backend_up.labels(backend).set(1 if counts.get("ready") else 0)

    def _backend_lost(self, conn: BackendConnection, reason: str) -> None:
        """A backend leaves on purpose (deregistered, drained): clients hear it as a lost backend."""
        self._backend_events.on_disconnected(conn, reason)

    # ---- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        await self.bus.start()
        await self.mgp_access_store.start()
        if self.authenticator.jwt is not None and self.authenticator.jwt.config.jwks_url:
            await self.authenticator.jwt.refresh()
        for name, conn in self.connections.items():
            pool = self.pools.get(name)
            await (pool.start() if pool is not None else conn.start())
        self.mgp.start()
        self.sessions.start()
        await self.replicas.start()
        self.topic_backends.start()

    async def stop(self) -> None:
        self.authenticator.close()
        await self.mgp.stop()  # MGP clients are told of the shutdown while still connected
        await self.mcpc.stop()
        self.parking.close()
        await self.topic_backends.stop()
        await self.replicas.stop()
        await self.sessions.stop()
        await asyncio.gather(*(pool.stop() for pool in self.pools.values()), return_exceptions=True)
        await asyncio.gather(*(conn.close() for conn in self.connections.values()), return_exceptions=True)
        await self.affinity.close()
        await self.upstream_auth.close()
        await self.audit.close()
        await self.mgp_access_store.stop()
        await self.bus.close()
        if self.tracing is not None:
            await self.tracing.shutdown()  # the last spans are exported before the process ends

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        backends = {
            name: {
                "state": conn.state,
                "required": conn.config.required,
                "transport": conn.config.transport,
                "era": conn.era if conn.state == "ready" else None,
                "protocol": conn.protocol_version if conn.state == "ready" else None,
                "error": conn.last_error,
                **({"legacy_path": path} if (path := self.affinity.describe(name)) is not None else {}),
                **(self.pools[name].describe() if name in self.pools else {}),
            }
            for name, conn in self.connections.items()
        }
        ready = all(conn.state == "ready" for conn in self.connections.values() if conn.config.required)
        # Every replica shares the one Redis: a 503 on all of them at once would take the whole
        # deployment out of service, so an outage is reported, and decides only with bus.required.
        bus = {"kind": self.config.bus.kind, "healthy": self.bus.healthy, "problem": self.bus.problem}
        ready = ready and (self.bus.healthy or not self.config.bus.required)
        return ready, {"ready": ready, "backends": backends, "sessions": len(self.sessions), "bus": bus}

    # ---- sessions ----------------------------------------------------------------------------

    def _auth_exchange(self, exchange: str, outcome: str) -> None:
        self.metrics.auth_exchanges.labels(exchange, outcome).inc()

    def admit_session(self, transport: str) -> Decision:
        """Whether a door may open one more session (the decision is ``policies/load.py``'s); a
        refusal is audited."""
        decision = self.load.open_session(len(self.sessions))
        if not decision.allowed:
            self.audit.record(decision.outcome, transport=transport, action="session/open", reason=decision.reason)
        return decision

    def view_named(self, name: str) -> View | None:
        """The view served at ``/servers/NAME/``: a backend's own, or a virtual server."""
        return self.single.get(name) or self.virtual.get(name)

    def open_session(self, transport: str, view: View, credentials: Credentials) -> ClientSession:
        session = self.sessions.create(transport, view, self.principal_of(credentials))
        session.credentials = credentials
        self.metrics.sessions.labels(transport).inc()
        self.replicas.created(session)
        return session

    def _restore_session(self, session_id: str, record: dict[str, Any]) -> ClientSession | None:
        """A local copy of a legacy session another replica opened (gateway/replicas/records.py): its
        principal resolved again here, its MCPL and MGP facets derived again from its initialize."""
        credentials = credentials_of(record)
        name = record.get("view")
        view = self.federated if name == self.federated.name else self.view_named(str(name))
        transport = record.get("transport")
        if credentials is None or view is None or not isinstance(transport, str):
            return None
        session = self.sessions.restore(session_id, transport, view, self.principal_of(credentials))
        session.credentials = credentials
        apply_record(session, record)
        params = initialize_params(session)
        self.mcpl.on_initialize(session, params, {})
        self.mgp.server.on_initialize(session, params, {})
        mcpl_record = record.get("mcpl")
        if session.mcpl is not None and isinstance(mcpl_record, dict):
            apply_mcpl(session.mcpl, mcpl_record)  # the host's choices, on the facet derived just now
        self.metrics.sessions.labels(transport).inc()
        return session

    def reload(self, config: Config) -> list[str]:
        """Apply a changed config to the running gateway; returns what it could not apply live.

        Identity (auth, principals) applies at once, to live sessions too. Backends, listen address,
        bus and limits need a restart; they are reported, not half-applied.
        """
        # The authenticator first: it may refuse the new auth section (a JWKS file that is missing),
        # and a refusal must leave the running principals as they were.
        authenticator = Authenticator(config.auth, self.principals, self._fetch, observe=self._auth_exchange)
        self.principals.replace(config.principals)
        # The old authenticator's exchanges in progress finish (bounded by their timeouts): requests await them.
        self.authenticator = authenticator
        self.callers.reconfigure(authenticator, config.auth)
        self.config = self.config.model_copy(
            update={"auth": config.auth, "principals": config.principals, "mcpl": config.mcpl}
        )
        self.principals_changed()
        needs_restart = [
            key
            for key in (
                *("listen", "backends", "bus", "limits", "federation", "rate_limits", "pinning", "audit", "mcpx"),
                "egress",  # proxies and TLS contexts are built once at start (issue 17)
            )
            if getattr(config, key) != getattr(self.config, key)
        ]
        if config.virtual_servers != self.config.virtual_servers:  # views are built at start (issue 17)
            needs_restart.append("virtual_servers")
        log.info(
            "config reloaded: %d principal(s)%s",
            len(config.principals),
            f"; needs a restart to apply: {', '.join(needs_restart)}" if needs_restart else "",
        )
        return needs_restart

    def principals_changed(self) -> None:
        """Re-resolve every live session's principal: runtime changes apply at once."""
        self.callers.forget()
        for session in self.sessions:
            session.principal = self.principal_of(session.credentials)
        self.mcpl.reconfigure(self.config.mcpl)  # what the operator allows changed: backends are told at once

    def _tools_changed(self) -> None:
        """Who may call what changed (an access grant or revocation): every live session's tool list
        may differ now, so every client is told to list again."""
        for session in self.sessions:
            if session.initialized and not session.closed:
                session.standalone.push(jsonrpc.notification("notifications/tools/list_changed"))

    def _session_ended(self, session: ClientSession) -> None:
        self.metrics.sessions.labels(session.transport).dec()
        self.client_messages.session_ended(session)
        self.mcpl.session_ended(session)
        self.mgp.server.session_ended(session)
        self.mcpc.session_ended(session)
