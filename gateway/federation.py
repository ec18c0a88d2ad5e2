"""One virtual server over many backends: merged catalogs and reversible name/URI rewriting.

A :class:`View` is what one kind of session sees: every backend (``/mcp``), or a single one
(``/servers/NAME/mcp``, never prefixed). Names are rewritten by the :class:`Namer`; collisions are
reported and the colliding entries withheld, never resolved silently.

A view's backend set may change at runtime (MGP §15 ``mgp/discovery/register|deregister``):
sessions hold the view object, so :meth:`View.set_backends` swaps its ``backends`` and ``namer``
in one synchronous step (no await between them, so no reader sees one without the other) and
drops its merged lists; a merge computed from the old set never stores a backend that left it.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from policies.virtual_access import VirtualServerAccess

log = logging.getLogger(__name__)

ListKind = Literal["tools", "prompts", "resources", "resourceTemplates"]
LIST_METHODS: dict[str, ListKind] = {
    "tools/list": "tools",
    "prompts/list": "prompts",
    "resources/list": "resources",
    "resources/templates/list": "resourceTemplates",
}
METHOD_OF: dict[ListKind, str] = {v: k for k, v in LIST_METHODS.items()}
# Which server capability announces each list.
CAPABILITY_OF: dict[ListKind, str] = {
    "tools": "tools",
    "prompts": "prompts",
    "resources": "resources",
    "resourceTemplates": "resources",
}
# Which field of an item carries its exposed identity.
KEY_OF: dict[ListKind, str] = {
    "tools": "name",
    "prompts": "name",
    "resources": "uri",
    "resourceTemplates": "uriTemplate",
}
_MAX_PAGES = 100
_URI_PREFIX = re.compile(r"^([a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)\+(.+)$", re.DOTALL)


class Namer:
    """Reversible rewriting of tool/prompt names and resource URIs for one view."""

    def __init__(self, mode: str, separator: str, backends: tuple[str, ...]) -> None:
        self.mode = mode
        self.backends = backends
        self.separator = separator
        self.prefixed = mode == "always" or (mode == "conditional" and len(backends) > 1)
        self.sole = backends[0] if len(backends) == 1 else None

    def name_out(self, backend: str, name: str) -> str:
        return f"{backend}{self.separator}{name}" if self.prefixed else name

    def name_in(self, exposed: str) -> tuple[str, str] | None:
        """(backend, name) by the name alone; None when only the catalog can tell."""
        if self.prefixed:
            backend, sep, name = exposed.partition(self.separator)
            if sep and name and backend in self.backends:
                return backend, name
            return None
        if self.sole is not None:
            return self.sole, exposed
        return None

    def uri_out(self, backend: str, uri: str) -> str:
        return f"{backend}+{uri}" if self.prefixed else uri

    def uri_in(self, exposed: str) -> tuple[str, str] | None:
        if self.prefixed:
            match = _URI_PREFIX.match(exposed)
            if match and match.group(1) in self.backends:
                return match.group(1), match.group(2)
            return None
        if self.sole is not None:
            return self.sole, exposed
        return None


@dataclass
class _Cached:
    items: list[dict[str, Any]]
    fetched: float


Fetch = Callable[[str, dict[str, Any] | None], Awaitable[dict[str, Any]]]


class BackendCatalog:
    """A backend's own lists, fetched whole (all pages) and cached until changed or stale."""

    def __init__(self, backend: str, ttl_s: float) -> None:
        self.backend = backend
        self._ttl = ttl_s
        self._cache: dict[ListKind, _Cached] = {}
        self._locks: dict[ListKind, asyncio.Lock] = {}
        self.generation = 0

    def invalidate(self, kind: ListKind | None = None) -> None:
        if kind is None:
            self._cache.clear()
        else:
            self._cache.pop(kind, None)
        self.generation += 1

    def peek(self, kind: ListKind) -> list[dict[str, Any]] | None:
        cached = self._cache.get(kind)
        return cached.items if cached is not None else None

    async def get(self, kind: ListKind, fetch: Fetch) -> list[dict[str, Any]]:
        cached = self._cache.get(kind)
        if cached is not None and self._fresh(cached):
            return cached.items
        lock = self._locks.setdefault(kind, asyncio.Lock())
        async with lock:
            cached = self._cache.get(kind)
            if cached is not None and self._fresh(cached):
                return cached.items
            generation = self.generation
            items = await self._fetch_all(kind, fetch)
            if generation == self.generation:  # a list_changed during the fetch makes it stale
                self._cache[kind] = _Cached(items, time.monotonic())
            return items

    def _fresh(self, cached: _Cached) -> bool:
        return self._ttl > 0 and time.monotonic() - cached.fetched < self._ttl

    async def _fetch_all(self, kind: ListKind, fetch: Fetch) -> list[dict[str, Any]]:
        method = METHOD_OF[kind]
        items: list[dict[str, Any]] = []
        cursor: str | None = None
        for _ in range(_MAX_PAGES):
            result = await fetch(method, {"cursor": cursor} if cursor else None)
            page = result.get(kind)
            if isinstance(page, list):
                items.extend(i for i in page if isinstance(i, dict) and isinstance(i.get(KEY_OF[kind]), str))
            cursor = result.get("nextCursor")
            if not cursor:
                return items
        log.warning("backend %s: %s pagination stopped after %d pages", self.backend, method, _MAX_PAGES)
        return items


