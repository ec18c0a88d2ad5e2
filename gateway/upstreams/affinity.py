"""Era affinity: a backend that serves both MCP eras is spoken to in the client's own era.

Over Streamable HTTP the era probe finds a dual-era backend modern (``server/discover`` answers),
and modern clients are served on that connection. Such a backend usually serves the legacy
handshake at the same URL too, and may offer some things only there: the official conformance
fixture asks for sampling and elicitation with real requests only on its legacy path. So for
legacy clients the gateway opens, on first need, a second connection to the backend in the legacy
era (its *legacy twin*), shared by every legacy client like any backend connection, and forwards
their calls on it. Translation (gateway/eras.py) is for backends that speak only the other era.

Invariants:
- A twin exists only for a backend reached over Streamable HTTP with ``era: auto`` and
  ``era_affinity: true`` whose primary connection is ready in the modern era.
- Lists, subscriptions and the listen stream stay on the primary: one catalog per backend. A
  twin's list changes and resource updates are dropped (the primary announces them); its requests
  to the client and its per-call notifications are handled exactly like the primary's.
- A twin whose first handshake fails (a modern-only backend refuses ``initialize``) is closed, and
  the refusal is remembered until the primary reconnects: never a retry loop toward a backend
  that has no legacy path. Meanwhile, and whenever a twin is down, legacy clients are translated.
- A call waits at most ``wait_s`` for a twin's first handshake.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from gateway.upstreams.connection import BackendConnection, CallOwner, ConnectionHandler

log = logging.getLogger(__name__)

# What only the primary connection reports: the catalog and subscriptions are the primary's.
_PRIMARY_ONLY = frozenset(
    {
        "notifications/tools/list_changed",
        "notifications/prompts/list_changed",
        "notifications/resources/list_changed",
        "notifications/resources/updated",
    }
)


class PrimaryEvents(ConnectionHandler, Protocol):
    """The handler of primary connections, as far as twins use it."""

    def requests_lost(self, conn: BackendConnection, reason: str) -> None:
        """``conn`` went away: its requests waiting for a client's answer are dropped."""


class TwinEvents:
    """The :class:`ConnectionHandler` of legacy twins: the primary's, minus catalog bookkeeping."""

    def __init__(self, primary: PrimaryEvents) -> None:
        self._primary = primary

    def on_connected(self, conn: BackendConnection) -> None:
        log.info("backend %s: legacy-era connection ready for legacy clients", conn.name)

    def on_disconnected(self, conn: BackendConnection, reason: str) -> None:
        self._primary.requests_lost(conn, reason)

    def on_server_request(self, conn: BackendConnection, message: dict[str, Any], owner: CallOwner | None) -> None:
        self._primary.on_server_request(conn, message, owner)

    def on_notification(self, conn: BackendConnection, message: dict[str, Any]) -> None:
        if message.get("method") not in _PRIMARY_ONLY:
            self._primary.on_notification(conn, message)

    def on_mcpc_callback(self, conn: BackendConnection, message: dict[str, Any]) -> None:
        self._primary.on_mcpc_callback(conn, message)  # tasks are the backend's, whichever connection


def wants_twin(conn: BackendConnection) -> bool:
    """Whether legacy clients of this backend should get a legacy-era connection of their own."""
    config = conn.config
    return (
        conn.era == "modern"
        and conn.state == "ready"
        and config.transport == "http"
        and config.era == "auto"
        and config.era_affinity
    )


def _is_ready(conn: BackendConnection) -> bool:
    return conn.state == "ready"  # a function, so that a check after an await is not narrowed away


@dataclass(slots=True, eq=False)
class _Twin:
    conn: BackendConnection
    primary_epoch: float | None  # the primary's connected_at when the twin was made
    refused: bool = False


class EraAffinity:
    """Picks the connection a client's call goes to: the primary, or the backend's legacy twin."""

    def __init__(self, make_twin: Callable[[BackendConnection], BackendConnection], wait_s: float) -> None:
        self._make_twin = make_twin
        self._wait_s = wait_s
        self._twins: dict[str, _Twin] = {}
        self._closing: set[asyncio.Task[None]] = set()

    async def for_legacy_client(self, conn: BackendConnection) -> BackendConnection:
        """The connection a legacy client's call to ``conn``'s backend goes to."""
        if not wants_twin(conn):
            return conn
        twin = self._twins.get(conn.name)
        if twin is not None and twin.primary_epoch != conn.connected_at:
            self._retire(conn.name)  # the primary reconnected: the backend may have changed
            twin = None
        if twin is None:
            twin = self._twins[conn.name] = _Twin(self._make_twin(conn), conn.connected_at)
            await twin.conn.start()
        if twin.refused:
            return conn
        if _is_ready(twin.conn):
            return twin.conn
        if twin.conn.first_attempt_pending or twin.conn.connected_at is None:
            await twin.conn.wait_settled(self._wait_s)
            if _is_ready(twin.conn):
                return twin.conn
            if twin.conn.connected_at is None and not twin.conn.first_attempt_pending and not twin.refused:
                # The first handshake failed: no legacy path here. Translate until the primary reconnects.
                log.info(
                    "backend %s has no legacy path (%s); legacy clients are translated",
                    conn.name,
                    twin.conn.last_error,
                )
                twin.refused = True
                self._close_later(twin.conn)
        return conn  # refused, or the twin is down for now: translation serves this call

    def describe(self, name: str) -> str | None:
        """For /readyz: the state of the backend's legacy path, if one was tried."""
        twin = self._twins.get(name)
        if twin is None:
            return None
        return "refused" if twin.refused else twin.conn.state

    def retire(self, name: str) -> None:
        """``name`` left the gateway (MGP §15 deregistration): its legacy twin, if any, is closed."""
        self._retire(name)

    def _retire(self, name: str) -> None:
        twin = self._twins.pop(name, None)
        if twin is not None and not twin.refused:
            self._close_later(twin.conn)

    def _close_later(self, conn: BackendConnection) -> None:
        task = asyncio.create_task(conn.close(), name=f"close-twin-{conn.name}")
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        twins, self._twins = self._twins, {}
        await asyncio.gather(*(t.conn.close() for t in twins.values() if not t.refused), return_exceptions=True)
        for task in list(self._closing):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
