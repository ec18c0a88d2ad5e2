"""MGP health (§11.3): ``mgp/health/ping`` and ``mgp/health/status`` answered by the gateway, for
itself and per backend, and a watcher that keeps the lifecycle current and pings MGP backends.

Which server a call is about: no ``server_id`` (the seed's form, addressed to the server itself) or
the gateway's own id :data:`~gateway.mgp.lifecycle.GATEWAY_ID` is the gateway; a backend name of the
caller's view is that backend; anything else names nothing (a name outside the view is unknown to
this client, as in its tool lists): §14.3.1 ``RESOURCE_NOT_FOUND`` (4004) for a client of 0.8 or
later, ``-32602`` for earlier and plain ones (:func:`unknown_server`, also used by ``drain.py``).

A backend's health is measured, not assumed: a real round trip with a timeout of 5 s (§11.3:
"Servers MUST respond within 5 seconds"). An MGP backend whose negotiated extensions include
``lifecycle`` is asked with the seed's ``mgp/health/ping`` (``mgp/health/status`` for a status), any
other backend with MCP's ``ping``; a backend that refuses the MGP method is asked with ``ping``
instead, and from then on. Ping of a backend that is not connected is ``SERVER_NOT_READY`` (2000) or
``SERVER_RESTARTING`` (2002), and one that does not answer in time ``TIMEOUT`` (3003), each with the
§14.4 ``_mgp`` data; a status is always a result (that is what it is for).

The watcher (:meth:`Health.start`, with the gateway) ticks every :data:`WATCH_TICK_S`: it lets the
lifecycle observe every connection (what has no event: a connect that failed, a restart limit
reached before the first connect), and pings each connected lifecycle-speaking backend once every
:data:`PING_INTERVAL_S`; a failed ping is logged and shown in the backend's status. Invariants:
at most one watcher task; every wait is bounded; :meth:`Health.stop` cancels and awaits it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping, Sized
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from adapters.mgp import versions
from gateway import jsonrpc
from gateway.clock import rfc3339_ms
from gateway.errors import MgpCode, mgp_error_data
from gateway.mgp.lifecycle import GATEWAY_ID, Lifecycle
from gateway.routing.call import Call, Handler, Routed
from gateway.upstreams.listen import ListenOwner

if TYPE_CHECKING:
    from gateway.mgp.kernel import BackendMgp
    from gateway.upstreams.connection import BackendConnection

log = logging.getLogger(__name__)

PING, STATUS = "mgp/health/ping", "mgp/health/status"
PING_TIMEOUT_S = 5.0  # §11.3
PING_INTERVAL_S = 30.0  # how often the watcher pings a lifecycle-speaking backend
WATCH_TICK_S = 1.0
_LIVE = ("connected", "draining")
_HEALTH = ("healthy", "degraded", "unhealthy")


class KernelView(Protocol):
    """What the gateway negotiated with each backend as its kernel (``gateway.mgp.kernel.Kernel``)."""

    def backend(self, name: str) -> BackendMgp | None: ...


class ToolLists(Protocol):
    """A backend's cached lists (``gateway.federation.BackendCatalog``)."""

    def peek(self, kind: Literal["tools"]) -> list[dict[str, Any]] | None: ...


def calls_in_flight(conn: BackendConnection) -> int:
    """Clients' requests waiting for ``conn``'s answer (not the gateway's own, nor a modern
    backend's listen stream, which stays open for as long as the connection)."""
    return sum(1 for owner in conn.owners_inflight() if not isinstance(owner, ListenOwner))


def speaks_lifecycle(kernel: KernelView, backend: str) -> bool:
    """Whether ``backend`` negotiated MGP's ``lifecycle`` extension with the gateway (§2.4)."""
    found = kernel.backend(backend)
    return found is not None and "lifecycle" in found.active


