"""Every part of MGP in the gateway, built once and wired together (ADR 0013).

The kernel toward backends (``kernel``, ``tools``), the one MGP server toward clients (``server``)
and the features that add their operations to it: access control (§5), audit (§6), lifecycle,
health and drain (§11), streaming (§12), events and callbacks (§13), the backend registry (§15)
and tool discovery (§16). What backends send that concerns MGP reaches the features through
``news``. The Gateway holds one :class:`Mgp` and starts and stops it with itself.

Invariants: every feature's operations are in ``server`` before the router's method table is
built from it; a feature is built from the collaborators it uses, never from the Gateway.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from gateway.mgp.access_methods import AccessMethods
from gateway.mgp.audit_stream import AuditStream
from gateway.mgp.callbacks import Callbacks
from gateway.mgp.discovery_service import DiscoveryService
from gateway.mgp.drain import Drain
from gateway.mgp.events import EventHub
from gateway.mgp.federated_index import FederatedIndex
from gateway.mgp.health import Health
from gateway.mgp.kernel import Kernel, PendingBoard
from gateway.mgp.lifecycle import Lifecycle, LifecycleAudit, LifecycleNotifier
from gateway.mgp.news import MgpNews
from gateway.mgp.registry import AddBackend, Registry, RemoveBackend, SharedRegistry
from gateway.mgp.server import MgpServer
from gateway.mgp.streaming import Streams
from gateway.mgp.tool_facts import ToolFacts
from gateway.mgp.tool_session import ContextBudget
from policies.mgp_permissions import OWNER_MARK, PendingPermissions, PendingRequest

if TYPE_CHECKING:
    from gateway.audit import AuditLog
    from gateway.config import Mgp as MgpConfig
    from gateway.federation import BackendCatalog, View
    from gateway.routing.catalog import Catalog
    from gateway.sessions import SessionStore
    from gateway.upstreams.connection import BackendConnection
    from policies.chain import PolicyChain
    from policies.mgp_access import AccessTable


class SharedPending(PendingBoard, Protocol):
    """The kernel's board that also hears every change of the waiting requests."""

    def changed(self, request: PendingRequest, opened: bool) -> None: ...


@dataclass(slots=True)
class Mgp:
    kernel: Kernel
    tools: ToolFacts
    server: MgpServer
    news: MgpNews
    lifecycle: Lifecycle
    audit: AuditStream
    events: EventHub
    callbacks: Callbacks
    health: Health
    drain: Drain
    discovery: DiscoveryService
    streams: Streams
    registry: Registry

    def backend_removed(self, conn: BackendConnection) -> None:
        """``RuntimeBackends.on_removed`` (§15 deregistration; the connection is closed, still under
        its name). Every news listener is told ``disconnected`` even when the backend was not
        connected (the lifecycle ends it ``disconnected``, the tool index marks its tools, events
        drop its upstream subscription ids; each is idempotent for one already told); then the
        kernel and the lifecycle forget it. Its tools leave the discovery index at the next query,
        which reconciles every index with its view's (now smaller) backends before answering
        (gateway/mgp/federated_index.py); its ``/servers/NAME/`` view's index goes with the view."""
        self.news.state(conn, "disconnected", "deregistered")
        self.lifecycle.forget(conn.name, "deregistered")
        self.kernel.forget(conn.name)
        self.health.forget(conn.name)

    def start(self) -> None:
        self.lifecycle.gateway("connected", "started")
        self.health.start()

    async def stop(self) -> None:
        self.lifecycle.gateway("draining", "kernel_shutdown")  # MGP clients are told while connected
        await self.health.stop()
        await self.drain.stop()


