"""What the MCPL relay remembers: per host session, and per backend (declared feature sets, channels).

Host sessions see feature sets and channels under *exposed* names: the backend's own name, prefixed
``BACKEND.`` when the view federates several backends (federation rules, keeping dots). Backend
names are DNS labels without dots, so ``mem.memory.retrieval`` splits at the first dot only.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from adapters import mcpl
from gateway.federation import View
from policies.feature_sets import HostSelection
from policies.scopes import ScopeRules

MAX_APPROVALS = 1024  # scope approvals cached per session (oldest forgotten first)
MAX_CHANNELS = 1024  # channels registered per backend


def exposed(view: View, backend: str, name: str) -> str:
    """A feature-set name or channel id as the hosts of ``view`` see it."""
    return f"{backend}.{name}" if view.namer.prefixed else name


def resolve(view: View, name: str, owners: dict[str, Any]) -> list[tuple[str, str]]:
    """(backend, own name) pairs an exposed name stands for; ``owners`` maps backend -> its names.

    Unprefixed views can hold the same name in several backends (prefix mode ``never``); the host
    cannot tell them apart, so a name there stands for all of them.
    """
    if view.namer.prefixed:
        backend, dot, own = name.partition(".")
        if dot and backend in view.backends and own in owners.get(backend, ()):
            return [(backend, own)]
        return []
    return [(b, name) for b in view.backends if name in owners.get(b, ())]


@dataclass
class McplSession:
    """One MCPL host's choices: what it enabled, its scope patterns, and what it approved."""

    host_capabilities: dict[str, Any]
    selection: HostSelection = field(default_factory=HostSelection)
    # Host scope patterns by exposed feature-set name, the latest update for each name winning.
    scopes: dict[str, ScopeRules] = field(default_factory=dict)
    approvals: OrderedDict[tuple[str, str, str], None] = field(default_factory=OrderedDict)

    def supports(self, key: str) -> bool:
        return bool(self.host_capabilities.get(key))

    @property
    def streaming(self) -> bool:
        inference = self.host_capabilities.get("inferenceRequest")
        return isinstance(inference, dict) and bool(inference.get("streaming"))

    @property
    def channels(self) -> dict[str, bool]:
        return mcpl.channel_capabilities(self.host_capabilities)

    def approve(self, backend: str, feature_set: str, label: str) -> None:
        key = (backend, feature_set, label)
        self.approvals[key] = None
        self.approvals.move_to_end(key)
        while len(self.approvals) > MAX_APPROVALS:
            self.approvals.popitem(last=False)

    def approved(self, backend: str, feature_set: str) -> list[str]:
        return [label for (b, fs, label) in self.approvals if b == backend and fs == feature_set]


class BackendMcpl:
    """One backend's MCPL side: what it declared (initialize, then featureSets/changed) and the
    channels it registered on this connection."""

    def __init__(self, caps: dict[str, Any]) -> None:
        self.caps = caps
        self.feature_sets: dict[str, dict[str, Any]] = mcpl.feature_sets(caps)
        self.channels: OrderedDict[str, dict[str, Any]] = OrderedDict()
        before, after, blocking = mcpl.hook_flags(caps)
        self.before_hook, self.after_hook, self.after_blocking = before, after, blocking
        self.version = str(caps.get("version") or mcpl.VERSION)

    def changed(self, added: Any, removed: Any) -> tuple[list[str], list[str]]:
        """Apply ``featureSets/changed``; returns the names really added and removed."""
        new = mcpl.feature_sets({"featureSets": added}) if added is not None else {}
        gone = (
            [n for n in removed if isinstance(n, str) and n in self.feature_sets] if isinstance(removed, list) else []
        )
        for name in gone:
            del self.feature_sets[name]
        self.feature_sets.update(new)
        return list(new), gone

    def using(self, what: str) -> list[str]:
        return [name for name, decl in self.feature_sets.items() if mcpl.uses(decl, what)]

    def register(self, descriptors: Any) -> list[dict[str, Any]]:
        """Add or update channels; returns the valid descriptors taken (those over the bound are not)."""
        taken = []
        for desc in descriptors if isinstance(descriptors, list) else []:
            if not isinstance(desc, dict) or not isinstance(desc.get("id"), str) or not desc["id"]:
                continue
            if desc["id"] not in self.channels and len(self.channels) >= MAX_CHANNELS:
                continue
            self.channels[desc["id"]] = desc
            taken.append(desc)
        return taken

    def unregister(self, ids: Any) -> list[str]:
        gone = [i for i in ids if isinstance(i, str) and i in self.channels] if isinstance(ids, list) else []
        for channel_id in gone:
            del self.channels[channel_id]
        return gone
