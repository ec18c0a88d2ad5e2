"""The Starlette application: every front door on one port, plus health, readiness and metrics."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute

from gateway.admin import AdminApi
from gateway.config import Config, Limits
from gateway.core import Gateway
from gateway.federation import View
from gateway.mcpx.api import McpxApi
from gateway.mcpx.door import McpxDoor
from gateway.routing.listen import ListenAdmission
from gateway.transports.auth_wait import after_auth_wait
from gateway.transports.origin import OriginGuard, refuse
from gateway.transports.sse import LegacySseDoor
from gateway.transports.streamable_http import StreamableHttpDoor
from gateway.transports.streamable_http_modern import ModernExchange
from gateway.transports.websocket import WebSocketDoor
from gateway.ui import dashboard_for


class _Asgi:
    """Route target that hands the raw ASGI triple to a door (Starlette treats non-functions as ASGI apps)."""

    def __init__(self, handler: Any) -> None:
        self._handler = handler

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self._handler(scope, receive, send)


class FastPath:
    """The entrance. Every HTTP request and WebSocket handshake first meets the one Host/Origin rule
    (transports/origin.py), whatever its path. Then the hottest exact paths go straight to their
    door; Starlette's routing and middleware cost several percent of a tools/call round trip and add
    nothing there (the doors handle errors)."""

    def __init__(
        self,
        app: Starlette,
        exact: dict[str, Callable[[Any, Any, Any], Awaitable[None]]],
        guard: OriginGuard,
        lean: tuple[str, ...] = (),
        lean_body_limit: int = 0,
        lean_doors: dict[str, Callable[[Any, Any, Any], Awaitable[None]]] | None = None,
        auth_pending: Callable[[Any], Awaitable[object] | None] | None = None,
        client_limits: Limits | None = None,
    ) -> None:
        self.app = app
        self.state = app.state
        self._exact = exact
        self._guard = guard
        # What a request's token needs from the network before its door may ask who is calling
        # (transports/auth_wait.py); None for most requests, at the cost of one call.
        self._auth_pending = auth_pending
        # What the gateway's protocol may serve on its lean cycle (transports/lean.py): plain POSTs to
        # these exact paths, with a Content-Length within this limit.
        lean_doors = lean_doors or {}
        self.lean_posts = frozenset(path.encode() for path in lean)
        self.lean_body_limit = lean_body_limit
        # The client timeouts the gateway's protocol applies to every connection (request head, body, a
        # response the client does not read): transports/http_protocol.py reads them here.
        self.client_limits = client_limits
        # ... and what serves each (raw path -> (path, handler)): the entrance for a request known to
        # be a plain HTTP POST to that exact path, so asked nothing dispatch would ask of it.
        self.lean_doors: dict[bytes, tuple[str, Callable[[Any, Any, Any], Awaitable[None]]]] = {
            path.encode(): (path, self._lean_door(lean_doors.get(path) or exact[path])) for path in lean
        }

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.dispatch(scope, receive, send)

    def dispatch(self, scope: Any, receive: Any, send: Any) -> Awaitable[None]:
        """``__call__`` without a coroutine frame of its own: the awaitable that serves the request.
        The gateway's protocol awaits it directly for the lean cycle (transports/lean.py), so the
        door's coroutine is one frame nearer the task on every resume."""
        if scope["type"] != "lifespan":
            refused = self._guard.check(scope)
            if refused is not None:
                return refuse(scope, send, *refused)
            if self._auth_pending is not None:
                waiting = self._auth_pending(scope)
                if waiting is not None:
                    return after_auth_wait(waiting, self._route, scope, receive, send)
        if scope["type"] == "http":
            handler = self._exact.get(scope["path"])
            if handler is not None:
                return handler(scope, receive, send)
        return self.app(scope, receive, send)

    def _lean_door(
        self, handler: Callable[[Any, Any, Any], Awaitable[None]]
    ) -> Callable[[Any, Any, Any], Awaitable[None]]:
        """:meth:`dispatch` for a plain HTTP POST to the exact path ``handler`` serves (the gateway's
        protocol knows it is one: transports/http_protocol.py): the same rule and token wait, then the door."""
        check, auth_pending = self._guard.check, self._auth_pending

        def serve(scope: Any, receive: Any, send: Any) -> Awaitable[None]:
            refused = check(scope)
            if refused is not None:
                return refuse(scope, send, *refused)
            if auth_pending is not None:
                waiting = auth_pending(scope)
                if waiting is not None:
                    return after_auth_wait(waiting, handler, scope, receive, send)
            return handler(scope, receive, send)

        return serve

    def _route(self, scope: Any, receive: Any, send: Any) -> Awaitable[None]:
        """The tail of :meth:`dispatch`, once the token's network needs are met (one frame less inline)."""
        if scope["type"] == "http":
            handler = self._exact.get(scope["path"])
            if handler is not None:
                return handler(scope, receive, send)
        return self.app(scope, receive, send)


