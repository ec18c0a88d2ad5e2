"""The gateway as one MGP server toward its clients: negotiation, the method table, kernel tools.

Toward a client the gateway is a single MGP server that merges every backend (issue 12, "server
role"). This module owns what every MGP feature shares:

- **Negotiation** (MGP_SECURITY.md §2): a client that sends its MGP object in ``initialize`` (or,
  on the 2026-07-28 era, in a request's client capabilities) gets ``session.mgp``
  (:class:`~gateway.mgp.client.MgpClient`) and the gateway's object back in the same place, in the
  version both speak, with the intersection of the extensions. A client that sent none gets none
  (§2.4 rule 3) and sees no MGP field anywhere.
- **One table of operations**: each feature (access control, discovery, health, events, ...)
  contributes handlers keyed by the seed's method name (``mgp/access/query``). The same handler
  answers the seed's method and the draft's kernel tool (``mgp.access.query`` via ``tools/call``,
  MGP_SPEC.md §1.6): a kernel tool call is admitted by the chain *as its method*, so one
  authorization check (capabilities, the admin-only members) holds for both wires.
- **Kernel tools** are listed to MGP clients of the draft line only, and only those the principal
  may call (the chain's visibility of the method), marked ``_mgp: {source: "kernel", admin_only}``.
- **Tool lists** seen by MGP clients carry each tool's effective ``security`` (the backend's
  declaration under the operator's ``mgp.tools``, assessed with the backend's trust level, §4.6).

Invariants: a method the gateway implements is answered whether or not the session negotiated MGP
(the client asked for it by name); kernel tools exist only for sessions whose facet is draft; a
kernel tool's result is a ``CallToolResult`` with the method's result as ``structuredContent``
and as JSON text; the method's JSON-RPC errors stay errors (the call was never delivered).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import adapters
from adapters import mcp as mcp_adapter
from adapters.mgp import caps, names, rejection, versions
from gateway import errors, jsonrpc
from gateway.mgp.client import MgpClient, negotiate_client
from gateway.routing.call import Call, Routed

if TYPE_CHECKING:
    from gateway.mgp.tool_facts import ToolFacts
    from gateway.sessions import ClientSession
    from policies.chain import PolicyChain

log = logging.getLogger(__name__)

Handler = Callable[[Call], Awaitable[Routed]]

# The extensions the gateway serves to its clients (canonical names, MGP_SPEC.md §1.6.4). A client
# gets the intersection with what it declared.
SERVER_EXTENSIONS = frozenset(
    {
        "permissions",
        "tool_security",
        "access_control",
        "audit",  # gateway/mgp/audit_stream.py (§6)
        "code_safety",
        "error_handling",
        "events",  # gateway/mgp/events.py (§13.2-13.6)
        "callbacks",  # gateway/mgp/callbacks.py (§13.4)
        "lifecycle",  # gateway/mgp/lifecycle.py, health.py, drain.py (§11)
        "streaming",  # gateway/mgp/streaming.py (§12)
        "progress",  # §12.6 mgp.stream.progress, inside streamed calls
        "discovery",  # gateway/mgp/registry.py (§15)
        "tool_discovery",  # gateway/mgp/discovery_service.py (§16)
    }
)


def method_of_tool(tool: str) -> str:
    """``mgp.tools.session.evict`` -> ``mgp/tools/session/evict`` (every kernel tool has one)."""
    return names.METHOD_PREFIX + tool[len(names.RESERVED_TOOL_PREFIX) :].replace(".", "/")


def tool_of_method(method: str) -> str:
    return names.RESERVED_TOOL_PREFIX + method[len(names.METHOD_PREFIX) :].replace("/", ".")


def tool_result(result: Mapping[str, Any]) -> dict[str, Any]:
    """A kernel tool's ``CallToolResult``: the operation's result as structured content and text."""
    text = json.dumps(result, ensure_ascii=False, separators=(",", ":"), default=str)
    return {"content": [{"type": "text", "text": text}], "structuredContent": dict(result), "isError": False}


class MgpServer:
    def __init__(
        self,
        *,
        chain: PolicyChain,
        tool_facts: ToolFacts,
        trust_of: Callable[[str], str | None],
        extensions: frozenset[str] = SERVER_EXTENSIONS,
    ) -> None:
        self._chain = chain
        self._tool_facts = tool_facts
        self._trust_of = trust_of
        self.extensions = extensions
        self._handlers: dict[str, Handler] = {}
        self._on_session_end: list[Callable[[ClientSession], None]] = []
        self._on_negotiated: list[Callable[[ClientSession], None]] = []

    # ---- features join ---------------------------------------------------------------------------

    def add(self, handlers: Mapping[str, Handler]) -> None:
        """A feature's operations, keyed by their seed method name (``mgp/...``)."""
        for method, handler in handlers.items():
            if not names.is_mgp_method(method):
                raise ValueError(f"{method} is not an MGP method")
            if method in self._handlers:
                raise ValueError(f"{method} already has a handler")
            self._handlers[method] = handler

    def methods(self) -> dict[str, Handler]:
        """Every operation, for the router's method table."""
        return dict(self._handlers)

    def on_session_end(self, callback: Callable[[ClientSession], None]) -> None:
        self._on_session_end.append(callback)

    def on_negotiated(self, callback: Callable[[ClientSession], None]) -> None:
        """``callback(session)`` once a legacy session negotiated MGP in its ``initialize``."""
        self._on_negotiated.append(callback)

    def session_ended(self, session: ClientSession) -> None:
        if session.mgp is None:
            return
        for callback in self._on_session_end:
            try:
                callback(session)
            except Exception:
                log.exception("MGP session-end hook failed")

    # ---- negotiation (§2) ------------------------------------------------------------------------

    def on_initialize(self, session: ClientSession, params: Mapping[str, Any], result: dict[str, Any]) -> None:
        """A legacy client's initialize: negotiate when it sent MGP, and answer where it asked."""
        client_caps = params.get("capabilities")
        if not isinstance(client_caps, dict):
            return
        raw = client_caps.get(caps.CAPABILITY_KEY)
        experimental = False
        if not isinstance(raw, dict):
            nested = client_caps.get("experimental")
            raw = nested.get(caps.CAPABILITY_KEY) if isinstance(nested, dict) else None
            experimental = True
        if not isinstance(raw, dict):
            return
        facet = session.mgp = negotiate_client(raw, self.extensions, modern=False, experimental=experimental)
        result_caps = result.setdefault("capabilities", {})
        caps.put_legacy(result_caps, self._declaration(facet), experimental=experimental)
        for callback in self._on_negotiated:
            callback(session)

    def adopt(self, session: ClientSession) -> MgpClient | None:
        """A modern exchange: the facet from this request's client capabilities (§2.6)."""
        extensions = session.client_capabilities.get("extensions")
        if not extensions or not isinstance(extensions, dict):
            return session.mgp  # the common case: a plain client (one per modern request)
        raw = extensions.get(caps.EXTENSION_ID)
        if isinstance(raw, dict):
            session.mgp = negotiate_client(raw, self.extensions, modern=True)
        return session.mgp

    def on_discover(self, client_capabilities: Mapping[str, Any], result: dict[str, Any]) -> None:
        """``server/discover``: the gateway's object under ``extensions["dev.cloto/mgp"]`` for a
        client that declared MGP in the discover request (§2.6)."""
        raw = (client_capabilities.get("extensions") or {}).get(caps.EXTENSION_ID)
        if isinstance(raw, dict):
            facet = negotiate_client(raw, self.extensions, modern=True)
            caps.put_discover(result, self._declaration(facet))

    def _declaration(self, facet: MgpClient) -> dict[str, Any]:
        return facet.capability(self.extensions, server_id="switchboard", trust_level="core")

    # ---- tool lists ------------------------------------------------------------------------------

    def list_tools(
        self,
        session: ClientSession,
        page: dict[str, Any],
        where: Callable[[str], tuple[str, str] | None],
        *,
        first_page: bool,
    ) -> dict[str, Any]:
        """A ``tools/list`` page as an MGP client sees it: effective security on every tool,
        and (first page, draft clients) the kernel tools the principal may call."""
        facet = session.mgp
        if facet is None:
            return page
        tools = [self.secure(tool, where) for tool in page.get("tools", [])]
        if first_page and facet.draft:
            tools = [*self.kernel_tools(session), *tools]
        return {**page, "tools": tools}

    def secure(self, tool: Any, where: Callable[[str], tuple[str, str] | None]) -> Any:
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
            return tool
        found = where(tool["name"])
        if found is None:
            return tool
        backend, original = found
        return self._tool_facts.listed(backend, original, tool, self._trust_of(backend))

    def kernel_tools(self, session: ClientSession) -> list[dict[str, Any]]:
        principal = session.principal
        listed = []
        for tool in sorted(names.KERNEL_TOOL_SCHEMAS):
            method = method_of_tool(tool)
            if method in self._handlers and self._chain.visible(f"mcp/request:{method}", principal, None):
                listed.append(names.kernel_tool(tool, names.KERNEL_TOOL_DESCRIPTIONS.get(tool, "")))
        return listed

    def refusal_result(self, session: ClientSession, data: object) -> dict[str, Any] | None:
        """§14.7: a refused ``tools/call`` as the Tool Rejection Envelope, for a client of 0.6.1 or
        later (earlier MGP clients and plain clients get the JSON-RPC error, whose ``data`` holds
        the same body)."""
        facet = session.mgp
        if facet is None or not versions.at_least(facet.version, versions.REJECTION_ENVELOPE_SINCE):
            return None
        body = rejection.from_refusal(data)
        return rejection.envelope_result(body) if body is not None else None

    @staticmethod
    def own_error(response: dict[str, Any]) -> dict[str, Any]:
        """One of the gateway's own error answers as an MGP client reads it (§14.3-§14.5: MGP's
        code and ``data._mgp``); results and backends' errors never come here."""
        error = response.get("error")
        if not isinstance(error, dict):
            return response
        return {**response, "error": errors.as_mgp_error(error)}

    # ---- kernel tool calls (§1.6) ----------------------------------------------------------------

    def is_kernel_call(self, session: ClientSession, name: object) -> bool:
        facet = session.mgp
        return facet is not None and facet.draft and names.is_reserved_tool_name(name)

    async def call_kernel_tool(self, call: Call) -> Routed:
        """``tools/call`` of a kernel tool: admitted and answered as its method."""
        name = call.params.get("name")
        method = method_of_tool(name) if isinstance(name, str) else ""
        handler = self._handlers.get(method)
        if handler is None or name not in names.KERNEL_TOOL_SCHEMAS:
            raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, f"Unknown tool: {name}")
        arguments = call.params.get("arguments", {})
        if not isinstance(arguments, dict):
            raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, "params.arguments must be an object")
        message = {"jsonrpc": "2.0", "id": call.rpc_id, "method": method, "params": arguments}
        event = adapters.annotate(
            mcp_adapter.decode(message, jsonrpc.Shape.REQUEST, session=call.session.id, principal=call.principal.name)
        )
        event.trace_id = call.event.trace_id or call.event.id
        decision = await self._chain.admit(event, call.principal)
        if not decision.allowed:
            raise jsonrpc.RpcError(decision.code, decision.reason, decision.data)
        routed = await handler(Call(call.session, event, call.channel, call.principal))
        response = routed.response
        if "result" not in response:
            return Routed({**response, "id": call.rpc_id}, routed.backend)
        result = response["result"]
        return Routed(
            jsonrpc.result(call.rpc_id, tool_result(result if isinstance(result, dict) else {"result": result})),
            routed.backend,
        )
