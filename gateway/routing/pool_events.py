"""What a per-principal child sends on its own reaches its principal's sessions, and no one else's.

The :class:`~gateway.upstreams.connection.ConnectionHandler` of each child of a ``sharing:
per-principal`` backend (gateway/upstreams/principal_pool.py). The shared backends' handler
(gateway/routing/backend_events.py) attributes a request that arrives without relation to a call to
*any* session of the backend (ADR 0002's heuristic); here the candidates are only the sessions of the
child's principal, so a child's sampling, elicitation or roots request, its log lines and its list
changes never reach another principal.

Invariants: every request a child sends is answered (by one of its principal's sessions, or here with
an error); a list change invalidates that child's own lists only; MCPL, MGP and MCPC news of a child
is dropped (those extensions are not spoken to per-principal children, see the ADR); a
``notifications/cancelled`` ends only the requests of this child.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from adapters import mcpl
from adapters.mcp import CLIENT_CAPABILITY_OF
from adapters.mgp import strip as mgp_strip
from gateway import jsonrpc
from gateway.federation import ListKind
from gateway.routing.call import CallSink

if TYPE_CHECKING:
    from gateway.routing.backend_events import BackendEvents
    from gateway.sessions import ClientSession, SessionStore
    from gateway.upstreams.connection import BackendConnection, CallOwner
    from gateway.upstreams.principal_pool import PrincipalPool

log = logging.getLogger(__name__)

_LIST_KINDS: dict[str, tuple[ListKind, ...]] = {
    "notifications/tools/list_changed": ("tools",),
    "notifications/prompts/list_changed": ("prompts",),
    "notifications/resources/list_changed": ("resources", "resourceTemplates"),
}


class ChildEvents:
    """The handler of one child: it knows its principal, its pool, and the shared handler it defers to
    for what is scoped already (a request related to a call; lost requests; a server's cancel)."""

    def __init__(self, principal: str, pool: PrincipalPool, events: BackendEvents, sessions: SessionStore) -> None:
        self._principal = principal
        self._pool = pool
        self._events = events
        self._sessions = sessions

    def sessions_of(self, backend: str) -> list[ClientSession]:
        """The open sessions of this child's principal that see ``backend``."""
        return [
            s
            for s in self._sessions
            if not s.closed and s.principal.name == self._principal and backend in s.view.backends
        ]

    def on_connected(self, conn: BackendConnection) -> None:
        if self._pool.child_connected(conn):
            # A respawned child may offer other lists than the one its principal saw, and a child that
            # connected after a list was answered without it was not in that list at all.
            self._push_all(conn, [jsonrpc.notification(m) for m in sorted(_LIST_KINDS)])

    def on_disconnected(self, conn: BackendConnection, reason: str) -> None:
        catalog = self._pool.catalog_of(conn)
        if catalog is not None:
            catalog.invalidate()
        self._events.requests_lost(conn, reason)  # matches this connection's requests only

    def on_mcpc_callback(self, conn: BackendConnection, message: dict[str, Any]) -> None:
        log.info("backend %s: an MCPC callback from a per-principal child is dropped", conn.name)

    def on_server_request(self, conn: BackendConnection, message: dict[str, Any], owner: CallOwner | None) -> None:
        method = message.get("method", "")
        upstream_id = message.get("id")
        if method == "ping":
            conn.spawn(conn.send(jsonrpc.result(upstream_id, {})))
            return
        if mgp_strip.is_mgp_only(message) or method in mcpl.SERVER_REQUESTS:
            # MGP and MCPL are not spoken with per-principal children (the ADR): refused, never relayed.
            self._refuse(conn, upstream_id, f"{method} is not relayed from a per-principal child")
            return
        if not (isinstance(owner, CallSink) and not owner.session.closed):
            owner = self._attribute(conn, method)
            if owner is None:
                self._refuse(conn, upstream_id, f"no session of this principal is available to answer {method}")
                return
        self._events.on_server_request(conn, message, owner)

    def _attribute(self, conn: BackendConnection, method: str) -> CallSink | None:
        """A request without relation (stdio carries none): the newest call in flight on this child
        (necessarily its principal's), else its principal's most recently active session that can answer."""
        owners = [o for o in conn.owners_inflight() if isinstance(o, CallSink) and not o.session.closed]
        if owners:
            return owners[-1]
        needed = CLIENT_CAPABILITY_OF.get(method)
        candidates = [s for s in self.sessions_of(conn.name) if needed is None or needed in s.client_capabilities]
        if not candidates:
            return None
        best = max(candidates, key=lambda s: s.last_seen)
        return CallSink(best, best.standalone)

    def on_notification(self, conn: BackendConnection, message: dict[str, Any]) -> None:
        method = message.get("method", "")
        if method == "notifications/cancelled":
            self._events.on_notification(conn, message)  # ends only requests whose connection is this child
            return
        plain = mgp_strip.for_plain_client(message)
        if plain is None or method in mcpl.SERVER_NOTIFICATIONS:
            return  # MGP / MCPL news: not spoken with per-principal children
        kinds = _LIST_KINDS.get(method)
        if kinds is not None:
            catalog = self._pool.catalog_of(conn)
            if catalog is not None:
                for kind in kinds:
                    catalog.invalidate(kind)
            self._push_all(conn, [plain])
            return
        if method == "notifications/resources/updated":
            return  # resources/subscribe is not offered on per-principal backends (the ADR)
        params = plain.get("params")
        level = params.get("level") if isinstance(params, dict) else None
        for session in self.sessions_of(conn.name):
            if method == "notifications/message" and not session.wants_log(level):
                continue
            session.standalone.push(plain)

    def _push_all(self, conn: BackendConnection, messages: list[dict[str, Any]]) -> None:
        for session in self.sessions_of(conn.name):
            if session.initialized:
                for message in messages:
                    session.standalone.push(message)

    @staticmethod
    def _refuse(conn: BackendConnection, upstream_id: Any, reason: str) -> None:
        log.info("backend %s: refused a request to the client: %s", conn.name, reason)
        conn.spawn(conn.send(jsonrpc.error(upstream_id, jsonrpc.METHOD_NOT_FOUND, reason)))
