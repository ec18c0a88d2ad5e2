"""The one ``subscriptions/listen`` stream the gateway keeps open toward a modern backend.

A 2026-07-28 backend announces list changes and resource updates only on such a stream (there is
no session to push them on). Invariants: at most one stream per backend connection, opened only
when the backend declared something worth hearing (a ``listChanged`` or ``resources.subscribe``
capability); reopened with the connection's restart backoff when it ends, at once when the set of
watched resources changes (the filter is part of the request); given up for good when the backend
answers Method not found. What it carries reaches the connection's handler as ordinary
notifications, without the stream's subscription id.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from adapters import mcp_modern
from gateway import jsonrpc

if TYPE_CHECKING:
    from gateway.upstreams.connection import BackendConnection, Pending

log = logging.getLogger(__name__)

_FOREVER_S = 365 * 86400.0  # the stream lives as long as the connection; its end is not a timeout


class ListenOwner:
    """Receives everything one listen request's stream carries, list changes and resource updates
    included: they reach the handler only through it, without the stream's subscription id."""

    session_id = ""
    log_level = None

    def __init__(self, deliver: Callable[[dict[str, Any]], None]) -> None:
        self._deliver = deliver
        self.acknowledged = False

    def deliver(self, message: dict[str, Any]) -> None:
        if message.get("method") == "notifications/subscriptions/acknowledged":
            self.acknowledged = True
            return
        params = message.get("params")
        if isinstance(params, dict) and isinstance(params.get("_meta"), dict):
            meta = {k: v for k, v in params["_meta"].items() if k != mcp_modern.SUBSCRIPTION_ID_KEY}
            params = {**params, "_meta": meta} if meta else {k: v for k, v in params.items() if k != "_meta"}
            message = {**message, "params": params}
        self._deliver(message)


class ListenStream:
    """Keeps ``conn``'s listen stream open while the connection is up; ``deliver`` gets its news."""

    def __init__(self, conn: BackendConnection, deliver: Callable[[dict[str, Any]], None]) -> None:
        self._conn = conn
        self._deliver = deliver
        self.resources: set[str] = set()  # the resources watched for every session (the filter)
        self._task: asyncio.Task[None] | None = None
        self._open: Pending | None = None  # the listen request in flight, if any
        self._reopen_now = False

    def start(self) -> None:
        self.stop()
        self._task = asyncio.create_task(self._run(), name=f"listen-{self._conn.name}")

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    def refilter(self) -> None:
        """The set of watched resources changed: reopen the stream with the new filter."""
        pending = self._open
        if pending is not None:
            self._reopen_now = True
            self._conn.cancel(pending, "subscription set changed")

    def _wanted(self) -> dict[str, bool] | None:
        caps = self._conn.capabilities
        wanted = {
            "toolsListChanged": bool((caps.get("tools") or {}).get("listChanged")),
            "promptsListChanged": bool((caps.get("prompts") or {}).get("listChanged")),
            "resourcesListChanged": bool((caps.get("resources") or {}).get("listChanged")),
        }
        if not any(wanted.values()) and not (caps.get("resources") or {}).get("subscribe"):
            return None
        return wanted

    async def _run(self) -> None:
        conn = self._conn
        wanted = self._wanted()
        if wanted is None:
            return
        backoff = conn.config.restart.initial_backoff_s
        while conn.state in ("ready", "connecting"):
            await conn.wait_ready(_FOREVER_S)
            params = {"notifications": {**wanted, "resourceSubscriptions": sorted(self.resources)}}
            owner = ListenOwner(self._deliver)
            pending = self._open = conn.begin("subscriptions/listen", params, owner)
            try:
                response = await conn.call(pending, _FOREVER_S)
            except jsonrpc.RpcError as exc:
                response = jsonrpc.error(None, exc.code, exc.message)
            finally:
                self._open = None
            error = response.get("error")
            if isinstance(error, dict) and error.get("code") == jsonrpc.METHOD_NOT_FOUND:
                log.info("backend %s offers no subscriptions/listen; list changes will not be pushed", conn.name)
                return
            if self._reopen_now:
                self._reopen_now = False  # reopened on purpose with a new filter: no pause
                continue
            if owner.acknowledged:
                backoff = conn.config.restart.initial_backoff_s
            else:
                backoff = min(backoff * 2, conn.config.restart.max_backoff_s)
            await asyncio.sleep(backoff)
