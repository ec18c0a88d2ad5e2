"""MGP graceful shutdown of a backend (§11.4): ``mgp/lifecycle/shutdown`` and the
``mgp.lifecycle.shutdown`` kernel tool, answered by the gateway as the backend's kernel.

Only an operator may ask (``policies/mgp_access.py`` ``ADMIN_METHODS``: the admin capability
``mgp/request:mgp/lifecycle/shutdown``, checked by the chain before this handler runs). The drain:

1. the backend goes ``draining`` (``notifications/mgp.lifecycle`` to the MGP clients that want it):
   new calls to it are refused with ``SERVER_DRAINING`` by ``policies/mgp_lifecycle.py``;
2. the calls in flight finish, waited for at most ``timeout_ms`` (default
   :data:`DEFAULT_TIMEOUT_MS`, at most :data:`MAX_TIMEOUT_MS`);
3. a backend that negotiated ``lifecycle`` is sent ``mgp/lifecycle/shutdown`` itself (with the
   reason and the time left), so that it can close cleanly;
4. everyone is told the backend is gone, as for a lost one (clients list tools again), the
   connection is closed (a call still in flight then fails) and the backend is ``disconnected``
   for good: it is not restarted (until the gateway restarts, or it is registered again).

The answer comes at once, with the §11.4 result (``accepted``, ``pending_requests``,
``estimated_drain_ms``); the drain goes on in a task of this module, cancelled when the gateway
stops. Params: ``server_id`` (required: the gateway itself is not shut down over MGP), ``reason``
(one of §11.4's reasons, default ``operator_request``), ``timeout_ms`` (a positive number).
Malformed params are ``-32602``, an unknown server §14.3.1's ``RESOURCE_NOT_FOUND`` (4004) for a
0.8 client (-32602 before 0.8: ``health.unknown_server``); a backend an operator is already draining is
``SERVER_DRAINING`` (2001), one already shut down ``SERVER_NOT_READY`` (2000). A backend that only
said it drains (its own ``notifications/mgp.lifecycle``) may still be shut down.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from gateway import jsonrpc
from gateway.errors import MgpCode, mgp_error_data
from gateway.mgp.health import KernelView, calls_in_flight, speaks_lifecycle, unknown_server
from gateway.mgp.lifecycle import GATEWAY_ID, Lifecycle
from gateway.routing.call import Call, Handler, Routed

if TYPE_CHECKING:
    from gateway.upstreams.connection import BackendConnection

log = logging.getLogger(__name__)

SHUTDOWN = "mgp/lifecycle/shutdown"
REASONS = frozenset({"operator_request", "configuration_change", "resource_limit", "idle_timeout", "kernel_shutdown"})
DEFAULT_TIMEOUT_MS = 30_000
MAX_TIMEOUT_MS = 300_000
_POLL_S = 0.02  # how often the drain looks at the calls in flight (the connection has no event for it)
_BACKEND_SHUTDOWN_TIMEOUT_S = 5.0


class Drain:
    def __init__(
        self,
        connections: Mapping[str, BackendConnection],
        lifecycle: Lifecycle,
        kernel: KernelView,
        before_close: Callable[[BackendConnection, str], None],
    ) -> None:
        self._connections = connections
        self._lifecycle = lifecycle
        self._kernel = kernel
        # Everyone is told the backend is gone, as for a lost one (clients list again; requests it
        # made of them are dropped), while it is still connected.
        self._before_close = before_close
        self._tasks: set[asyncio.Task[None]] = set()

    def handlers(self) -> dict[str, Handler]:
        return {SHUTDOWN: self.shutdown}

    async def stop(self) -> None:
        """Cancel the drains under way (the gateway is stopping and closes every connection itself)."""
        tasks, self._tasks = self._tasks, set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def shutdown(self, call: Call) -> Routed:
        backend, reason, timeout_ms = self._params(call)
        conn = self._connections[backend]
        self._lifecycle.observe(conn)
        state = self._lifecycle.state(backend)
        if self._lifecycle.stopped(backend):  # an operator's drain is under way or over
            code = MgpCode.SERVER_DRAINING if state == "draining" else MgpCode.SERVER_NOT_READY
            what = "is already draining" if state == "draining" else "was already shut down"
            raise jsonrpc.RpcError(
                int(code), f"server {backend!r} {what}", mgp_error_data(code, details={"state": state})
            )
        pending = calls_in_flight(conn)
        self._lifecycle.begin_drain(backend, reason)
        task = asyncio.create_task(self._drain(conn, reason, timeout_ms), name=f"mgp-drain-{backend}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        result = {"accepted": True, "pending_requests": pending, "estimated_drain_ms": timeout_ms if pending else 0}
        return Routed(jsonrpc.result(call.rpc_id, result), backend)

    def _params(self, call: Call) -> tuple[str, str, int]:
        params = call.params
        backend = params.get("server_id")
        if backend is None or backend == GATEWAY_ID:
            raise jsonrpc.RpcError(
                jsonrpc.INVALID_PARAMS, "params.server_id must name a backend (the gateway is not shut down over MGP)"
            )
        if (
            not isinstance(backend, str)
            or backend not in call.session.view.backends
            or backend not in self._connections
        ):
            raise unknown_server(call, backend)
        reason = params.get("reason", "operator_request")
        if reason not in REASONS:
            raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, f"params.reason must be one of {', '.join(sorted(REASONS))}")
        timeout = params.get("timeout_ms", DEFAULT_TIMEOUT_MS)
        if not isinstance(timeout, int | float) or isinstance(timeout, bool) or not timeout > 0:
            raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, "params.timeout_ms must be a positive number")
        return backend, str(reason), int(min(timeout, MAX_TIMEOUT_MS))

    async def _drain(self, conn: BackendConnection, reason: str, timeout_ms: int) -> None:
        started = time.monotonic()
        deadline = started + timeout_ms / 1000
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_ms / 1000):
                while calls_in_flight(conn):  # noqa: ASYNC110 (polled: a connection signals no "last call done")
                    await asyncio.sleep(_POLL_S)
        left = calls_in_flight(conn)
        if left:
            log.warning("backend %s: %d call(s) still in flight after %d ms; closing", conn.name, left, timeout_ms)
        if conn.state == "ready" and speaks_lifecycle(self._kernel, conn.name):
            remaining_ms = max(0, int((deadline - time.monotonic()) * 1000))
            try:
                await conn.request(
                    SHUTDOWN, {"reason": reason, "timeout_ms": remaining_ms}, timeout=_BACKEND_SHUTDOWN_TIMEOUT_S
                )
            except jsonrpc.RpcError as exc:
                log.info("backend %s did not take %s: %s", conn.name, SHUTDOWN, exc.message)
        if conn.state == "ready":
            self._before_close(conn, f"shut down: {reason}")
        await conn.close()
        drained_ms = int((time.monotonic() - started) * 1000)
        self._lifecycle.end_drain(conn.name, reason)
        log.info("backend %s shut down (%s) after draining %d ms", conn.name, reason, drained_ms)
