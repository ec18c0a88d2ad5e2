"""The MGP §16.4 tool index over every federated tool, kept current from the catalog, one per view.

Spec: ``shared/specs/mgp-0.3.md`` §16.4 ("the kernel maintains a searchable index of all tools across all
connected servers"), the draft's ``docs/MGP_DISCOVERY.md`` §16.4-§16.5 (``server_id``, ``security`` and the
``status`` filter of each result). The ranking itself is :class:`gateway.mgp.discovery.ToolIndex`.

What is indexed: exactly the tools a ``tools/list`` of the view shows before visibility (the catalog's merged
list, ``Catalog.merged(view, "tools")``: colliding names withheld, names as the view exposes them), without
the kernel's reserved ``mgp.*`` names (§1.6.3), each under its exposed name with ``server_id`` = its backend
and its effective security as an MGP client sees it (``ToolFacts.listed``: the backend's declaration under
the operator's ``mgp.tools``, assessed with ``mgp.trust``, §4.6). Plain MCP backends' tools are therefore
discoverable with operator-configured security too. A view is what a session sees (``/mcp`` or
``/servers/NAME/mcp``), so each view has its own index, made on its first query.

Invariants:

1. **Current on every query, never rebuilt per query.** Each query compares, per backend, the catalog's
   generation and the identity of its cached list (and the view's backends and prefixing) with what was
   last reconciled: ``notifications/tools/list_changed``, a connect or a loss invalidates the catalog, which
   moves its generation. Unchanged, the index answers as is (the catalog is merged again only every
   ``recheck_s``, its list TTL, so that a backend's silent change is still picked up); changed, the query
   awaits ``Catalog.merged`` (what ``tools/list`` does), the merged items are regrouped, and only a backend
   whose exposed items differ (``==``) is re-indexed (``ToolIndex.replace_backend``, O(its tokens)).
2. **Disconnected backends stay, marked.** A backend that goes away (``MgpNews`` state ``disconnected``, or
   found not ready on a reconcile) keeps its last tools with status ``disconnected`` (found with ``status:
   disconnected|all``); a backend that is ready but lists no tools any more is dropped.
3. **Visibility is the chain's, as for ``tools/list``**: :meth:`ViewIndex.visibility` asks
   ``PolicyChain.visible`` with the same action and target ``Catalog.page`` uses, so a caller never discovers
   a tool it could not list or call (capabilities, MGP access control, tool pinning); on a virtual server,
   its guard too (the real tool, policies/virtual_access.py), as ``Catalog.page`` does.
4. A query that raced a list change (the generation moved while the catalog was awaited) is answered from
   what it got, and the next query reconciles again.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from adapters.mgp import names
from gateway.mgp.discovery import IndexedTool, ToolIndex, Visibility
from gateway.routing.catalog import item_action
from policies.chain import Target

if TYPE_CHECKING:
    from gateway.federation import BackendCatalog, View
    from gateway.mgp.tool_facts import ToolFacts
    from gateway.routing.catalog import Catalog
    from gateway.upstreams.connection import BackendConnection
    from policies.chain import PolicyChain
    from policies.principal import Principal
    from policies.virtual_access import VirtualServerAccess

__all__ = ["FederatedIndex", "ViewIndex"]

# The view's shape (backends, prefixing) and, per backend, the catalog's generation and its cached tools list
# (held, so that its identity is never reused).
_Seen = tuple[tuple[str, ...], bool, tuple[tuple[int, object], ...]]


@dataclass(slots=True)
class _Indexed:
    items: list[dict[str, Any]]  # the exposed items last indexed, for the equality check
    names: list[str]


@dataclass(slots=True, eq=False)
class ViewIndex:
    """One view's index, the place of each of its tools, and what it was last reconciled with."""

    index: ToolIndex = field(default_factory=ToolIndex)
    targets: dict[str, Target] = field(default_factory=dict)  # exposed name -> backend, own name, exposed item
    indexed: dict[str, _Indexed] = field(default_factory=dict)
    seen: _Seen | None = None
    checked: float = 0.0  # monotonic time of the last catalog merge
    guard: VirtualServerAccess | None = None  # the view's, when it is a virtual server

    def visibility(self, chain: PolicyChain, principal: Principal) -> Visibility:
        """The caller's view of the index: the rule of ``Catalog.page`` (invariant 3)."""
        targets, guard = self.targets, self.guard

        def visible(tool: IndexedTool) -> bool:
            target = targets.get(tool.name)
            # a lost backend's tool whose name another backend took since is hidden: its target is gone
            return (
                target is not None
                and target.backend == tool.server_id
                and target.item is not None
                and chain.visible(item_action("tools", target.item), principal, target)
                and (guard is None or guard.visible(principal, "tools", target.backend, target.name or tool.name))
            )

        return visible

    def definition(self, name: str) -> dict[str, Any] | None:
        """The indexed tool ``name`` as a §16.6 definition ``{name, description, inputSchema, security?}``."""
        target = self.targets.get(name)
        tool = self.index.get(target.backend, name) if target is not None else None
        if tool is None:
            return None
        entry: dict[str, Any] = {"name": tool.name, "description": tool.description, "inputSchema": tool.input_schema}
        if tool.security is not None:
            entry["security"] = tool.security
        return entry


