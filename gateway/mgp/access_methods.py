"""The gateway answering MGP's access-control methods itself (MGP §5.4): ``mgp/access/query``,
``mgp/access/grant`` and ``mgp/access/revoke``, from the one access table that the chain's
``MgpAccessPolicy`` decides calls and lists with.

Invariants: the agent is the authenticated principal's name (a ``granted_by`` in params is never
trusted); whether the caller may grant or revoke is the chain's decision
(``policies.mgp_access.MgpAccessAdminPolicy``), taken before these handlers run; a change applies
to every live session at once, because lists and calls consult the same table; malformed params
are -32602.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from gateway import jsonrpc
from gateway.routing.call import Call, Routed
from policies.mgp_access import AccessRequestError, AccessTable

QUERY, GRANT, REVOKE = "mgp/access/query", "mgp/access/grant", "mgp/access/revoke"


class AccessMethods:
    def __init__(self, table: AccessTable, on_change: Callable[[], None]) -> None:
        self._table = table
        self._on_change = on_change  # lists were computed with the old table: clients are told

    def handlers(self) -> dict[str, Callable[[Call], Awaitable[Routed]]]:
        return {QUERY: self.query, GRANT: self.grant, REVOKE: self.revoke}

    async def query(self, call: Call) -> Routed:
        return self._answer(call, lambda: self._table.query(call.params))

    async def grant(self, call: Call) -> Routed:
        routed = await self._changed(call, self._table.grant(call.params, call.principal.name))
        return routed

    async def revoke(self, call: Call) -> Routed:
        return await self._changed(call, self._table.revoke(call.params, call.principal.name))

    async def _changed(self, call: Call, change: Awaitable[dict[str, Any]]) -> Routed:
        try:
            result = await change
        except AccessRequestError as exc:
            raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, str(exc)) from None
        self._on_change()
        return Routed(jsonrpc.result(call.rpc_id, result))

    @staticmethod
    def _answer(call: Call, compute: Callable[[], dict[str, Any]]) -> Routed:
        try:
            return Routed(jsonrpc.result(call.rpc_id, compute()))
        except AccessRequestError as exc:
            raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, str(exc)) from None
