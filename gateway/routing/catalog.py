"""The catalog: merged lists of a view's backends, pages and cursors, and name/URI resolution.

Lists are merged per view under the federation rules (gateway/federation.py) from each backend's
cached list; a list shows only the items whose call the caller may make, and (with pinning
enforced) no tool whose definition changed. Resolution maps a name or URI as the client sees it
back to ``(backend, the backend's own name or URI)``; a name two backends offer is never resolved
silently. A ``sharing: per-principal`` backend has no list of its own: a caller's merge holds its own
child's lists (each child caches its own), is never stored on the view, and resolves that caller's names.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from adapters.mcpc import listing as mcpc_listing
from adapters.mgp import strip as mgp_strip
from gateway import jsonrpc
from gateway.federation import CAPABILITY_OF, KEY_OF, BackendCatalog, ListKind, Merged, View
from policies.chain import Target

if TYPE_CHECKING:
    from gateway.config import Config
    from gateway.metrics import Metrics
    from gateway.upstreams.connection import BackendConnection
    from gateway.upstreams.principal_pool import PrincipalPool
    from policies.chain import PolicyChain
    from policies.pinning import PinStore
    from policies.principal import Principal

log = logging.getLogger(__name__)

# How long a call right after start waits for its backend, still making its first connection.
# (Initialize and lists wait only limits.startup_wait_s: they answer with what is ready, and a
# backend that connects later is announced with list_changed.)
STARTUP_GRACE_S = 5.0


def encode_cursor(offset: int) -> str:
    return base64.urlsafe_b64encode(f"sb1:{offset}".encode()).decode()


def decode_cursor(cursor: Any) -> int:
    if cursor is None:
        return 0
    try:
        text = base64.urlsafe_b64decode(str(cursor).encode()).decode()
        tag, _, offset = text.partition(":")
        if tag == "sb1" and offset.isascii() and offset.isdigit():
            return int(offset)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        pass
    raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, "Invalid cursor")


def item_action(kind: ListKind, item: dict[str, Any]) -> str:
    """The action a list item stands for: a caller sees the item only if it may take that action."""
    if kind == "tools":
        return f"mcp/request:tools/call:{item['name']}"
    if kind == "prompts":
        return f"mcp/request:prompts/get:{item['name']}"
    if kind == "resources":
        return f"mcp/request:resources/read:{item['uri']}"
    return f"mcp/request:resources/read:{item['uriTemplate']}"


def _target(merged: Merged, kind: ListKind, item: dict[str, Any]) -> Target | None:
    """Where a listed item lives: its backend and the backend's own name for it."""
    key = item.get(KEY_OF[kind])
    hit = merged.index.get(key) if isinstance(key, str) else None
    return Target(hit[0], hit[1], item) if hit is not None else None