class FederatedIndex:
    """Every view's tool index, fed from the catalog (see the module docstring for invariants)."""

    __slots__ = ("_catalog", "_catalogs", "_connections", "_facts", "_recheck_s", "_trust_of", "_views")

    def __init__(
        self,
        catalog: Catalog,
        catalogs: Mapping[str, BackendCatalog],
        connections: Mapping[str, BackendConnection],
        tool_facts: ToolFacts,
        trust_of: Callable[[str], str | None],
        *,
        recheck_s: float = 0.0,
    ) -> None:
        self._catalog = catalog
        # Between list changes, the catalog is asked again only this often (federation.list_cache_s: a
        # backend that changes its tools without list_changed is seen as late as by tools/list, at most twice).
        self._recheck_s = recheck_s
        self._catalogs = catalogs
        self._connections = connections  # read for a backend's state only
        self._facts = tool_facts
        self._trust_of = trust_of
        # Views come and go with runtime backends (/servers/NAME/mcp): an index lives as long as its view.
        self._views: weakref.WeakKeyDictionary[View, ViewIndex] = weakref.WeakKeyDictionary()

    async def current(self, view: View) -> ViewIndex:
        """``view``'s index, reconciled with the catalog when it changed (invariant 1)."""
        started = time.monotonic()
        before = self._seen(view)
        found = self._views.get(view)
        if found is not None and found.seen is not None and started - found.checked < self._recheck_s:
            if _same(found.seen, before):
                return found  # no list changed, no backend came or went: not even a merge
        merged = await self._catalog.merged(view, "tools")
        if found is None:
            found = self._views.setdefault(view, ViewIndex(guard=view.guard))
        after = self._seen(view)
        found.checked = started
        if found.seen is not None and _same(found.seen, after):
            return found
        grouped: dict[str, list[dict[str, Any]]] = {}
        for item in merged.items:
            name = item.get("name")
            place = merged.index.get(name) if isinstance(name, str) else None
            if place is None or names.is_reserved_tool_name(name) or names.is_kernel_tool_entry(item):
                continue
            grouped.setdefault(place[0], []).append(item)
        for backend in view.backends:
            self._reconcile(found, backend, grouped.get(backend), merged.index)
        for backend in [b for b in found.indexed if b not in view.backends]:
            self._forget(found, backend, found.indexed[backend])  # it left the view (deregistered)
        # invariant 4: a list change during the await makes the next query look again
        generations_held = [g for g, _ in before[2]] == [g for g, _ in after[2]]
        found.seen = after if generations_held and before[:2] == after[:2] else None
        return found

    def on_state(self, conn: BackendConnection, state: str, reason: str) -> None:
        """``MgpNews`` state listener: a backend's tools are marked at once (invariant 2)."""
        status = "connected" if state == "ready" else "disconnected"
        for found in self._views.values():
            if conn.name in found.indexed:
                found.index.set_status(conn.name, status)

    # -- internals ------------------------------------------------------------------------------

    def _seen(self, view: View) -> _Seen:
        per_backend = []
        for backend in view.backends:
            catalog = self._catalogs.get(backend)
            per_backend.append((catalog.generation, catalog.peek("tools")) if catalog is not None else (-1, None))
        return view.backends, view.namer.prefixed, tuple(per_backend)

    def _reconcile(
        self,
        found: ViewIndex,
        backend: str,
        items: list[dict[str, Any]] | None,
        places: Mapping[str, tuple[str, str]],
    ) -> None:
        old = found.indexed.get(backend)
        if items is None:
            if old is None:
                return
            conn = self._connections.get(backend)
            if conn is None or conn.state != "ready":
                found.index.set_status(backend, "disconnected")  # kept for status disconnected|all
                return
            self._forget(found, backend, old)  # ready, but no tools any more (or its listing failed)
            return
        if old is not None and old.items == items:
            found.index.set_status(backend, "connected")
            return
        if old is not None:
            self._forget(found, backend, old)
        trust = self._trust_of(backend)
        secured: list[dict[str, Any]] = []
        for item in items:
            own = places[item["name"]][1]
            secured.append(self._facts.listed(backend, own, item, trust))
            found.targets[item["name"]] = Target(backend, own, item)
        found.index.replace_backend(backend, secured, status="connected")
        found.indexed[backend] = _Indexed(items, [item["name"] for item in items])

    @staticmethod
    def _forget(found: ViewIndex, backend: str, old: _Indexed) -> None:
        found.index.remove_backend(backend)
        for name in old.names:
            target = found.targets.get(name)
            if target is not None and target.backend == backend:
                del found.targets[name]
        del found.indexed[backend]


def _same(a: _Seen, b: _Seen) -> bool:
    return (
        a[:2] == b[:2]
        and len(a[2]) == len(b[2])
        and all(x[0] == y[0] and x[1] is y[1] for x, y in zip(a[2], b[2], strict=True))
    )
