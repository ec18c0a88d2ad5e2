"""The gateway as one object: backends, sessions, views, policy chain, bus and metrics, with a lifecycle."""

from __future__ import annotations

import asyncio
import logging
from functools import partial
from typing import Any

from adapters.mcp import LEGACY_VERSIONS
from gateway import __version__
from gateway.bus import Bus, make_bus
from gateway.config import Config
from gateway.federation import BackendCatalog, Namer, View
from gateway.metrics import Metrics
from gateway.mrtr import Parking
from gateway.router import Router
from gateway.sessions import ClientSession, SessionStore
from gateway.upstreams import make_carrier
from gateway.upstreams.connection import BackendConnection
from policies import ANONYMOUS_ALL, Principal, default_chain

log = logging.getLogger(__name__)

SERVER_INFO = {"name": "switchboard", "title": "Switchboard", "version": __version__}


class Gateway:
    def __init__(self, config: Config, bus: Bus | None = None) -> None:
        self.config = config
        self.metrics = Metrics()
        self.chain = default_chain()
        self.bus = bus or make_bus(config.bus.kind, config.bus.url, config.bus.prefix)
        self.legacy_versions = LEGACY_VERSIONS
        self.router = Router(self)
        self.parking = Parking(config.limits.client_request_timeout_s)
        self.sessions = SessionStore(config.limits, self._session_ended)
        names = tuple(config.backends)
        fed = config.federation
        self.federated = View("*", names, Namer(fed.prefix, fed.separator, names))
        self.single: dict[str, View] = {n: View(n, (n,), Namer("never", fed.separator, (n,))) for n in names}
        self.catalogs = {n: BackendCatalog(n, fed.list_cache_s) for n in names}
        client_info = {"name": "switchboard", "version": __version__}
        self.connections: dict[str, BackendConnection] = {
            name: BackendConnection(
                name,
                cfg,
                partial(make_carrier, name, cfg, config.limits),
                self.router,
                client_info,
                sse_fallback=partial(make_carrier, name, cfg.model_copy(update={"transport": "sse"}), config.limits)
                if cfg.transport == "http"
                else None,
            )
            for name, cfg in config.backends.items()
        }
        for name in names:
            self.metrics.backend_up.labels(name).set(0)

    # ---- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        await self.bus.start()
        for conn in self.connections.values():
            await conn.start()
        self.sessions.start()

    async def stop(self) -> None:
        self.parking.close()
        await self.sessions.stop()
        await asyncio.gather(*(conn.close() for conn in self.connections.values()), return_exceptions=True)
        await self.bus.close()

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        backends = {
            name: {
                "state": conn.state,
                "required": conn.config.required,
                "transport": conn.config.transport,
                "era": conn.era if conn.state == "ready" else None,
                "protocol": conn.protocol_version if conn.state == "ready" else None,
                "error": conn.last_error,
            }
            for name, conn in self.connections.items()
        }
        ready = all(conn.state == "ready" for conn in self.connections.values() if conn.config.required)
        return ready, {"ready": ready, "backends": backends, "sessions": len(self.sessions)}

    # ---- sessions ----------------------------------------------------------------------------

    def principal_for(self, scope: dict[str, Any]) -> Principal:
        """Authentication hook: every front door asks here. Without an auth section, loopback only."""
        return ANONYMOUS_ALL

    def open_session(self, transport: str, view: View, scope: dict[str, Any]) -> ClientSession:
        session = self.sessions.create(transport, view, self.principal_for(scope))
        self.metrics.sessions.labels(transport).inc()
        return session

    def _session_ended(self, session: ClientSession) -> None:
        self.metrics.sessions.labels(session.transport).dec()
        self.router.session_ended(session)

    # ---- identity ----------------------------------------------------------------------------

    def server_identity(self, view: View) -> dict[str, Any]:
        """serverInfo, capabilities and instructions that a client of this view is shown."""
        if len(view.backends) == 1 and view is not self.federated:
            conn = self.connections[view.backends[0]]
            if conn.state == "ready":
                result: dict[str, Any] = {
                    "capabilities": dict(conn.capabilities),
                    "serverInfo": conn.server_info or SERVER_INFO,
                }
                if conn.init_result.get("instructions"):
                    result["instructions"] = conn.init_result["instructions"]
                return result
        capabilities: dict[str, Any] = {
            "logging": {},
            "completions": {},
            "tools": {"listChanged": True},
            "prompts": {"listChanged": True},
            "resources": {"subscribe": True, "listChanged": True},
        }
        experimental: dict[str, Any] = {}
        instructions: list[str] = []
        for name in view.backends:
            conn = self.connections[name]
            if conn.state != "ready":
                continue
            for key, value in (conn.capabilities.get("experimental") or {}).items():
                experimental.setdefault(key, value)
            text = conn.init_result.get("instructions")
            if isinstance(text, str) and text.strip():
                instructions.append(text.strip() if len(view.backends) == 1 else f"[{name}] {text.strip()}")
        if experimental:
            capabilities["experimental"] = experimental
        result = {"capabilities": capabilities, "serverInfo": SERVER_INFO}
        if instructions:
            result["instructions"] = "\n\n".join(instructions)
        return result