def assemble(
    *,
    config: MgpConfig,
    list_cache_s: float,
    lifecycle: Lifecycle,
    access: AccessTable,
    access_changed: Callable[[], None],
    chain: PolicyChain,
    audit: AuditLog,
    sessions: SessionStore,
    connections: Mapping[str, BackendConnection],
    catalog: Catalog,
    catalogs: Mapping[str, BackendCatalog],
    add_backend: AddBackend,
    remove_backend: RemoveBackend,
    backend_lost: Callable[[BackendConnection, str], None],
    replica: str = "",
    registrations: SharedRegistry | None = None,
    permissions: SharedPending | None = None,
    federated: View | None = None,
    virtual: Mapping[str, View] | None = None,
) -> Mgp:
    """``registrations`` and ``permissions``: with many replicas, runtime backends and waiting
    permission requests shared with the others (gateway/replicas/); None keeps them here. ``federated``
    and ``virtual``: the ``/mcp`` view and the virtual servers, which its ``mgp/discovery/list`` shows."""
    # A waiting permission request's id names its replica: an operator's answer on another replica
    # is run on this one (gateway/replicas/owner_relay.py).
    pending = PendingPermissions(
        grant_ttl_s=config.grant_ttl_s,
        new_id=lambda: f"perm-{uuid.uuid4().hex[:16]}{OWNER_MARK}{replica}",
        on_change=permissions.changed if permissions is not None else None,
    )
    kernel = Kernel(config, connections, pending=pending, board=permissions)
    tools = ToolFacts(config, kernel)
    news = MgpNews()

    def trust_of(backend: str) -> str:
        return registry.trust_level(backend)  # the registry is made below; asked only later

    server = MgpServer(chain=chain, tool_facts=tools, trust_of=trust_of)
    server.add(AccessMethods(access, access_changed).handlers())  # §5.4
    # §6 audit toward MGP clients, §13 events (audit, lifecycle, backends' channels) and callbacks.
    audit_stream = AuditStream(audit)
    server.on_negotiated(audit_stream.watch)
    events = EventHub(connections, kernel.backend, audit_stream, news)
    callbacks = Callbacks(connections, sessions, news, audit)
    for feature in (audit_stream, events, callbacks):
        server.add(feature.handlers())
        server.on_session_end(feature.session_ended)
    # §11: lifecycle notifications to MGP clients, health (ping/status, a watcher) and graceful shutdown.
    lifecycle.on_transition(LifecycleNotifier(sessions))
    lifecycle.on_transition(events.on_transition)  # §13 ``lifecycle`` channel: every §11.2 state
    lifecycle.on_transition(LifecycleAudit(audit))  # §6.4 SERVER_CONNECTED / _DISCONNECTED
    lifecycle.listen(news)
    health = Health(connections, lifecycle, kernel, catalogs, sessions)
    drain = Drain(connections, lifecycle, kernel, backend_lost)
    server.add({**health.handlers(), **drain.handlers()})
    # §16: tool discovery over every federated tool, fed from the catalog.
    index = FederatedIndex(catalog, catalogs, connections, tools, trust_of, recheck_s=list_cache_s)
    budget = ContextBudget(**config.tool_context.model_dump())  # §16.8, mgp.tool_context
    discovery = DiscoveryService(index, chain, budget=budget, pinned=config.pinned_tools)
    news.on_state(index.on_state)  # a lost backend's tools: status disconnected
    server.add(discovery.handlers())
    streams = Streams(kernel.backend, news)  # §12: streamed tools/call
    server.add(streams.handlers())  # §12.7 mgp/stream/cancel
    # §15: the live backend registry (runtime backends join and leave through the Gateway).
    registry = Registry(
        connections=connections,
        catalog=catalog,
        chain=chain,
        kernel=kernel,
        trust=config.trust,
        add=add_backend,
        remove=remove_backend,
        audit=audit,
        register_commands=config.register_commands,
        shared=registrations,
        federated=federated,
        virtual=virtual,
    )
    if registrations is not None:
        registrations.serve(registry)
    server.add(registry.handlers())
    return Mgp(
        kernel,
        tools,
        server,
        news,
        lifecycle,
        audit_stream,
        events,
        callbacks,
        health,
        drain,
        discovery,
        streams,
        registry,
    )