@dataclass(frozen=True, slots=True)
class Probe:
    """One measured round trip to a backend."""

    ok: bool
    method: str
    latency_ms: float | None = None
    answer: Mapping[str, Any] = field(default_factory=dict)  # the backend's MGP result, if any
    error: str | None = None
    timed_out: bool = False
    at: float = field(default_factory=time.time)


def _object(value: object) -> dict[str, Any]:
    return dict(value) if isinstance(value, dict) else {}


class Health:
    def __init__(
        self,
        connections: Mapping[str, BackendConnection],
        lifecycle: Lifecycle,
        kernel: KernelView,
        catalogs: Mapping[str, ToolLists],
        sessions: Sized,
    ) -> None:
        self._connections = connections
        self._lifecycle = lifecycle
        self._kernel = kernel
        self._catalogs = catalogs
        self._sessions = sessions
        self._last: dict[str, Probe] = {}
        self._plain_ping: set[str] = set()  # backends that refused mgp/health/ping
        self._watcher: asyncio.Task[None] | None = None

    def handlers(self) -> dict[str, Handler]:
        return {PING: self.ping, STATUS: self.status}

    # ---- the watcher -----------------------------------------------------------------------------

    def start(self) -> None:
        if self._watcher is None:
            self._watcher = asyncio.create_task(self._watch(), name="mgp-health")

    async def stop(self) -> None:
        watcher, self._watcher = self._watcher, None
        if watcher is not None:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(WATCH_TICK_S)
            try:
                await self.tick()
            except Exception:
                log.exception("MGP health watcher tick failed")

    async def tick(self) -> None:
        """One round: observe every connection, ping the lifecycle-speaking backends that are due."""
        now = time.time()
        due = []
        for name, conn in self._connections.items():
            self._lifecycle.observe(conn)
            last = self._last.get(name)
            if (
                conn.state == "ready"
                and speaks_lifecycle(self._kernel, name)
                and (last is None or now - last.at >= PING_INTERVAL_S)
            ):
                due.append(conn)
        if not due:
            return
        for probe, conn in zip(await asyncio.gather(*(self.probe(c) for c in due)), due, strict=True):
            if not probe.ok:
                log.warning("backend %s failed its health ping: %s", conn.name, probe.error)

    # ---- measuring -------------------------------------------------------------------------------

    async def probe(self, conn: BackendConnection, *, status: bool = False) -> Probe:
        """A real round trip (MGP's health method for a lifecycle-speaking backend, else ``ping``)."""
        mgp = speaks_lifecycle(self._kernel, conn.name) and conn.name not in self._plain_ping
        if mgp:
            params = {} if status else {"timestamp": rfc3339_ms(time.time())}
            found = await self._round_trip(conn, STATUS if status else PING, params)
            if found.ok or found.timed_out or found.error is None or not found.error.startswith("refused"):
                self._last[conn.name] = found
                return found
            self._plain_ping.add(conn.name)  # it declared lifecycle but does not take the method
        found = await self._round_trip(conn, "ping", None)
        self._last[conn.name] = found
        return found

    async def _round_trip(self, conn: BackendConnection, method: str, params: dict[str, Any] | None) -> Probe:
        started = time.monotonic()
        try:
            async with asyncio.timeout(PING_TIMEOUT_S + 1):  # the connection's own timeout comes first
                response = await conn.request(method, params, timeout=PING_TIMEOUT_S)
        except (TimeoutError, jsonrpc.RpcError) as exc:
            timed_out = isinstance(exc, TimeoutError) or exc.code == jsonrpc.BACKEND_TIMEOUT
            message = f"no answer within {PING_TIMEOUT_S:g}s" if timed_out else str(getattr(exc, "message", exc))
            return Probe(False, method, error=message, timed_out=timed_out)
        latency = round((time.monotonic() - started) * 1000, 3)
        error = response.get("error")
        if error is not None:
            text = error.get("message") if isinstance(error, dict) else error
            return Probe(False, method, latency, error=f"refused {method}: {text}")
        result = response.get("result")
        return Probe(True, method, latency, result if isinstance(result, dict) else {})

    def _tools_of(self, backend: str) -> int | None:
        """How many tools ``backend`` lists (None: not fetched since it last changed)."""
        catalog = self._catalogs.get(backend)
        tools = catalog.peek("tools") if catalog is not None else None
        return len(tools) if tools is not None else None

    def last_probe(self, backend: str) -> Probe | None:
        return self._last.get(backend)

    def forget(self, backend: str) -> None:
        """A deregistered backend's last probe goes with it (§15)."""
        self._last.pop(backend, None)

    # ---- mgp/health/ping -------------------------------------------------------------------------

    async def ping(self, call: Call) -> Routed:
        backend = self._target(call)
        now = time.time()
        if backend is None:
            result: dict[str, Any] = {
                "status": self._gateway_status(),
                "timestamp": rfc3339_ms(now),
                "uptime_secs": int(now - self._lifecycle.started_at),
                "server_id": GATEWAY_ID,
            }
            return Routed(jsonrpc.result(call.rpc_id, result))
        conn = self._connections[backend]
        self._lifecycle.observe(conn)
        state = self._lifecycle.state(backend)
        if state not in _LIVE:
            code = MgpCode.SERVER_RESTARTING if state in ("restarting", "connecting") else MgpCode.SERVER_NOT_READY
            details = {"server_id": backend, "state": state, "reason": self._lifecycle.reason(backend)}
            raise jsonrpc.RpcError(
                int(code), f"server {backend!r} is {state}", mgp_error_data(code, retry_after_ms=1000, details=details)
            )
        probe = await self.probe(conn)
        if probe.timed_out:
            details = {"server_id": backend, "state": state}
            raise jsonrpc.RpcError(
                int(MgpCode.TIMEOUT),
                f"server {backend!r} did not answer its health ping within {PING_TIMEOUT_S:g}s",
                mgp_error_data(MgpCode.TIMEOUT, retry_after_ms=1000, details=details),
            )
        result = {
            "status": self._backend_status(state, probe),
            "timestamp": rfc3339_ms(time.time()),
            "uptime_secs": self._uptime(conn, probe),
            "server_id": backend,
            "state": state,
            "latency_ms": probe.latency_ms,
        }
        if probe.error is not None:
            result["error"] = probe.error
        return Routed(jsonrpc.result(call.rpc_id, result), backend)

    # ---- mgp/health/status -----------------------------------------------------------------------

    async def status(self, call: Call) -> Routed:
        backend = self._target(call)
        if backend is None:
            return Routed(jsonrpc.result(call.rpc_id, self._gateway_report(call)))
        conn = self._connections[backend]
        self._lifecycle.observe(conn)
        state = self._lifecycle.state(backend)
        probe = await self.probe(conn, status=True) if state in _LIVE else None
        tools = self._tools_of(backend) if state in _LIVE else None
        answer = probe.answer if probe is not None else {}
        resources, checks = _object(answer.get("resources")), _object(answer.get("checks"))  # server-defined
        result: dict[str, Any] = {
            "status": self._backend_status(state, probe),
            "server_id": backend,
            "state": state,
            "since": rfc3339_ms(self._lifecycle.since(backend)),
            "reason": self._lifecycle.reason(backend),
            "uptime_secs": self._uptime(conn, probe) if probe is not None else 0,
            "tools_available": _count(tools, answer, "tools_available") if state == "connected" else 0,
            "tools_total": _count(tools, answer, "tools_total"),
            "pending_requests": calls_in_flight(conn),
            "latency_ms": probe.latency_ms if probe is not None else None,
            "resources": {**resources, "restarts": conn.restarts, "transport": conn.config.transport},
            "checks": {**checks, "connected": state in _LIVE, "responding": probe is not None and probe.ok},
            "mgp": speaks_lifecycle(self._kernel, backend),
        }
        if conn.last_error:
            result["last_error"] = conn.last_error
        if probe is not None and probe.error is not None:
            result["error"] = probe.error
        return Routed(jsonrpc.result(call.rpc_id, result), backend)

    # ---- helpers ---------------------------------------------------------------------------------

    def _target(self, call: Call) -> str | None:
        """The backend a call is about, or None for the gateway itself; -32602 for an unknown one."""
        server_id = call.params.get("server_id")
        if server_id is None or server_id == GATEWAY_ID:
            return None
        if not isinstance(server_id, str) or not server_id:
            raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, "params.server_id must be a non-empty string")
        if server_id not in call.session.view.backends or server_id not in self._connections:
            raise unknown_server(call, server_id)
        return server_id

    def _backend_status(self, state: str, probe: Probe | None) -> str:
        if state not in _LIVE or probe is None or not probe.ok:
            return "unhealthy"
        said = probe.answer.get("status")
        if said in _HEALTH and said != "healthy":
            return str(said)  # the backend knows better that it is limited
        return "degraded" if state == "draining" else "healthy"

    @staticmethod
    def _uptime(conn: BackendConnection, probe: Probe | None) -> int:
        said = probe.answer.get("uptime_secs") if probe is not None else None
        if isinstance(said, int | float) and not isinstance(said, bool) and said >= 0:
            return int(said)  # the server's own uptime, when it says
        return int(time.monotonic() - conn.connected_at) if conn.connected_at is not None else 0

    def _gateway_status(self, backends: tuple[str, ...] | None = None) -> str:
        names = backends if backends is not None else tuple(self._connections)
        conns = [self._connections[n] for n in names if n in self._connections]
        if any(c.config.required and c.state != "ready" for c in conns):
            return "unhealthy"  # not ready (/readyz says 503): a backend it needs is missing
        return "healthy" if all(c.state == "ready" for c in conns) else "degraded"

    def _gateway_report(self, call: Call) -> dict[str, Any]:
        now = time.time()
        view = tuple(n for n in call.session.view.backends if n in self._connections)
        servers = {}
        available = total = pending = connected = 0
        for name in view:
            conn = self._connections[name]
            self._lifecycle.observe(conn)
            state = self._lifecycle.state(name)
            tools = self._tools_of(name) or 0
            total += tools
            available += tools if state == "connected" else 0
            pending += calls_in_flight(conn)
            connected += state in _LIVE
            servers[name] = {"state": state, "since": rfc3339_ms(self._lifecycle.since(name))}
        return {
            "status": self._gateway_status(view),
            "server_id": GATEWAY_ID,
            "state": self._lifecycle.state(GATEWAY_ID),
            "uptime_secs": int(now - self._lifecycle.started_at),
            "tools_available": available,
            "tools_total": total,
            "pending_requests": pending,
            "resources": {"sessions": len(self._sessions), "open_connections": connected, "servers": len(view)},
            "checks": {name: servers[name]["state"] == "connected" for name in view},
            "servers": servers,
        }


def _count(listed: int | None, answer: Mapping[str, Any], key: str) -> int:
    """A tool count of a status: the gateway's own (its cached list), else, before the gateway has
    fetched the list, what the backend said in its own §11.3 status, else 0."""
    if listed is not None:
        return listed
    said = answer.get(key)
    return said if isinstance(said, int) and not isinstance(said, bool) and said >= 0 else 0


def unknown_server(call: Call, server_id: object) -> jsonrpc.RpcError:
    """A ``server_id`` that names no backend of the caller's view. §14.3.1 (0.8): ``RESOURCE_NOT_FOUND``
    (4004, category ``validation``, not retryable), the message naming the identifier as given; a
    client of an earlier version (whose §14.3 has no 4004) or a plain one gets -32602."""
    message = f"Server {server_id!r} not found"
    facet = call.session.mgp
    if facet is not None and versions.at_least(facet.version, versions.RESOURCE_NOT_FOUND_SINCE):
        code = MgpCode.RESOURCE_NOT_FOUND
        return jsonrpc.RpcError(code, message, {"server_id": server_id, **mgp_error_data(code)})
    return jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, message, {"server_id": server_id})
