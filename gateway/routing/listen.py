"""What a ``subscriptions/listen`` stream may hear, decided by the one policy chain.

A 2026-07-28 listen stream stands in for the legacy era's ``resources/subscribe`` and its list
notifications, so each thing it asks for passes the check its legacy twin passes (security review,
issue 10, hole 3): the stream itself is ``mcp/request:subscriptions/listen``; each list-changed kind
is the list it announces (``mcp/request:tools/list`` ...); each resource is
``mcp/request:resources/subscribe:URI``, the very action ``resources/subscribe`` is checked as.
Every decision is audited like any request's.

A refused or unknown item is left out of the acknowledgement (clients deliver only what was
acknowledged) and reported in the acknowledgement's ``_meta`` under ``io.switchboard/refused``, each
with its JSON-RPC code and reason: never silently dropped.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from adapters import mcp as mcp_adapter
from gateway import jsonrpc

if TYPE_CHECKING:
    from gateway.routing.catalog import Catalog
    from gateway.routing.router import Router
    from gateway.routing.subscriptions import Subscriptions
    from gateway.sessions import ClientSession
    from policies.chain import PolicyChain
    from policies.principal import Principal

REFUSED_META_KEY = "io.switchboard/refused"
LIST_FILTERS = {
    "toolsListChanged": ("tools/list", "notifications/tools/list_changed"),
    "promptsListChanged": ("prompts/list", "notifications/prompts/list_changed"),
    "resourcesListChanged": ("resources/list", "notifications/resources/list_changed"),
}
RESOURCE_FILTER = "resourceSubscriptions"
MAX_RESOURCES = 256  # per stream: each one is a subscription the gateway keeps toward a backend


@dataclass(slots=True)
class ListenGrant:
    """What the stream will carry: the acknowledged filter, the methods it lets through, refusals."""

    honored: dict[str, Any] = field(default_factory=dict)
    methods: set[str] = field(default_factory=set)
    refused: list[dict[str, Any]] = field(default_factory=list)


class ListenAdmission:
    def __init__(self, chain: PolicyChain, catalog: Catalog, subscriptions: Subscriptions, router: Router) -> None:
        self._chain = chain
        self._catalog = catalog
        self._subscriptions = subscriptions
        self._router = router  # for its audit records

    async def decide(self, session: ClientSession, principal: Principal, method: str, params: dict[str, Any]) -> Any:
        """A request the door answers itself, held to the chain's admission: None if allowed, else the
        denial (audited)."""
        message = jsonrpc.request(None, method, params)
        event = mcp_adapter.decode(message, jsonrpc.Shape.REQUEST, session=session.id, principal=principal.name)
        started = time.perf_counter()
        decision = await self._chain.admit(event, principal)
        guard = session.view.guard  # a virtual server's principals (policies/virtual_access.py)
        if guard is not None and decision.allowed:
            decision = guard.admits(principal) or decision
        if not decision.allowed:
            self._router.audit(session, event, decision.outcome, "gateway", started, decision.reason)
            return decision
        return None

    async def admit(self, session: ClientSession, principal: Principal, message: dict[str, Any]) -> ListenGrant:
        """The grant for ``message`` (a listen request); raises RpcError when the stream itself is refused."""
        params = message.get("params")
        params = params if isinstance(params, dict) else {}
        wanted = params.get("notifications")
        if not isinstance(wanted, dict):
            raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, "params.notifications must be an object")
        denied = await self.decide(session, principal, "subscriptions/listen", params)
        if denied is not None:
            raise jsonrpc.RpcError(denied.code, denied.reason, denied.data)
        grant = ListenGrant()
        for key, (list_method, notification) in LIST_FILTERS.items():
            if wanted.get(key) is not True:
                continue
            denied = await self.decide(session, principal, list_method, {})
            if denied is not None:
                grant.refused.append({key: True, "code": denied.code, "message": denied.reason})
                continue
            grant.honored[key] = True
            grant.methods.add(notification)
        uris = wanted.get(RESOURCE_FILTER)
        if uris is None:
            return grant
        if not isinstance(uris, list) or not all(isinstance(u, str) for u in uris):
            raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, f"params.notifications.{RESOURCE_FILTER} must be strings")
        if len(uris) > MAX_RESOURCES:
            raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, f"at most {MAX_RESOURCES} resource subscriptions per stream")
        subscribed: list[str] = []
        for uri in dict.fromkeys(uris):
            refusal = await self._subscribe(session, principal, uri)
            if refusal is None:
                subscribed.append(uri)
            else:
                grant.refused.append({RESOURCE_FILTER: uri, **refusal})
        grant.honored[RESOURCE_FILTER] = subscribed
        grant.methods.add("notifications/resources/updated")
        return grant

    async def _subscribe(self, session: ClientSession, principal: Principal, uri: str) -> dict[str, Any] | None:
        denied = await self.decide(session, principal, "resources/subscribe", {"uri": uri})
        if denied is not None:
            return {"code": denied.code, "message": denied.reason}
        try:
            backend, original = await self._catalog.resolve_uri(session.view, uri)
        except jsonrpc.RpcError as exc:
            return {"code": exc.code, "message": exc.message}
        self._subscriptions.add(session, backend, original)
        return None
