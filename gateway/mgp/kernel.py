"""The gateway as the MGP kernel toward its backends: the offer, the negotiation, the grants (§2, §3).

Every backend's ``initialize`` carries ``capabilities.mgp`` (the version we speak best and the
extensions the gateway implements as a kernel); a plain MCP server ignores it. A backend that
answers with ``mgp`` (top level or ``experimental``, read by ``adapters.mgp.caps``) is spoken to in
the highest version both support (a mismatch is logged, never fatal); the active extensions are
the intersection (§2.4). Its ``permissions_required`` are decided by ``mgp.permission_policy``
(``policies/mgp_permissions.py``), and the grants go to it as ``mgp/permission/grant`` after the
initialize result and **before** ``notifications/initialized``, in object form with
``expires_at``, as the real kernel does (WIRE.md: the method name is the same in every version).

Invariants: the kernel never blocks a handshake on a person: with ``interactive``, permissions no
config decides are announced to the backend as awaiting approval (``mgp/permission/await``), listed
for operators (``GET /admin/mgp/permissions``), and granted or denied when one answers (``POST
/admin/mgp/permissions/{request_id}``), or denied when the request expires; until then they are not
granted; a backend that refuses the grant request still connects (it
degrades as MGP allows); what was negotiated and granted per backend is kept for the policies
(``grants_of``) and replaced on every (re)connect. With many replicas (``board``) the listing holds
every replica's waiting requests (gateway/replicas/permission_board.py).
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from adapters.mgp import caps, extensions, names, versions
from gateway import jsonrpc
from gateway.config import Mgp as MgpConfig
from policies.mgp_permissions import (
    Grant,
    PendingFull,
    PendingPermissions,
    PermissionAnswer,
    PermissionDecider,
    granted_names,
)

log = logging.getLogger(__name__)

# What the gateway does as a kernel (canonical names): it decides permissions, reads each tool's
# security metadata, follows lifecycle and health (gateway/mgp/lifecycle.py, health.py), relays
# streams (streaming.py), subscribes to events and answers callbacks (events.py, callbacks.py).
KERNEL_EXTENSIONS = frozenset({"permissions", "tool_security", "lifecycle", "streaming", "events", "callbacks"})
GRANT_METHOD = "mgp/permission/grant"


class Requester(Protocol):
    """A live backend connection, as far as the kernel uses it after the handshake."""

    async def request(self, method: str, params: dict[str, Any] | None) -> dict[str, Any]: ...


class Exchange(Protocol):
    """How the kernel sends a request during a backend's handshake (gateway/upstreams/handshake.py)."""

    async def handshake_request(
        self, method: str, params: dict[str, Any], era: Literal["legacy", "modern"], timeout: float, probe: bool = False
    ) -> dict[str, Any]: ...


class PendingBoard(Protocol):
    """The waiting permission requests of every replica (gateway/replicas/permission_board.py)."""

    async def listing(self, local: Callable[[], list[dict[str, Any]]]) -> list[dict[str, Any]]:
        """Every replica's waiting requests, ``local()`` (this replica's) among them, oldest first."""
        ...


@dataclass(frozen=True, slots=True)
class BackendMgp:
    """What one backend negotiated and was granted on its latest connect."""

    negotiation: versions.Negotiation
    active: frozenset[str]
    permissions_required: tuple[str, ...]
    grants: Mapping[str, Grant]
    pending: tuple[str, ...]
    acknowledged: bool  # the backend answered the grant request with a result


