"""What the MCPL relay's parts share besides state: talking to backends and to hosts, the audit
record of each decision, and how a message is put to the policy chain (its event and principal)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import adapters
from adapters import mcp as mcp_adapter
from gateway import jsonrpc
from gateway.audit import AuditLog
from gateway.channels import Channel
from gateway.events import Dialect, Event, Kind
from gateway.mcpl.state import RelayState, exposed
from gateway.metrics import Metrics
from gateway.routing.call import CallSink
from gateway.sessions import ClientSession
from gateway.telemetry.conventions import error_type_of, error_type_of_exception
from policies.patterns import CapabilitySet
from policies.principal import Principal

if TYPE_CHECKING:
    from gateway.telemetry.observe import Tracing
    from gateway.upstreams.connection import BackendConnection


def backend_principal(backend: str) -> Principal:
    """Who a backend is when the chain decides on what it initiates: trusted for everything but MCPL
    feature sets (its requests to hosts are held to the sets the hosts enabled)."""
    return Principal(f"backend:{backend}", CapabilitySet(["*"]))


def backend_request(backend: str, method: str, params: dict[str, Any]) -> Event:
    """A request a backend sent, as the chain sees it."""
    return adapters.annotate(
        mcp_adapter.decode(
            {"jsonrpc": "2.0", "id": 0, "method": method, "params": params},
            jsonrpc.Shape.REQUEST,
            session=None,
            principal=f"backend:{backend}",
        )
    )


def backend_answer(backend: str, method: str, result: dict[str, Any]) -> Event:
    """A backend's answer to a request of ``method`` the gateway sent it (a context hook)."""
    return Event(
        kind=Kind.RESPONSE,
        method=method,
        payload={"jsonrpc": "2.0", "id": None, "result": result},
        dialect=Dialect.MCPL,
        principal=f"backend:{backend}",
        source=backend,
    )


def host_message(session: ClientSession, method: str, params: dict[str, Any], request: bool) -> Event:
    """A host's request (or notification) as the chain sees it."""
    payload: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
    if request:
        payload["id"] = 0
    return Event(
        kind=Kind.REQUEST if request else Kind.NOTIFICATION,
        method=method,
        payload=payload,
        dialect=Dialect.MCPL,
        principal=session.principal.name,
        session=session.id,
    )


def announce_feature_sets(
    sessions: Iterable[ClientSession], backend: str, added: Mapping[str, Any], removed: Iterable[str]
) -> None:
    """Tell each host session (``featureSets/changed``, §6.7) that ``backend``'s feature sets came or
    went, in the names that session sees."""
    gone = list(removed)
    for session in sessions:
        params: dict[str, Any] = {}
        if added:
            params["added"] = {exposed(session.view, backend, n): d for n, d in added.items()}
        if gone:
            params["removed"] = [exposed(session.view, backend, n) for n in gone]
        session.standalone.push(jsonrpc.notification("featureSets/changed", params))


class McplAudit:
    """One audit record (and one counted decision) per MCPL decision."""

    def __init__(self, audit: AuditLog, metrics: Metrics) -> None:
        self._audit = audit
        self._metrics = metrics

    def __call__(
        self,
        outcome: str,
        session: ClientSession | None,
        backend: str | None,
        method: str,
        feature_set: str | None = None,
        **fields: Any,
    ) -> None:
        self._metrics.mcpl_decisions.labels(method, outcome).inc()
        self._audit.record(
            outcome,
            dialect="mcpl",
            action=f"mcpl/{method}",
            method=method,
            principal=session.principal.name if session is not None else None,
            session=session.id[:8] if session is not None else None,
            backend=backend,
            feature_set=feature_set,
            **fields,
        )


class Peers:
    """Requests to one backend, and to one host session on the right stream."""

    def __init__(
        self, state: RelayState, connections: Mapping[str, BackendConnection], tracing: Tracing | None = None
    ) -> None:
        self._state = state
        self._connections = connections
        self._tracing = tracing

    def connection(self, backend: str) -> BackendConnection:
        return self._connections[backend]

    def find(self, backend: str) -> BackendConnection | None:
        """The backend's connection, if the gateway has one by that name."""
        return self._connections.get(backend)

    async def call_backend(
        self, backend: str, method: str, params: dict[str, Any], timeout: float | None = None
    ) -> dict[str, Any]:
        """A request to one backend; its answer message (result or error) as it came."""
        conn = self._connections[backend]
        if conn.state != "ready":
            raise jsonrpc.RpcError(
                jsonrpc.BACKEND_UNAVAILABLE, f"backend {backend} is unavailable: {conn.last_error or conn.state}"
            )
        if self._tracing is None:
            response = await conn.request(method, params, timeout=timeout)
        else:
            # A hook, channel or rollback request is a CLIENT span under the host's request.
            span, params = self._tracing.client(backend, conn, method, params)
            try:
                response = await conn.request(method, params, timeout=timeout)
            except BaseException as exc:
                span.end(error_type_of_exception(exc))
                raise
            span.end(error_type_of(response))
        return {k: v for k, v in response.items() if k != "id"}

    @staticmethod
    def pick(candidates: list[ClientSession], owner: Any) -> ClientSession | None:
        """The session whose call the backend is serving, if it qualifies, else the most recently active."""
        # The owners of forwarded calls are CallSinks; a subscriptions/listen stream's has no session.
        if isinstance(owner, CallSink) and owner.session in candidates:
            return owner.session
        live = [s for s in candidates if not s.closed]
        return max(live, key=lambda s: s.last_seen) if live else None

    async def ask_host(
        self,
        session: ClientSession,
        method: str,
        params: dict[str, Any],
        timeout: float | None = None,
        on_id: Callable[[str], None] | None = None,
        conn: BackendConnection | None = None,
        owner: Any = None,
    ) -> Any:
        """Send one request to a host session and return its result (RpcError for an error answer).

        It travels on the stream of the host's call the backend is serving when there is one (an
        HTTP host may have no standalone stream open), else on the session's own stream.
        """
        channel = self._channel_for(session, conn, owner)
        return await session.ask(channel, method, params, timeout or self._state.config.host_request_timeout_s, on_id)

    @staticmethod
    def _channel_for(session: ClientSession, conn: BackendConnection | None, owner: Any) -> Channel:
        if isinstance(owner, CallSink) and owner.session is session:
            return owner.channel
        if conn is not None:
            # Carriers without relation (stdio, WebSocket): the newest call of this session in flight there.
            for other in reversed(conn.owners_inflight()):
                if isinstance(other, CallSink) and other.session is session:
                    return other.channel
        return session.standalone