@dataclass
class Merged:
    items: list[dict[str, Any]]
    index: dict[str, tuple[str, str]]
    collisions: dict[str, list[str]] = field(default_factory=dict)
    by_key: dict[str, dict[str, Any]] = field(default_factory=dict)  # exposed key -> exposed item


class View:
    """What a session sees: a set of backends under one naming scheme.

    A virtual server (gateway/virtual_servers.py) is a View too; these class attributes are what it
    changes, so that routing asks the view and never its type."""

    # True: only what the view's lists show is reachable (no untouched passthrough of other methods).
    curated = False
    # Who may use the view and what its renames may reach (policies/virtual_access.py); None: no rule.
    guard: VirtualServerAccess | None = None
    # What the collision log and error suggest.
    collision_hint = "set federation.prefix to 'conditional' or 'always'"

    def own_identity(self) -> dict[str, Any] | None:
        """serverInfo, capabilities and instructions of its own (gateway/identity.py); None: derived."""
        return None

    def __init__(self, name: str, backends: tuple[str, ...], namer: Namer) -> None:
        self.name = name
        self.backends = backends
        self.namer = namer
        self.merged: dict[ListKind, Merged] = {}
        self._reported: set[str] = set()

    def expose(self, kind: ListKind, backend: str, item: dict[str, Any]) -> dict[str, Any]:
        key = KEY_OF[kind]
        original = item[key]
        exposed = (
            self.namer.name_out(backend, original)
            if kind in ("tools", "prompts")
            else self.namer.uri_out(backend, original)
        )
        return item if exposed == original else {**item, key: exposed}

    def set_backends(self, backends: tuple[str, ...]) -> None:
        """Change the backend set (a backend registered or removed at runtime): a new namer under the
        same rules, and no merged list of the old set kept."""
        self.backends = backends
        self.namer = Namer(self.namer.mode, self.namer.separator, backends)
        self.merged = {}
        self._reported = set()

    def merge(self, kind: ListKind, per_backend: list[tuple[str, list[dict[str, Any]]]], store: bool = True) -> Merged:
        """The items of ``per_backend`` under the view's names; kept as the view's list unless
        ``store`` is false (a merge that holds one principal's lists, gateway/routing/catalog.py)."""
        key = KEY_OF[kind]
        # Lists fetched while the set changed: a backend no longer in the view is never merged.
        per_backend = [(backend, items) for backend, items in per_backend if backend in self.backends]
        owners: dict[str, list[tuple[str, dict[str, Any], str]]] = {}
        for backend, items in per_backend:
            for item in items:
                exposed = self.expose(kind, backend, item)
                owners.setdefault(exposed[key], []).append((backend, exposed, item[key]))
        merged = Merged([], {})
        for exposed_key, entries in owners.items():
            if len({b for b, _, _ in entries}) > 1:
                merged.collisions[exposed_key] = sorted({b for b, _, _ in entries})
                continue
            backend, exposed, original = entries[0]
            merged.items.append(exposed)
            merged.index[exposed_key] = (backend, original)
            merged.by_key[exposed_key] = exposed
        self._report_collisions(kind, merged)
        if store:
            self.merged[kind] = merged
        return merged

    # How the collision log names the view and what collided (a virtual server says it its own way).
    _collision_text = "view %s: %s %r is offered by several backends (%s) and is withheld; %s"

    def _report_collisions(self, kind: ListKind, merged: Merged) -> None:
        """Each withheld name is logged once per view (the metric and the error say it on every use)."""
        for exposed_key, sources in merged.collisions.items():
            tag = f"{kind}:{exposed_key}"
            if tag not in self._reported:
                self._reported.add(tag)
                log.error(self._collision_text, self.name, kind, exposed_key, ", ".join(sources), self.collision_hint)


def _rewrite_content_item(namer: Namer, backend: str, item: Any) -> Any:
    if not isinstance(item, dict):
        return item
    kind = item.get("type")
    if kind == "resource_link" and isinstance(item.get("uri"), str):
        return {**item, "uri": namer.uri_out(backend, item["uri"])}
    resource = item.get("resource")
    if kind == "resource" and isinstance(resource, dict) and isinstance(resource.get("uri"), str):
        return {**item, "resource": {**resource, "uri": namer.uri_out(backend, resource["uri"])}}
    return item


def rewrite_result(namer: Namer, backend: str, method: str, result: Any) -> Any:
    """Rewrite the resource URIs a result names so that the client can use them through this view."""
    if not namer.prefixed or not isinstance(result, dict):
        return result
    if method == "tools/call" and isinstance(result.get("content"), list):
        return {**result, "content": [_rewrite_content_item(namer, backend, c) for c in result["content"]]}
    if method == "prompts/get" and isinstance(result.get("messages"), list):
        messages = [
            {**m, "content": _rewrite_content_item(namer, backend, m.get("content"))} if isinstance(m, dict) else m
            for m in result["messages"]
        ]
        return {**result, "messages": messages}
    if method == "resources/read" and isinstance(result.get("contents"), list):
        contents = [
            {**c, "uri": namer.uri_out(backend, c["uri"])}
            if isinstance(c, dict) and isinstance(c.get("uri"), str)
            else c
            for c in result["contents"]
        ]
        return {**result, "contents": contents}
    return result