class Kernel:
    def __init__(
        self,
        config: MgpConfig,
        connections: Mapping[str, Requester] | None = None,
        decider: PermissionDecider | None = None,
        pending: PendingPermissions | None = None,
        board: PendingBoard | None = None,
    ) -> None:
        self._decider = decider or PermissionDecider(
            config.permission_policy, config.approved_permissions, config.grant_ttl_s
        )
        # interactive: what waits for an operator (GET/POST /admin/mgp/permissions), bounded, expiring
        self._pending = pending if pending is not None else PendingPermissions(grant_ttl_s=config.grant_ttl_s)
        self._board = board
        self._connections: Mapping[str, Requester] = connections if connections is not None else {}
        self._request_ids = itertools.count(1)
        self._backends: dict[str, BackendMgp] = {}

    def offer(self) -> dict[str, Any]:
        """``capabilities.mgp`` of every ``initialize`` the gateway sends."""
        return caps.build(versions.LATEST, KERNEL_EXTENSIONS)

    async def on_initialized(self, exchange: Exchange, backend: str, result: Mapping[str, Any], timeout: float) -> None:
        """After a backend's initialize result, before ``notifications/initialized``: negotiate, and
        send the grants its ``permissions_required`` call for."""
        declared = caps.read(result)
        if declared is None:
            self._backends.pop(backend, None)  # plain MCP (again): nothing was negotiated
            return
        negotiation = versions.negotiate(versions.SUPPORTED, declared.version, peer=f"backend {backend}")
        active = extensions.active(KERNEL_EXTENSIONS, declared.extensions)
        answer = self._decider.decide(declared.permissions_required)
        acknowledged = False
        if declared.permissions_required:
            params = _grant_params(answer, f"sb-perm-{next(self._request_ids)}", "switchboard")
            response = await exchange.handshake_request(GRANT_METHOD, params, "legacy", timeout)
            acknowledged = "result" in response
            if not acknowledged:
                error = response.get("error")
                message = error.get("message") if isinstance(error, dict) else response
                log.warning("backend %s did not take its MGP grants: %s", backend, message)
        if answer.pending:
            await self._ask_operator(exchange, backend, negotiation, answer.pending, timeout)
        self._backends[backend] = BackendMgp(
            negotiation, active, declared.permissions_required, dict(answer.grants), answer.pending, acknowledged
        )
        log.info(
            "backend %s speaks MGP %s (extensions %s); granted %s",
            backend,
            negotiation.version,
            ", ".join(sorted(active)) or "none",
            ", ".join(sorted(granted_names(answer.grants, time.time()))) or "nothing",
        )

    async def _ask_operator(
        self,
        exchange: Exchange,
        backend: str,
        negotiation: versions.Negotiation,
        wanted: tuple[str, ...],
        timeout: float,
    ) -> None:
        """interactive: the permissions no config decides wait for an operator; the backend is told to
        wait (``mgp/permission/await``, the seed's ``request`` before 0.4) and gets its grants later."""
        try:
            request = self._pending.open(backend, wanted)
        except PendingFull as exc:
            log.warning("backend %s: permissions %s denied: %s", backend, ", ".join(wanted), exc)
            return
        log.info("backend %s: permissions %s wait for an operator (%s)", backend, ", ".join(wanted), request.request_id)
        await_method, _ = names.permission_methods(negotiation.version)
        response = await exchange.handshake_request(await_method, request.await_params(), "legacy", timeout)
        if "result" not in response:
            log.info("backend %s did not take %s; it will get the grants all the same", backend, await_method)

    def pending(self) -> list[dict[str, Any]]:
        """Permission requests waiting for an operator, oldest first (the admin API's listing)."""
        return self._pending.list()

    async def pending_everywhere(self) -> list[dict[str, Any]]:
        """Permission requests waiting on any replica, oldest first (answered where they wait:
        ``owner_of`` their id)."""
        return await self._board.listing(self.pending) if self._board is not None else self.pending()

    async def answer(self, request_id: str, grants: object, approved_by: str) -> dict[str, Any]:
        """An operator answered a waiting request: the grants are recorded for the policies and sent to
        the backend as ``mgp/permission/grant``. KeyError: no such waiting request; ValueError:
        malformed grants or one that was not requested."""
        request = self._pending.get(request_id)
        if request is None:
            raise KeyError(request_id)
        answer = self._pending.answer(request_id, grants, approved_by)
        params = _grant_params(answer, request_id, approved_by)
        record = self._backends.get(request.server_id)
        if record is not None:
            merged = {**record.grants, **answer.grants}
            still = tuple(p for p in record.pending if p not in answer.grants)
            self._backends[request.server_id] = dataclasses.replace(record, grants=merged, pending=still)
        conn = self._connections.get(request.server_id)
        if conn is not None:
            try:
                await conn.request(GRANT_METHOD, params)
            except jsonrpc.RpcError as exc:
                log.warning("backend %s: could not send its grants: %s", request.server_id, exc.message)
        return params

    def backend(self, name: str) -> BackendMgp | None:
        """What ``name`` negotiated on its latest connect (None: it does not speak MGP)."""
        return self._backends.get(name)

    def forget(self, name: str) -> None:
        """``name`` left the gateway (deregistered, §15.4): what it negotiated and was granted goes
        with it, so a backend registered later under the name starts from nothing."""
        self._backends.pop(name, None)

    def grants_of(self, name: str) -> Mapping[str, Grant]:
        found = self._backends.get(name)
        return found.grants if found is not None else {}


def _grant_params(answer: PermissionAnswer, request_id: str, approved_by: str) -> dict[str, Any]:
    """``mgp/permission/grant`` params as sent: a field without a value (no approved grant, so no
    ``expires_at``) is left out rather than sent as null."""
    return {k: v for k, v in answer.params(request_id, approved_by).items() if v is not None}
