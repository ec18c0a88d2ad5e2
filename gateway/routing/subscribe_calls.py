"""A client's ``resources/subscribe`` and ``resources/unsubscribe``, on the one subscription table.

Invariants (with gateway/routing/subscriptions.py): a (backend, URI) already watched for another
session, or watched through a modern backend's listen filter, is answered by the gateway without a
request to the backend; the backend hears ``resources/subscribe`` only for the first holder and only
holds it once it said yes; ``resources/unsubscribe`` reaches it only when the last holder lets go.
Who may subscribe is the policy chain's decision, made before these run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway import jsonrpc
from gateway.routing.call import Call, Routed

if TYPE_CHECKING:
    from gateway.routing.catalog import Catalog
    from gateway.routing.forwarding import Forwarder
    from gateway.routing.subscriptions import Subscriptions


class SubscribeCalls:
    def __init__(self, catalog: Catalog, table: Subscriptions, forwarder: Forwarder) -> None:
        self._catalog = catalog
        self._table = table
        self._forwarder = forwarder

    async def subscribe(self, call: Call) -> Routed:
        session = call.session
        backend, original = await self._catalog.resolve_uri(session.view, call.params.get("uri"), call.principal)
        table = self._table
        if table.held(backend, original) or table.by_listen_filter(backend):
            # Already watched for another session, or a modern backend (no resources/subscribe: the
            # URI joins its listen filter).
            table.add(session, backend, original)
            return Routed(jsonrpc.result(call.rpc_id, {}))
        routed = await self._forwarder.forward(call, backend, {**call.params, "uri": original})
        if "result" in routed.response:
            table.hold(session, backend, original)
        return routed

    async def unsubscribe(self, call: Call) -> Routed:
        backend, original = await self._catalog.resolve_uri(call.session.view, call.params.get("uri"), call.principal)
        table = self._table
        if not table.release(call.session, backend, original):
            return Routed(jsonrpc.result(call.rpc_id, {}))
        if table.stop_listening(backend, original):
            return Routed(jsonrpc.result(call.rpc_id, {}))
        return await self._forwarder.forward(call, backend, {**call.params, "uri": original})
