"""What the MCPL relay remembers: per host session, per backend (declared feature sets, channels), and
what the relay's parts share (``RelayState``).

Host sessions see feature sets and channels under *exposed* names: the backend's own name, prefixed
``BACKEND.`` when the view federates several backends (federation rules, keeping dots). Backend
names are DNS labels without dots, so ``mem.memory.retrieval`` splits at the first dot only.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from adapters import mcpl
from gateway.federation import View
from policies.feature_sets import HostSelection, OperatorRules
from policies.scopes import ScopeRules

if TYPE_CHECKING:
    from gateway.config import Mcpl
    from gateway.upstreams.connection import BackendConnection

MAX_APPROVALS = 1024  # scope approvals cached per session (oldest forgotten first)
MAX_CHANNELS = 1024  # channels registered per backend
MAX_CONVERSATIONS = 4096  # conversationId -> session pins kept (oldest forgotten first)


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


@dataclass(slots=True)
class RelayState:
    """What the relay and its parts (server requests, channels, hooks) share, and nothing else: each
    part gets this object plus the collaborators it uses, never the relay itself.

    ``config`` is the live ``mcpl`` section (replaced on reload). The two caches are derived data:
    ``operator_cache`` (principal -> what the operator lets it enable) and ``effective_cache``
    ((session id, backend) -> feature sets enabled there), dropped whenever their inputs change.
    """

    config: Mcpl
    backends: dict[str, BackendMcpl] = field(default_factory=dict)
    # The featureSets/update each backend was last sent.
    sent: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Hook calls in progress per backend (§10.7: a backend inside a hook may not ask for inference).
    in_hook: Counter[str] = field(default_factory=Counter)
    # MCPL requests of each backend being answered now.
    serving: Counter[str] = field(default_factory=Counter)
    conversations: OrderedDict[str, str] = field(default_factory=OrderedDict)
    # (session id, gateway request id) -> where that inference request's chunks go.
    chunk_routes: dict[tuple[str, str], tuple[BackendConnection, Any]] = field(default_factory=dict)
    # The model the latest context hook named (the model/info answer of last resort).
    last_model: dict[str, Any] | None = None
    operator_cache: dict[str | None, OperatorRules] = field(default_factory=dict)
    effective_cache: dict[tuple[str, str], frozenset[str]] = field(default_factory=dict)
    # Feature sets the gateway itself declares under a backend's name (MCPC's ``mcpc``, see
    # mcpc_push.py), by backend then own name: shown to hosts like the backend's, never told to it.
    gateway_sets: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)

    def backend(self, name: str) -> BackendMcpl:
        return self.backends.get(name) or BackendMcpl({})

    def gateway_declared(self, name: str) -> dict[str, dict[str, Any]]:
        """The feature sets the gateway declares for backend ``name`` (empty: none)."""
        return self.gateway_sets.get(name, {})

    def is_mcpl(self, name: str) -> bool:
        found = self.backends.get(name)
        return found is not None and bool(found.caps)

    def forget(self) -> None:
        """Drop every cached effective set: a selection, an operator rule or a declaration changed."""
        self.effective_cache.clear()

    def pinned(self, conversation: str) -> str | None:
        """The session id a conversation was last seen in."""
        return self.conversations.get(conversation)

    def pin_conversation(self, conversation: str, session_id: str) -> None:
        self.conversations[conversation] = session_id
        self.conversations.move_to_end(conversation)
        while len(self.conversations) > MAX_CONVERSATIONS:
            self.conversations.popitem(last=False)

    def route_chunks(self, session_id: str, gid: str, conn: BackendConnection, upstream_id: Any) -> None:
        """``inference/chunk`` from a session for request ``gid`` goes to ``conn`` as ``upstream_id``."""
        self.chunk_routes[(session_id, gid)] = (conn, upstream_id)

    def drop_chunk_routes(self, session_id: str, conn: BackendConnection, upstream_id: Any) -> None:
        for key in [k for k, v in self.chunk_routes.items() if k[0] == session_id and v == (conn, upstream_id)]:
            del self.chunk_routes[key]

    def session_ended(self, session_id: str) -> None:
        for key in [k for k in self.chunk_routes if k[0] == session_id]:
            del self.chunk_routes[key]
        for key in [k for k in self.effective_cache if k[0] == session_id]:
            del self.effective_cache[key]
