"""MGP §16 tool discovery answered by the gateway itself: ``mgp/tools/discover``, ``mgp/tools/request``,
``mgp/tools/session`` and ``mgp/tools/session/evict`` (and, through :class:`gateway.mgp.server.MgpServer`,
the draft's kernel tools ``mgp.tools.discover|request|session|session.evict``).

Spec: ``shared/specs/mgp-0.3.md`` §16.5 (Mode A), §16.6 (Mode B), §16.7 (session tool cache), §16.8
(context budget); the draft's ``docs/MGP_DISCOVERY.md`` §16.5-§16.8 (same shapes as kernel tools, and the
kernel-tool visibility table of §16.8 / ``MGP_SPEC.md`` §1.6.3).

- **discover** ranks the caller's corpus in the view's index (:mod:`gateway.mgp.federated_index`): the tools
  the caller may see and call (the chain's visibility, the rule of ``tools/list``), filtered, *then* ranked,
  so neither a result, a score nor ``total_available`` reveals a hidden tool. Results are cut to the
  budget's ``discovery_reserve`` (§16.8 "truncated": fewer results, ``total_available`` unchanged);
  ``query_time_ms`` covers the whole answer, freshness check and visibility included.
- **request** searches per requirement and loads the best match into the session's cache
  (:func:`gateway.mgp.tool_session.request_tools`), under the same visibility.
- **session** / **evict** show and shrink the cache. Cached tools that left the index (a backend's list
  changed) or that the caller may no longer see are dropped before either answers or a request loads.

The cache is ``session.mgp.tool_session``, made on first use. **A session without an MGP facet** (a plain
MCP client calling the seed's method by name) gets a transient cache for that one call: ``request`` answers
with what it found and would load, nothing is remembered, ``session`` shows only pinned tools, ``evict``
finds nothing cached. (The gateway answers a method it implements whatever was negotiated, see
``gateway/mgp/server.py``; a plain session simply has no place to keep a cache.) On the 2026-07-28 era the
facet lives for one exchange, and so does its cache.

**Pinned tools** (§16.7 "always in context", never evicted, counted in ``total_tokens``): the meta-tools an
LLM's context must hold (``names.LLM_CONTEXT``: discover and request, §16.8 visibility table; named
``mgp.tools.*`` for draft clients, ``mgp/tools/*`` for seed clients, §16.2) when the caller may call them,
plus the tools the operator pins per agent (``pinned``: principal name or ``"*"`` -> exposed tool names;
a pinned name the caller cannot see, or that is not indexed when the cache is made, is not pinned). The
budget and the per-agent pins are constructor arguments, from the config's ``mgp.tool_context`` and
``mgp.pinned_tools`` (gateway/config_mgp.py; the §16.8 example budget and no pins by default).

Malformed params are -32602 with the offending field named.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from adapters.mgp import names
from gateway import jsonrpc
from gateway.mgp.discovery import DiscoveryParamsError, parse_discover_params, tokenize
from gateway.mgp.tool_session import ContextBudget, ToolSession, request_tools
from gateway.routing.call import Call, Routed

if TYPE_CHECKING:
    from gateway.mgp.federated_index import FederatedIndex, ViewIndex
    from policies.chain import PolicyChain

__all__ = ["DISCOVER", "EVICT", "REQUEST", "SESSION", "DiscoveryService"]

DISCOVER = "mgp/tools/discover"
REQUEST = "mgp/tools/request"
SESSION = "mgp/tools/session"
EVICT = "mgp/tools/session/evict"
_METHODS = frozenset({DISCOVER, REQUEST, SESSION, EVICT})
ANY_AGENT = "*"


def _invalid(message: str) -> jsonrpc.RpcError:
    return jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, message)


class DiscoveryService:
    """The four §16 operations over one :class:`FederatedIndex` (see the module docstring)."""

    __slots__ = ("_budget", "_chain", "_pinned", "_sizer", "index")

    def __init__(
        self,
        index: FederatedIndex,
        chain: PolicyChain,
        *,
        budget: ContextBudget | None = None,
        pinned: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        self.index = index
        self._chain = chain
        self._budget = budget or ContextBudget()
        self._sizer = ToolSession(self._budget)  # only its truncate_discovery: the budget, no state
        self._pinned = {agent: tuple(tools) for agent, tools in (pinned or {}).items()}

    def handlers(self) -> dict[str, Callable[[Call], Awaitable[Routed]]]:
        return {DISCOVER: self.discover, REQUEST: self.request, SESSION: self.session, EVICT: self.evict}

    # -- operations ---------------------------------------------------------------------------------

    async def discover(self, call: Call) -> Routed:
        started = time.perf_counter()
        try:
            parsed = parse_discover_params(call.params)
        except DiscoveryParamsError as exc:
            raise _invalid(str(exc)) from None
        found = await self.index.current(call.session.view)
        result = found.index.search(
            parsed.query,
            limit=parsed.max_results,
            categories=parsed.categories,
            risk_level_max=parsed.risk_level_max,
            status=parsed.status,
            visible=found.visibility(self._chain, call.principal),
            strategy=parsed.strategy,
        )
        result.tools = [dict(tool) for tool in self._sizer.truncate_discovery(result.tools)]  # §16.8
        result.query_time_ms = round((time.perf_counter() - started) * 1000.0, 3)
        return Routed(jsonrpc.result(call.rpc_id, result.to_wire()))

    async def request(self, call: Call) -> Routed:
        params = call.params
        for key in ("reason", "context", "task_trace_id"):
            if key in params and not isinstance(params[key], str):
                raise _invalid(f"{key} must be a string")
        requirements = params.get("requirements")
        if requirements is not None and not isinstance(requirements, Mapping):
            raise _invalid("requirements must be an object")
        capabilities = (requirements or {}).get("capabilities")
        if isinstance(capabilities, list) and any(not isinstance(c, str) or not tokenize(c) for c in capabilities):
            raise _invalid("requirements.capabilities must be an array of non-empty capability names")
        if not capabilities and not tokenize(params.get("context", "")):
            raise _invalid("say what is needed: requirements.capabilities or context")
        found = await self.index.current(call.session.view)
        cache = self._cache_of(call, found)
        try:
            result = request_tools(found.index, cache, params, visible=found.visibility(self._chain, call.principal))
        except ValueError as exc:
            raise _invalid(str(exc)) from None
        return Routed(jsonrpc.result(call.rpc_id, result))

    async def session(self, call: Call) -> Routed:
        found = await self.index.current(call.session.view)
        return Routed(jsonrpc.result(call.rpc_id, self._cache_of(call, found).status()))

    async def evict(self, call: Call) -> Routed:
        tools = call.params.get("tools")
        if not isinstance(tools, list) or not all(isinstance(name, str) for name in tools):
            raise _invalid("tools must be an array of tool names")
        reason = call.params.get("reason")
        if reason is not None and not isinstance(reason, str):
            raise _invalid("reason must be a string")
        found = await self.index.current(call.session.view)
        return Routed(jsonrpc.result(call.rpc_id, self._cache_of(call, found).evict(tools, reason)))

    # -- the session's cache (§16.7) ----------------------------------------------------------------

    def _cache_of(self, call: Call, found: ViewIndex) -> ToolSession:
        """The session's cache (made on first use; transient without an MGP facet), without the cached
        tools that left the index or that the caller may no longer see."""
        facet = call.session.mgp
        cache = facet.tool_session if facet is not None else None
        if cache is None:
            cache = ToolSession(self._budget)
            self._pin(cache, call, found)
            if facet is not None:
                facet.tool_session = cache
            return cache
        visible = found.visibility(self._chain, call.principal)
        stale = []
        for name in cache.status()["cached"]:
            target = found.targets.get(name)
            tool = found.index.get(target.backend, name) if target is not None else None
            if tool is None or not visible(tool):
                stale.append(name)
        cache.discard(stale)
        return cache

    def _pin(self, cache: ToolSession, call: Call, found: ViewIndex) -> None:
        principal = call.principal
        facet = call.session.mgp
        if facet is not None:
            for meta in sorted(names.LLM_CONTEXT):
                method = names.method_for_kernel_tool(meta) or ""
                if method in _METHODS and self._chain.visible(f"mcp/request:{method}", principal, None):
                    kernel_tool = names.kernel_tool(meta, names.KERNEL_TOOL_DESCRIPTIONS.get(meta, ""))
                    kernel_tool.pop("_mgp", None)
                    if not facet.draft:
                        kernel_tool["name"] = method  # the seed's meta-tool is the method (§16.2)
                    cache.pin(kernel_tool, server_id="gateway")
        visible = found.visibility(self._chain, principal)
        for name in (*self._pinned.get(ANY_AGENT, ()), *self._pinned.get(principal.name, ())):
            target = found.targets.get(name)
            tool = found.index.get(target.backend, name) if target is not None else None
            definition = found.definition(name)
            if tool is not None and definition is not None and visible(tool):
                cache.pin(definition, server_id=tool.server_id)