class Catalog:
    def __init__(
        self,
        connections: Mapping[str, BackendConnection],
        catalogs: Mapping[str, BackendCatalog],
        pins: PinStore,
        chain: PolicyChain,
        metrics: Metrics,
        config: Config,
        pools: Mapping[str, PrincipalPool] | None = None,
    ) -> None:
        self._connections = connections
        # Per-principal stdio backends (issue 17): their lists are the caller's child's, merged per
        # caller and never stored on the view (which every principal's sessions share).
        self._pools = pools if pools is not None else {}
        self._catalogs = catalogs
        self._pins = pins
        self._chain = chain
        self._metrics = metrics
        self._config = config

    async def page(
        self, view: View, kind: ListKind, cursor: Any, principal: Principal, *, mgp: bool = False
    ) -> dict[str, Any]:
        """One page of a list as ``principal`` may see it (the result of a ``*/list`` request);
        ``mgp``: the client negotiated MGP and sees the tools' MGP fields (gateway/mgp/server.py)."""
        offset = decode_cursor(cursor)
        merged = await self.merged(view, kind, principal)
        items = merged.items
        # The chain decides, item by item, with the rule that would refuse the item's call
        # (capabilities; a tool whose definition changed and awaits approval; ...).
        items = [i for i in items if self._chain.visible(item_action(kind, i), principal, _target(merged, kind, i))]
        guard = view.guard
        if guard is not None and kind in ("tools", "prompts"):
            # A virtual server: the real tool or prompt must be allowed too (policies/virtual_access.py).
            index = merged.index
            items = [i for i in items if guard.visible(principal, kind, *index[i["name"]])]
        if kind == "tools":
            # No client sees a backend's reserved mgp.* tools (§1.6.3); plain MCP clients see no
            # tool's MGP fields either.
            items = mgp_strip.strip_tools(items) if not mgp else mgp_strip.without_reserved(items)
        size = self._config.federation.page_size
        result: dict[str, Any] = {kind: items[offset : offset + size]}
        if offset + size < len(items):
            result["nextCursor"] = encode_cursor(offset + size)
        return result

    async def merged(self, view: View, kind: ListKind, principal: Principal | None = None) -> Merged:
        """The view's merged list; with per-principal backends in the view and a ``principal``, the
        merge includes that principal's children's lists and is not kept on the view. Without a
        principal those backends contribute nothing (no child is spawned for no one)."""
        await self.await_startup(view)
        pools = self._pools
        names = [
            name
            for name in view.backends
            if name not in pools
            and self._connections[name].state == "ready"
            and CAPABILITY_OF[kind] in self._connections[name].capabilities
        ]
        own = [name for name in view.backends if name in pools] if principal is not None else []
        fetches = [self._one(name, kind) for name in names]
        if own:
            assert principal is not None
            fetches += [self._of_child(pools[name], kind, principal) for name in own]
            names += own
        outcomes = await asyncio.gather(*fetches, return_exceptions=True)
        per_backend: list[tuple[str, list[dict[str, Any]]]] = []
        for name, outcome in zip(names, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                log.warning("backend %s: listing %s failed: %s", name, kind, outcome)
                continue
            per_backend.append((name, outcome))
        merged = view.merge(kind, per_backend, store=not own)
        self._metrics.name_collisions.labels(view.name, kind).set(len(merged.collisions))
        return merged

    async def of_backend(self, name: str, kind: ListKind) -> list[dict[str, Any]]:
        """One ready backend's own list (cached like every list; empty when it is not ready or fails)."""
        conn = self._connections.get(name)
        if conn is None or name in self._pools or conn.state != "ready" or CAPABILITY_OF[kind] not in conn.capabilities:
            return []  # a per-principal backend has no list of its own, only its principals' (merged)
        try:
            return await self._one(name, kind)
        except (jsonrpc.RpcError, ConnectionError) as exc:
            log.warning("backend %s: listing %s failed: %s", name, kind, exc)
            return []

    async def _of_child(self, pool: PrincipalPool, kind: ListKind, principal: Principal) -> list[dict[str, Any]]:
        """``principal``'s child's list: empty, spawning nothing, for a principal the pool refuses."""
        if not pool.admit(principal).allowed:
            return []
        # The list request was admitted by the chain already. Like every list, it waits only
        # limits.startup_wait_s for a child still connecting (which then announces list_changed).
        wait_s = min(self._config.limits.startup_wait_s, pool.config.connect_timeout_s)
        child = await pool.child(principal, wait_s)
        conn = child.conn
        if conn.state != "ready":
            child.missed = conn.first_attempt_pending
            return []
        if CAPABILITY_OF[kind] not in conn.capabilities:
            return []
        return await self._one(pool.name, kind, conn, child.catalog)

    async def _one(
        self, name: str, kind: ListKind, conn: BackendConnection | None = None, catalog: BackendCatalog | None = None
    ) -> list[dict[str, Any]]:
        conn = conn or self._connections[name]

        async def fetch(method: str, params: dict[str, Any] | None) -> dict[str, Any]:
            response = await conn.request(method, params)
            if "error" in response:
                raise jsonrpc.RpcError.from_error(response["error"])
            result = response.get("result")
            if method == "tools/list":
                # MCPC's handshake tools and metadata argument are the gateway's business (issue 13):
                # hidden once, in what is cached, from every list and every lookup.
                result = mcpc_listing.hide_in_result(result)
            return result if isinstance(result, dict) else {}

        items = await (catalog or self._catalogs[name]).get(kind, fetch)
        if kind == "tools":
            # Kept for the modern era's Mcp-Param-* headers toward this backend.
            conn.tool_schemas = {t["name"]: t.get("inputSchema") for t in items}
            # A per-principal child's tools are pinned under the backend's name too: one program whose
            # definitions should not depend on who runs it (a difference is flagged, the ADR).
            await self._pins.observe(name, items)
        return items

    async def await_startup(self, view: View) -> None:
        """Right after start, give backends that never connected yet a short moment before answering."""
        waits = [
            conn.wait_ready(min(self._config.limits.startup_wait_s, conn.config.connect_timeout_s))
            for conn in (self._connections[n] for n in view.backends)
            if conn.first_attempt_pending
        ]
        if waits:
            await asyncio.gather(*waits)

    async def resolve_name(
        self, view: View, kind: ListKind, exposed: Any, principal: Principal | None = None
    ) -> tuple[str, str]:
        """(backend, the backend's own name) of a tool or prompt name as the client sees it (as
        ``principal`` sees it, when per-principal backends are in the view)."""
        found = self.resolve_name_now(view, kind, exposed)
        if found is not None:
            return found
        return self._hit(await self.merged(view, kind, principal), kind, exposed, view.collision_hint)

    def resolve_name_now(self, view: View, kind: ListKind, exposed: Any) -> tuple[str, str] | None:
        """:meth:`resolve_name` when it needs no await (the view's namer knows the name, or the merged
        list at hand holds it): its answer, or its error raised; None: only ``resolve_name`` can tell
        (the list must be fetched). The router asks this first: no coroutine on most calls."""
        if not isinstance(exposed, str) or not exposed:
            raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, "params.name must be a non-empty string")
        namer = view.namer
        if namer.sole is not None and not namer.prefixed:
            return namer.sole, exposed  # namer.name_in's answer for a single backend's view, inlined
        found = namer.name_in(exposed)
        if found is not None:
            return found
        if self._pools and any(name in self._pools for name in view.backends):
            return None  # the stored merge lacks the per-principal lists: only the caller's merge can tell
        merged = view.merged.get(kind)
        if merged is None or exposed not in merged.index:
            return None
        return self._hit(merged, kind, exposed, view.collision_hint)

    @staticmethod
    def _hit(merged: Merged, kind: ListKind, exposed: str, hint: str) -> tuple[str, str]:
        if exposed in merged.collisions:
            raise jsonrpc.RpcError(
                jsonrpc.NAME_NOT_ROUTABLE,
                f"{exposed!r} is offered by several backends ({', '.join(merged.collisions[exposed])}); {hint}",
            )
        hit = merged.index.get(exposed)
        if hit is None:
            label = "tool" if kind == "tools" else "prompt"
            raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, f"Unknown {label}: {exposed}")
        return hit

    async def resolve_uri(self, view: View, exposed: Any, principal: Principal | None = None) -> tuple[str, str]:
        """(backend, the backend's own URI) of a resource URI as the client sees it."""
        if not isinstance(exposed, str) or not exposed:
            raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, "params.uri must be a non-empty string")
        found = view.namer.uri_in(exposed)
        if found is not None:
            return found
        if view.namer.prefixed:
            raise jsonrpc.RpcError(jsonrpc.RESOURCE_NOT_FOUND, "Resource not found", {"uri": exposed})
        resources = await self.merged(view, "resources", principal)
        hit = resources.index.get(exposed)
        if hit is not None:
            return hit
        # Never-prefixed federation: a URI from a template belongs to the backend whose template's
        # literal head it starts with (longest head wins).
        templates = await self.merged(view, "resourceTemplates", principal)
        best: tuple[int, tuple[str, str]] | None = None
        for template, (backend, _original) in templates.index.items():
            head = template.split("{", 1)[0]
            if head and exposed.startswith(head) and (best is None or len(head) > best[0]):
                best = (len(head), (backend, exposed))
        if best is None:
            raise jsonrpc.RpcError(jsonrpc.RESOURCE_NOT_FOUND, "Resource not found", {"uri": exposed})
        return best[1]
