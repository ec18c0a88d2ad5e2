"""Requests routed by what they address rather than by a tool or prompt name: ``resources/read``
(by URI), ``completion/complete`` (by its ``ref``), and any method the gateway does not interpret,
which goes untouched to the one backend that can take it.

Invariants: a virtual server (a curated view) passes nothing through untouched and holds a prompt's
completion to the same capabilities as the prompt; a client's MGP request is never relayed to a
backend (MGP toward a backend is the gateway's own); a method no single backend can take is
-32601 with the way to reach one backend directly. Who may call is the policy chain's decision,
made before these run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from adapters.mgp import names as mgp_names
from gateway import jsonrpc
from gateway.routing.call import Call, PolicyDenied, Routed

if TYPE_CHECKING:
    from gateway.routing.catalog import Catalog
    from gateway.routing.forwarding import Forwarder


class AddressedCalls:
    def __init__(self, catalog: Catalog, forwarder: Forwarder) -> None:
        self._catalog = catalog
        self._forwarder = forwarder

    async def uri_call(self, call: Call) -> Routed:
        backend, original = await self._catalog.resolve_uri(call.session.view, call.params.get("uri"), call.principal)
        return await self._forwarder.forward(call, backend, {**call.params, "uri": original})

    async def complete(self, call: Call) -> Routed:
        view = call.session.view
        ref = call.params.get("ref")
        if not isinstance(ref, dict):
            raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, "params.ref must be an object")
        if ref.get("type") == "ref/prompt":
            backend, original = await self._catalog.resolve_name(view, "prompts", ref.get("name"), call.principal)
            new_ref = {**ref, "name": original}
            guard = view.guard
            denied = guard.reaches(call.principal, "completion/complete", backend, original) if guard else None
            if denied is not None:
                raise PolicyDenied(denied, backend)
        elif ref.get("type") == "ref/resource":
            backend, original = await self._catalog.resolve_uri(view, ref.get("uri"), call.principal)
            new_ref = {**ref, "uri": original}
        else:
            raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, f"Unknown ref type {ref.get('type')!r}")
        return await self._forwarder.forward(call, backend, {**call.params, "ref": new_ref})

    async def passthrough(self, call: Call) -> Routed:
        """A method the gateway does not interpret goes, untouched, to the one backend that can take it."""
        view = call.session.view
        backends = view.backends
        if view.curated:
            # A virtual server offers what its lists show, nothing passed through untouched.
            raise jsonrpc.RpcError(jsonrpc.METHOD_NOT_FOUND, f"Method not found: {call.event.method}")
        if mgp_names.is_mgp_method(call.event.method):
            # MGP toward a backend is the kernel's (grants, callbacks, shutdown): a client's MGP
            # request is answered by the gateway's MGP server or not at all, never relayed.
            raise jsonrpc.RpcError(jsonrpc.METHOD_NOT_FOUND, f"Method not found: {call.event.method}")
        if len(backends) != 1:
            raise jsonrpc.RpcError(
                jsonrpc.METHOD_NOT_FOUND,
                f"Method not found: {call.event.method} (not routable across {len(backends)} backends; "
                "use /servers/NAME/mcp to reach one backend directly)",
            )
        params = call.event.payload.get("params")
        return await self._forwarder.forward(call, backends[0], params if isinstance(params, dict) else None)