def build_app(config: Config, gateway: Gateway | None = None) -> FastPath:
    gw = gateway or Gateway(config)

    def federated(_scope: Any) -> View:
        return gw.federated

    def single(scope: Any) -> View | None:
        return gw.view_named(scope.get("path_params", {}).get("name", ""))

    # Every MCP door gets what it uses; the front desk (who calls, may a session open) is the gateway.
    router, sessions, limits, counters = gw.router, gw.sessions, gw.config.limits, gw.metrics
    modern = ModernExchange(
        desk=gw,
        sessions=sessions,
        catalog=gw.catalog,
        identity=gw.server_identity,
        mgp=gw.mgp.server,
        listen_admission=ListenAdmission(gw.chain, gw.catalog, gw.subscriptions, router),
        limits=limits,
        parked=gw.replicas.parked,
    )

    def mcp_door(view_of: Callable[[Any], View | None]) -> StreamableHttpDoor:
        return StreamableHttpDoor(
            view_of,
            desk=gw,
            router=router,
            sessions=sessions,
            limits=limits,
            metrics=counters,
            modern=modern,
            shared=gw.replicas.sessions,
        )

    def sse_door(view_of: Callable[[Any], View | None], messages_path: Callable[[Any], str]) -> LegacySseDoor:
        return LegacySseDoor(
            view_of,
            messages_path,
            desk=gw,
            router=router,
            sessions=sessions,
            limits=limits,
            metrics=counters,
            shared=gw.replicas.sessions,
        )

    def ws_door(view_of: Callable[[Any], View | None]) -> WebSocketDoor:
        return WebSocketDoor(view_of, desk=gw, router=router, sessions=sessions, limits=limits, metrics=counters)

    mcp_fed = mcp_door(federated)
    mcp_one = mcp_door(single)
    sse_fed = sse_door(federated, lambda _s: "/messages")
    sse_one = sse_door(single, lambda s: f"/servers/{s['path_params']['name']}/messages")
    ws_fed = ws_door(federated)
    ws_one = ws_door(single)
    topic_door = McpxDoor(
        gw.config.mcpx,
        queue_size=gw.config.limits.session_queue,
        topics=gw.topics,
        chain=gw.chain,
        audit=gw.audit,
        metrics=gw.metrics,
        authenticate=gw.authenticate,
        principal_of=gw.principal_of,
    )

    async def healthz(_request: Request) -> Response:
        # pid: which process answered (with `run --workers N`, several serve one port)
        return JSONResponse({"status": "ok", "pid": os.getpid()})

    async def readyz(_request: Request) -> Response:
        ready, details = gw.readiness()
        return JSONResponse(details, status_code=200 if ready else 503)

    async def metrics(_request: Request) -> Response:
        return Response(gw.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    dashboard = dashboard_for(gw) if gw.config.ui.enabled else None  # the dashboard at /ui (gateway/ui/)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        await gw.start()
        if dashboard is not None:
            await dashboard.start()
        try:
            yield
        finally:
            if dashboard is not None:
                await dashboard.stop()
            await gw.stop()

    any_method = ["GET", "POST", "DELETE", "PUT", "PATCH", "OPTIONS", "HEAD"]
    admin = AdminApi(
        auth=lambda: gw.config.auth,
        principals=gw.principals,
        principals_changed=gw.principals_changed,
        sessions=gw.sessions,
        audit=gw.audit,
        mcpl=gw.mcpl,
        pins=gw.pins,
        catalogs=gw.catalogs,
        mgp=gw.mgp.kernel,
        registry=gw.mgp.registry,
        share_principal=gw.replicas.principals.share if gw.replicas.principals is not None else None,
        relay=gw.replicas.relay,
        config=lambda: gw.config,
        reload_status=gw.reload_status,
        pools=gw.pools,
    )
    routes = [
        *admin.routes(),
        *McpxApi(
            gw.config.mcpx,
            auth=lambda: gw.config.auth,
            topics=gw.topics,
            audit=gw.audit,
            authenticate=gw.authenticate,
            admin=admin,
        ).routes(),
        WebSocketRoute("/ws", topic_door.serve),
        Route("/mcp", _Asgi(mcp_fed), methods=any_method),
        Route("/mcp/", _Asgi(mcp_fed), methods=any_method),
        WebSocketRoute("/mcp/ws", ws_fed.serve),
        Route("/sse", _Asgi(sse_fed.stream), methods=any_method),
        Route("/messages", _Asgi(sse_fed.messages), methods=any_method),
        Route("/messages/", _Asgi(sse_fed.messages), methods=any_method),
        Route("/message", _Asgi(sse_fed.messages), methods=any_method),
        Route("/servers/{name}/mcp", _Asgi(mcp_one), methods=any_method),
        WebSocketRoute("/servers/{name}/mcp/ws", ws_one.serve),
        Route("/servers/{name}/sse", _Asgi(sse_one.stream), methods=any_method),
        Route("/servers/{name}/messages", _Asgi(sse_one.messages), methods=any_method),
        Route("/servers/{name}/messages/", _Asgi(sse_one.messages), methods=any_method),
        Route("/healthz", healthz),
        Route("/readyz", readyz),
        Route("/metrics", metrics),
        *(dashboard.routes() if dashboard is not None else ()),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.gateway = gw
    # /sse and /messages too: an idle legacy SSE stream then holds no Starlette routing frames (4 KB each).
    exact: dict[str, Callable[[Any, Any, Any], Awaitable[None]]] = {
        "/mcp": mcp_fed.dispatch,
        "/sse": sse_fed.stream,
        "/messages": sse_fed.messages,
    }
    served = FastPath(
        app,
        exact,
        OriginGuard(gw.config),
        ("/mcp", "/messages"),
        limits.max_body_bytes,
        lean_doors={"/mcp": mcp_fed.post},
        auth_pending=gw.auth_pending,
        client_limits=limits,
    )
    gw.replicas.serve(served)  # requests other replicas relay here run through the same app
    return served


def front_doors(base: str, config: Config) -> list[str]:
    """Human-readable list of URLs printed at start."""
    lines = [
        f"MCP Streamable HTTP  {base}/mcp",
        f"MCP legacy SSE       {base}/sse",
        f"MCP WebSocket        {base.replace('http', 'ws', 1)}/mcp/ws",
        f"MCPx topics          {base.replace('http', 'ws', 1)}/ws?topic=NAME",
    ]
    for name in config.backends:
        lines.append(f"backend {name:<12} {base}/servers/{name}/mcp  (also /sse, /mcp/ws)")
    for name in config.virtual_servers:
        lines.append(f"virtual {name:<12} {base}/servers/{name}/mcp  (also /sse, /mcp/ws)")
    lines += [f"health               {base}/healthz  {base}/readyz", f"metrics              {base}/metrics"]
    return lines
