"""The dashboard's HTTP surface: the page at ``/ui/``, its static files, read-only JSON under
``/ui/api/`` and the live events as Server-Sent Events (``/ui/api/events``).

Every ``/ui/api/`` answer passes :class:`~gateway.ui.access.UiAccess` first. Actions are not here:
the page calls the admin API (``/admin/...``) with the admin token, which decides again. Every
response carries a Content-Security-Policy that allows this origin only (``connect-src 'self'``,
no inline script): the page can fetch nothing from elsewhere, and an injected string cannot run.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
from starlette.requests import Request
from starlette.responses import FileResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from gateway.ui.access import UiAccess, Viewer, refusal
from gateway.ui.tail import EventTail, TooManyViewers

if TYPE_CHECKING:
    from gateway.mcpx.hub import TopicHub
    from gateway.ui.snapshot import BackendsView, SessionsView

STATIC = Path(__file__).parent / "static"
SECURITY_HEADERS = {
    "content-security-policy": "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
}
_API_HEADERS = {**SECURITY_HEADERS, "cache-control": "no-store"}


class _Secured:
    """Adds the security headers to every response of an ASGI app (the static files)."""

    def __init__(self, app: Any) -> None:
        self._app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        async def with_headers(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                extra = [(k.encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self._app(scope, receive, with_headers)


def _json(data: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(data), status, _API_HEADERS, media_type="application/json")


def _sse(event: str, data: Any) -> str:
    return f"event: {event}\ndata: {orjson.dumps(data).decode()}\n\n"


class Dashboard:
    def __init__(
        self,
        *,
        access: UiAccess,
        backends: BackendsView,
        sessions: SessionsView,
        topics: TopicHub,
        permissions: Callable[[], Awaitable[list[dict[str, Any]]]],
        ready: Callable[[], tuple[bool, dict[str, Any]]],
        tail: EventTail,
        admin_api: Callable[[], bool],
        reload: Callable[[], dict[str, Any]],
        heartbeat_s: float = 15.0,
    ) -> None:
        """``permissions``: MGP requests waiting for an operator (every replica); ``ready``: the
        gateway's readiness; ``admin_api``: whether an admin token is configured (actions possible);
        ``reload``: the last config reload's outcome (``ReloadStatus.to_json()``)."""
        self._access = access
        self._backends = backends
        self._sessions = sessions
        self._topics = topics
        self._permissions = permissions
        self._ready = ready
        self.tail = tail
        self._admin_api = admin_api
        self._reload = reload
        self._heartbeat_s = heartbeat_s

    def routes(self) -> list[BaseRoute]:
        return [
            Route("/ui", self.to_page, methods=["GET"]),
            Route("/ui/", self.page, methods=["GET"]),
            Mount("/ui/static", _Secured(StaticFiles(directory=STATIC))),
            Route("/ui/api/whoami", self.whoami, methods=["GET"]),
            Route("/ui/api/overview", self.overview, methods=["GET"]),
            Route("/ui/api/sessions", self.sessions, methods=["GET"]),
            Route("/ui/api/backends/{name}", self.backend, methods=["GET"]),
            Route("/ui/api/pins", self.pins, methods=["GET"]),
            Route("/ui/api/topics", self.topics, methods=["GET"]),
            Route("/ui/api/permissions", self.permissions, methods=["GET"]),
            Route("/ui/api/events", self.events, methods=["GET"]),
        ]

    async def start(self) -> None:
        await self.tail.start()

    async def stop(self) -> None:
        await self.tail.stop()

    # ---- the page ----------------------------------------------------------------------------

    async def to_page(self, _request: Request) -> Response:
        # The page's URLs are relative (it may sit behind a path prefix): they need the slash.
        return RedirectResponse("ui/", status_code=308)

    async def page(self, _request: Request) -> Response:
        return FileResponse(STATIC / "index.html", headers={**SECURITY_HEADERS, "cache-control": "no-cache"})

    # ---- read-only JSON ----------------------------------------------------------------------

    def _viewer(self, request: Request) -> Viewer | Response:
        return self._access.check(request.scope)

    async def whoami(self, request: Request) -> Response:
        if isinstance(viewer := self._viewer(request), Response):
            return viewer
        return _json(
            {
                "role": viewer.role,
                "name": viewer.name,
                "may_act": viewer.may_act,
                "admin_api": self._admin_api(),
                "replica": self.tail.replica,
            }
        )

    async def overview(self, request: Request) -> Response:
        if isinstance(viewer := self._viewer(request), Response):
            return viewer
        ready, details = self._ready()
        return _json(
            {
                "replica": self.tail.replica,
                "ready": ready,
                "bus": details.get("bus"),
                "backends": self._backends.rows(),
                "sessions": self._sessions.summary(),
                "topics": await self._topics.listing(),
                "viewers": self.tail.viewers,
                # Whether the last reload was refused, for every viewer; why is on the config page (admin):
                # a validation message may quote the refused file.
                "reload": {key: self._reload().get(key) for key in ("ok", "last_attempt", "applied_at")},
            }
        )

    async def sessions(self, request: Request) -> Response:
        if isinstance(viewer := self._viewer(request), Response):
            return viewer
        return _json({"replica": self.tail.replica, "sessions": self._sessions.rows()})

    async def backend(self, request: Request) -> Response:
        if isinstance(viewer := self._viewer(request), Response):
            return viewer
        detail = await self._backends.detail(request.path_params["name"])
        if detail is None:
            return refusal(404, "no such backend")
        return _json(detail)

    async def pins(self, request: Request) -> Response:
        if isinstance(viewer := self._viewer(request), Response):
            return viewer
        return _json({"pending": self._backends.changed_pins()})

    async def topics(self, request: Request) -> Response:
        if isinstance(viewer := self._viewer(request), Response):
            return viewer
        topics = []
        for topic in await self._topics.listing():
            roster = await self._topics.roster(topic["name"]) or []
            topics.append({**topic, "roster": roster})
        return _json({"topics": topics})

    async def permissions(self, request: Request) -> Response:
        if isinstance(viewer := self._viewer(request), Response):
            return viewer
        return _json({"pending": await self._permissions()})

    # ---- live events -------------------------------------------------------------------------

    async def events(self, request: Request) -> Response:
        """The audit stream as SSE: ``hello`` once, then ``audit`` events, ``dropped`` when this viewer
        lost some, and a comment every ``heartbeat_s`` (proxies close idle streams)."""
        if isinstance(viewer := self._viewer(request), Response):
            return viewer
        try:
            feed = self.tail.open()
        except TooManyViewers as exc:
            return refusal(503, str(exc))
        tail, heartbeat_s = self.tail, self._heartbeat_s

        async def stream() -> AsyncIterator[str]:
            try:
                yield _sse("hello", {"replica": tail.replica, "role": viewer.role})
                while not feed.closed:
                    events, dropped = await feed.take(heartbeat_s)
                    chunk = _sse("dropped", {"count": dropped}) if dropped else ""
                    chunk += "".join(_sse("audit", event) for event in events)
                    yield chunk or ": keepalive\n\n"
            finally:
                tail.close(feed)

        headers = {**_API_HEADERS, "x-accel-buffering": "no"}
        return StreamingResponse(stream(), media_type="text/event-stream", headers=headers)
