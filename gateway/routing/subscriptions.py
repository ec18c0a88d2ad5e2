"""One table of resource subscriptions, for legacy ``resources/subscribe`` and modern listen streams.

Invariants: each (backend, URI) is watched at most once toward its backend, however many sessions
hold it (``resources/subscribe`` for a legacy backend, its listen filter for a modern one); the
backend stops watching when the last holder lets go or ends; a backend that reconnects is told
again; a ``notifications/resources/updated`` reaches exactly the holders, under each one's view of
the URI. Who may subscribe is decided by the policy chain before anything reaches this table.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gateway.sessions import ClientSession, SessionStore
    from gateway.upstreams.connection import BackendConnection

Key = tuple[str, str]  # (backend, the backend's own URI)


class Subscriptions:
    def __init__(self, connections: Mapping[str, BackendConnection], sessions: SessionStore) -> None:
        self._connections = connections
        self._sessions = sessions
        self._holders: dict[Key, set[str]] = {}  # -> ids of the sessions holding it

    def held(self, backend: str, uri: str) -> bool:
        return bool(self._holders.get((backend, uri)))

    def hold(self, session: ClientSession, backend: str, uri: str) -> None:
        """Record ``session`` as a holder, without telling the backend (it was told, or will be)."""
        key = (backend, uri)
        self._holders.setdefault(key, set()).add(session.id)
        session.subscriptions.add(key)

    def add(self, session: ClientSession, backend: str, uri: str) -> None:
        """Hold (backend, uri) for ``session`` and make sure the backend watches it."""
        first = not self.held(backend, uri)
        self.hold(session, backend, uri)
        conn = self._connections[backend]
        if first and conn.state == "ready":
            self._watch(conn, uri)

    def release(self, session: ClientSession, backend: str, uri: str) -> bool:
        """Let go of (backend, uri) for ``session``; True when it was the last holder."""
        key = (backend, uri)
        session.subscriptions.discard(key)
        holders = self._holders.get(key, set())
        holders.discard(session.id)
        if holders:
            return False
        self._holders.pop(key, None)
        return True

    def by_listen_filter(self, backend: str) -> bool:
        """A modern backend has no ``resources/subscribe``: the URIs it watches ride its listen filter."""
        return self._connections[backend].era == "modern"

    def stop_listening(self, backend: str, uri: str) -> bool:
        """Take ``uri`` out of a modern backend's listen filter; False for a legacy backend (which
        must be sent ``resources/unsubscribe``)."""
        conn = self._connections[backend]
        if conn.era != "modern":
            return False
        conn.listen_resources.discard(uri)
        conn.relisten()
        return True

    def session_ended(self, session: ClientSession) -> None:
        for backend, uri in session.subscriptions:
            holders = self._holders.get((backend, uri))
            if holders is None:
                continue
            holders.discard(session.id)
            if not holders:
                del self._holders[(backend, uri)]
                conn = self._connections[backend]
                if conn.era == "modern":
                    conn.listen_resources.discard(uri)
                    conn.relisten()
                elif conn.state == "ready":
                    conn.spawn(conn.request("resources/unsubscribe", {"uri": uri}, timeout=10.0))

    def backend_connected(self, conn: BackendConnection) -> None:
        """A (re)connected backend watches again what is held on it."""
        for backend, uri in list(self._holders):
            if backend == conn.name:
                if conn.era == "modern":
                    conn.listen_resources.add(uri)
                else:
                    conn.spawn(conn.request("resources/subscribe", {"uri": uri}, timeout=10.0))

    def deliver_update(self, conn: BackendConnection, message: dict[str, Any], params: dict[str, Any]) -> None:
        uri = params.get("uri")
        if not isinstance(uri, str):
            return
        for sid in self._holders.get((conn.name, uri), ()):
            session = self._sessions.get(sid)
            if session is not None:
                exposed = session.view.namer.uri_out(conn.name, uri)
                session.standalone.push({**message, "params": {**params, "uri": exposed}})

    @staticmethod
    def _watch(conn: BackendConnection, uri: str) -> None:
        if conn.era == "modern":
            conn.listen_resources.add(uri)
            conn.relisten()
        else:
            conn.spawn(conn.request("resources/subscribe", {"uri": uri}, timeout=10.0))
