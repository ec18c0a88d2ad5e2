"""Where a topic call to a virtual server participant goes (``mcpx.topics.T.participants`` naming a
virtual server, issue 17), for the bridge (gateway/mcpx/bridge.py).

A virtual server joins a topic like a backend: it announces the tools of its view (renamed, as its
``/servers/NAME/mcp`` clients see them) and answers ``mcp/request:*`` envelopes addressed to it. The
request is mapped as that door maps it, by the same catalog: a tool or prompt by its exposed name to
``(backend, original)``, a resource URI through the view's selection, lists answered from the view
(one page, as the caller may see it). Anything else - subscriptions, completions, a method the
gateway does not interpret - is refused: a virtual server is a curated view, nothing passes
untouched. As at the MCP door (policies/virtual_access.py), the sender must be one of the virtual
server's ``principals`` when it lists any (a participant's id is its principal's name, MCPx door),
and a renamed tool or prompt is also held to the sender's capabilities under a name it has at an
existing door.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gateway import jsonrpc
from gateway.federation import LIST_METHODS, ListKind, View

if TYPE_CHECKING:
    from gateway.routing.catalog import Catalog
    from policies.principal import Principal

_NAMED: dict[str, ListKind] = {"tools/call": "tools", "prompts/get": "prompts"}


async def route(
    catalog: Catalog, view: View, method: str, params: dict[str, Any] | None, sender: Principal
) -> tuple[str, dict[str, Any]] | dict[str, Any]:
    """``(backend, params for it)`` for a request to forward; or the result of a list answered here.
    Raises RpcError: unknown name, URI outside the selection, a refused real tool, a method refused."""
    params = params if params is not None else {}
    refused = view.guard.admits(sender) if view.guard is not None else None
    if refused is not None:
        raise jsonrpc.RpcError(refused.code, refused.reason, refused.data)
    kind = _NAMED.get(method)
    if kind is not None:
        name = params.get("name")
        backend, original = await catalog.resolve_name(view, kind, name)
        guard = view.guard
        if guard is not None and original != name:
            denied = guard.reaches(sender, method, backend, original)
            if denied is not None:
                raise jsonrpc.RpcError(denied.code, denied.reason, denied.data)
        return backend, {**params, "name": original}
    if method == "resources/read":
        backend, original = await catalog.resolve_uri(view, params.get("uri"))
        return backend, {**params, "uri": original}
    listed = LIST_METHODS.get(method)
    if listed is not None:
        return await catalog.page(view, listed, params.get("cursor"), sender)
    raise jsonrpc.RpcError(jsonrpc.METHOD_NOT_FOUND, f"{method!r} is not available on a virtual server")
