"""Virtual servers as views: a selection of tools, prompts and resources of several backends.

A :class:`VirtualView` is a :class:`~gateway.federation.View` whose merge keeps only what its entries
select (gateway/config_virtual.py), exposes a tool or prompt under its rename (else its own name)
with the configured description, and never rewrites a URI. Invariants:

- Nothing is resolved by its name alone (:class:`SelectingNamer`): a name or URI reaches a backend
  only through the merged lists, which hold only selected items. A name outside the selection is
  "unknown" (-32602, as the catalog answers), a URI outside it "not found"; neither is forwarded.
  Methods the gateway does not interpret are not passed through (``View.curated``).
- An exposed name two items share (two backends, or a rename meeting another item's own name) is
  withheld from the list and from resolution, logged once and counted
  (``switchboard_name_collisions``), like federation's collisions; never resolved silently.
- Its backends are those its entries name that exist now; a backend removed at run time leaves it
  and one registered again under a named backend's name rejoins it
  (gateway/runtime_backends.py).
- Who may use it and what a rename may reach are decided in policies/virtual_access.py (``guard``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gateway.config_virtual import VirtualServer, split_entry
from gateway.federation import KEY_OF, ListKind, Merged, Namer, View
from policies.patterns import Matcher, star_glob
from policies.virtual_access import DoorNames, VirtualServerAccess

# Which entries select each list: templates are chosen by the resources entries (by uriTemplate).
_ENTRIES_OF: dict[ListKind, str] = {
    "tools": "tools",
    "prompts": "prompts",
    "resources": "resources",
    "resourceTemplates": "resources",
}


class SelectingNamer(Namer):
    """Names and URIs as the backends give them, and no resolution by name alone (see the module)."""

    def __init__(self, separator: str, backends: tuple[str, ...]) -> None:
        super().__init__("never", separator, backends)
        self.sole = None  # even over one backend: only the selection resolves

    def name_in(self, exposed: str) -> tuple[str, str] | None:
        return None

    def uri_in(self, exposed: str) -> tuple[str, str] | None:
        return None


@dataclass(frozen=True, slots=True)
class Selection:
    """The compiled entries of one virtual server."""

    patterns: dict[str, tuple[tuple[str, Matcher], ...]]  # "tools" | "prompts" | "resources" → (backend, glob)
    rename: dict[tuple[str, str], str]  # (backend, original) → exposed
    descriptions: dict[str, str]  # exposed → description

    @classmethod
    def of(cls, server: VirtualServer) -> Selection:
        patterns = {
            kind: tuple((b, star_glob(p)) for b, p in map(split_entry, getattr(server, kind)))
            for kind in ("tools", "prompts", "resources")
        }
        rename = {split_entry(target): exposed for exposed, target in server.rename.items()}
        return cls(patterns, rename, dict(server.descriptions))

    def selects(self, kind: ListKind, backend: str, key: str) -> bool:
        return any(b == backend and match(key) for b, match in self.patterns[_ENTRIES_OF[kind]])

    def backends(self) -> tuple[str, ...]:
        """Every backend an entry names, in the order they first appear."""
        return tuple(dict.fromkeys(b for entries in self.patterns.values() for b, _ in entries))

    def exposed(self, kind: ListKind, backend: str, item: dict[str, Any]) -> dict[str, Any]:
        """The item as the virtual server shows it: renamed and redescribed (tools and prompts)."""
        if kind not in ("tools", "prompts"):
            return item
        original = item["name"]
        name = self.rename.get((backend, original), original)
        description = self.descriptions.get(name)
        if name == original and description is None:
            return item
        shown = {**item, "name": name}
        if description is not None:
            shown["description"] = description
        return shown


class VirtualView(View):
    curated = True
    collision_hint = "rename one of them in virtual_servers"
    _collision_text = "virtual server %s: %s %r would be exposed for several items (%s) and is withheld; %s"

    def __init__(
        self,
        name: str,
        server: VirtualServer,
        separator: str,
        present: Callable[[str], bool],
        door_names: DoorNames,
    ) -> None:
        """``present(backend)``: whether a backend of that name exists now; ``door_names``: the names
        a backend's item has at the doors that exist without virtual servers (for ``guard``)."""
        self.selection = Selection.of(server)
        self.wanted = self.selection.backends()
        backends = tuple(b for b in self.wanted if present(b))
        super().__init__(name, backends, SelectingNamer(separator, backends))
        self.guard = VirtualServerAccess(name, server.principals, door_names)
        self._server = server

    def own_identity(self) -> dict[str, Any]:
        info = self._server.server_info
        server_info: dict[str, Any] = (
            info.model_dump(exclude_none=True) if info is not None else {"name": self.name, "version": "1.0.0"}
        )
        capabilities: dict[str, Any] = {"logging": {}}
        if self._server.tools:
            capabilities["tools"] = {"listChanged": True}
        if self._server.prompts:
            capabilities["prompts"] = {"listChanged": True}
            capabilities["completions"] = {}
        if self._server.resources:
            capabilities["resources"] = {"subscribe": True, "listChanged": True}
        result: dict[str, Any] = {"capabilities": capabilities, "serverInfo": server_info}
        if self._server.instructions:
            result["instructions"] = self._server.instructions
        return result

    def set_backends(self, backends: tuple[str, ...]) -> None:
        self.backends = backends
        self.namer = SelectingNamer(self.namer.separator, backends)
        self.merged = {}
        self._reported = set()

    def expose(self, kind: ListKind, backend: str, item: dict[str, Any]) -> dict[str, Any]:
        return self.selection.exposed(kind, backend, item)

    def merge(self, kind: ListKind, per_backend: list[tuple[str, list[dict[str, Any]]]], store: bool = True) -> Merged:
        """The selection of ``per_backend``'s lists; kept as the view's merge unless ``store`` is false (one
        principal's lists of a per-principal backend, gateway/routing/catalog.py)."""
        key = KEY_OF[kind]
        owners: dict[str, list[tuple[str, dict[str, Any], str]]] = {}
        for backend, items in per_backend:
            if backend not in self.backends:
                continue  # fetched while the set changed: a backend no longer in the view is never merged
            for item in items:
                original = item[key]
                if not self.selection.selects(kind, backend, original):
                    continue
                shown = self.expose(kind, backend, item)
                owners.setdefault(shown[key], []).append((backend, shown, original))
        merged = Merged([], {})
        for exposed_key, entries in owners.items():
            if len({(b, o) for b, _, o in entries}) > 1:
                merged.collisions[exposed_key] = sorted({f"{b}:{o}" for b, _, o in entries})
                continue
            backend, shown, original = entries[0]
            merged.items.append(shown)
            merged.index[exposed_key] = (backend, original)
            merged.by_key[exposed_key] = shown
        self._report_collisions(kind, merged)
        if store:
            self.merged[kind] = merged
        return merged


def door_names(federated: View) -> DoorNames:
    """The names a backend's tool or prompt has without virtual servers: its own (at
    ``/servers/BACKEND/mcp``) and the federated view's (at ``/mcp``, under ``federation.prefix``;
    read at each call, as runtime backends may switch its prefixing)."""

    def names(backend: str, original: str) -> tuple[str, ...]:
        fed = federated.namer.name_out(backend, original)
        return (original,) if fed == original else (original, fed)

    return names
