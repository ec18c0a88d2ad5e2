"""The per-session tool cache of MGP §16.6-§16.8 (``mgp/tools/request``, ``mgp/tools/session[/evict]``).

Spec: ``shared/specs/mgp-0.3.md`` §16.6 (Mode B: active tool request and its result ``{status, tools_loaded,
tools_unavailable, session_tools_count, context_tokens_added}``), §16.7 (session tool cache: pinned tools,
session cache, ``mgp/tools/session`` → ``{pinned, cached, total_tokens, max_tokens}``, ``evict {tools,
reason}``), §16.8 (context budget ``{max_tokens, pinned_reserve, discovery_reserve, cache_limit}``, LRU
eviction, pinned never evicted, discovery results truncated); the draft's ``docs/MGP_DISCOVERY.md`` keeps the
same shapes as kernel tools ``mgp.tools.request``, ``mgp.tools.session``, ``mgp.tools.session.evict``.

Budgets are in tokens, and the spec counts tool *definitions*; no tokenizer is at hand in a gateway, so a
tool costs :func:`estimate_tokens`: ``ceil(len(compact JSON of the definition) / 4)`` (≈4 characters per token
for English/JSON; documented, deterministic, and the same on every replica).

Invariants (tests in ``tests/gateway/mgp/test_tool_session.py``):

1. Pinned tools are never evicted, neither by the budget nor by ``evict``; they count toward ``total_tokens``.
2. After every operation the cache fits: ``cached_tokens <= cache_limit`` and ``pinned_tokens +
   cached_tokens <= max_tokens - discovery_reserve`` (the reserve stays free for a request's discovery
   results), except that pinned tools alone may exceed it (they are configured, not cached).
3. Eviction is least-recently-used first; loading or :meth:`ToolSession.touch` (a call) makes a tool the most
   recent. A tool that cannot fit even in an empty cache is not loaded and nothing is evicted for it.
4. Discovery results are cut to the longest prefix that fits ``discovery_reserve`` (§16.8 "truncated").
"""

from __future__ import annotations

import json
import math
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gateway.mgp.discovery import RISK_RANKS, IndexedTool, ToolIndex, Visibility, tokenize

__all__ = [
    "ContextBudget",
    "LoadResult",
    "ToolSession",
    "estimate_tokens",
    "request_tools",
]

CHARS_PER_TOKEN = 4


def estimate_tokens(tool: Mapping[str, Any]) -> int:
    """Estimated context cost of a tool definition: ``ceil(len(compact JSON) / 4)``, at least 1."""
    text = json.dumps(tool, separators=(",", ":"), ensure_ascii=False, sort_keys=True, default=str)
    return max(1, math.ceil(len(text) / CHARS_PER_TOKEN))


@dataclass(slots=True, frozen=True)
class ContextBudget:
    """§16.8 ``tool_context_budget`` (defaults are the spec's example)."""

    max_tokens: int = 8000
    pinned_reserve: int = 2000
    discovery_reserve: int = 3000
    cache_limit: int = 3000

    def __post_init__(self) -> None:
        if min(self.max_tokens, self.pinned_reserve, self.discovery_reserve, self.cache_limit) < 0:
            raise ValueError("budget values must be non-negative")

    @classmethod
    def from_config(cls, data: Mapping[str, Any] | None) -> ContextBudget:
        """From ``{"tool_context_budget": {...}}`` or the inner object; missing keys take the defaults."""
        if not data:
            return cls()
        inner = data.get("tool_context_budget", data)
        values = {
            key: int(inner[key])
            for key in ("max_tokens", "pinned_reserve", "discovery_reserve", "cache_limit")
            if key in inner
        }
        return cls(**values)


@dataclass(slots=True)
class _Loaded:
    name: str
    server_id: str
    tool: dict[str, Any]
    tokens: int


@dataclass(slots=True)
class LoadResult:
    """What :meth:`ToolSession.load` did."""

    loaded: list[dict[str, Any]] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # did not fit the budget even alone
    evicted: list[str] = field(default_factory=list)
    tokens_added: int = 0


def _entry(name: str, server_id: str, tool: Mapping[str, Any]) -> dict[str, Any]:
    """A §16.6 ``tools_loaded`` entry ``{name, server_id, description, inputSchema, security?}``."""
    entry: dict[str, Any] = {
        "name": name,
        "server_id": server_id,
        "description": tool.get("description", "") if isinstance(tool.get("description"), str) else "",
        "inputSchema": tool.get("inputSchema") if isinstance(tool.get("inputSchema"), Mapping) else {"type": "object"},
    }
    if isinstance(tool.get("security"), Mapping):
        entry["security"] = tool["security"]
    return entry


class ToolSession:
    """The tools one session has in its LLM context: pinned ones plus an LRU cache under a budget."""

    __slots__ = ("_cache", "_pinned", "budget")

    def __init__(self, budget: ContextBudget | None = None, pinned: Iterable[Mapping[str, Any]] = ()) -> None:
        self.budget = budget or ContextBudget()
        self._pinned: dict[str, _Loaded] = {}
        self._cache: OrderedDict[str, _Loaded] = OrderedDict()  # least recent first
        for tool in pinned:
            self.pin(tool)

    # -- state -------------------------------------------------------------------------------------------

    @property
    def pinned_tokens(self) -> int:
        return sum(item.tokens for item in self._pinned.values())

    @property
    def cached_tokens(self) -> int:
        return sum(item.tokens for item in self._cache.values())

    @property
    def total_tokens(self) -> int:
        return self.pinned_tokens + self.cached_tokens

    @property
    def cache_capacity(self) -> int:
        """Tokens the cache may hold now (invariant 2)."""
        room = self.budget.max_tokens - self.budget.discovery_reserve - self.pinned_tokens
        return max(0, min(self.budget.cache_limit, room))

    def __contains__(self, name: object) -> bool:
        return name in self._pinned or name in self._cache

    def __len__(self) -> int:
        return len(self._pinned) + len(self._cache)

    def names(self) -> list[str]:
        """Every tool in context: pinned first, then cached from least to most recent."""
        return [*self._pinned, *self._cache]

    def status(self) -> dict[str, Any]:
        """The ``mgp/tools/session`` result (§16.7)."""
        return {
            "pinned": list(self._pinned),
            "cached": list(self._cache),
            "total_tokens": self.total_tokens,
            "max_tokens": self.budget.max_tokens,
        }

    # -- changes -----------------------------------------------------------------------------------------

    def pin(self, tool: Mapping[str, Any], *, server_id: str = "") -> None:
        """Pin a tool (configured per agent): always in context, never evicted; unpins nothing else."""
        name = str(tool["name"])
        self._cache.pop(name, None)
        sid = server_id or str(tool.get("server_id", ""))
        self._pinned[name] = _Loaded(name, sid, dict(tool), estimate_tokens(tool))
        self._shrink()

    def unpin(self, name: str) -> bool:
        return self._pinned.pop(name, None) is not None

    def touch(self, name: str) -> bool:
        """Mark a cached tool as just used (e.g. on ``tools/call``); ``False`` if it is not cached."""
        if name in self._cache:
            self._cache.move_to_end(name)
            return True
        return False

    def load(self, tools: Iterable[tuple[str, Mapping[str, Any]]]) -> LoadResult:
        """Put ``(server_id, tool)`` definitions into the cache, most relevant first; evict LRU to make room.

        A tool already pinned or cached is refreshed (and becomes most recent) at no added cost.
        """
        result = LoadResult()
        for server_id, tool in tools:
            name = str(tool["name"])
            if name in self._pinned:
                result.loaded.append(_entry(name, server_id, tool))
                continue
            tokens = estimate_tokens(tool)
            if tokens > self.cache_capacity:
                result.refused.append(name)
                continue
            previous = self._cache.pop(name, None)
            self._cache[name] = _Loaded(name, server_id, dict(tool), tokens)
            result.evicted.extend(self._shrink(protect=name))
            result.loaded.append(_entry(name, server_id, tool))
            result.tokens_added += tokens - (previous.tokens if previous is not None else 0)
        result.tokens_added = max(0, result.tokens_added)
        return result

    def evict(self, names: Sequence[str], reason: str | None = None) -> dict[str, Any]:
        """The ``mgp/tools/session/evict`` result: ``{evicted, not_evicted: [{name, reason}], total_tokens,
        max_tokens}``. Pinned tools are refused with reason ``pinned``; unknown ones with ``not_cached``."""
        evicted: list[str] = []
        refused: list[dict[str, str]] = []
        for name in dict.fromkeys(names):
            if name in self._pinned:
                refused.append({"name": name, "reason": "pinned"})
            elif self._cache.pop(name, None) is not None:
                evicted.append(name)
            else:
                refused.append({"name": name, "reason": "not_cached"})
        return {
            "evicted": evicted,
            "not_evicted": refused,
            "total_tokens": self.total_tokens,
            "max_tokens": self.budget.max_tokens,
        }

    def discard(self, names: Iterable[str]) -> list[str]:
        """Drop cached tools that no longer exist (a backend's list changed); pinned ones stay."""
        return [name for name in names if self._cache.pop(name, None) is not None]

    def truncate_discovery(self, tools: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        """The longest prefix of ranked discovery results whose cost fits ``discovery_reserve`` (§16.8)."""
        kept: list[Mapping[str, Any]] = []
        spent = 0
        for tool in tools:
            spent += estimate_tokens(tool)
            if spent > self.budget.discovery_reserve:
                break
            kept.append(tool)
        return kept

    def _shrink(self, protect: str | None = None) -> list[str]:
        """Evict least-recently-used cached tools until the cache fits (never ``protect``, never pinned)."""
        evicted: list[str] = []
        capacity = self.cache_capacity
        used = self.cached_tokens
        for name in list(self._cache):
            if used <= capacity:
                break
            if name == protect:
                continue
            used -= self._cache.pop(name).tokens
            evicted.append(name)
        return evicted


# -- mgp/tools/request --------------------------------------------------------------------------------------


def request_tools(
    index: ToolIndex,
    session: ToolSession,
    params: Mapping[str, Any],
    *,
    visible: Visibility | None = None,
    per_requirement: int = 1,
) -> dict[str, Any]:
    """Answer ``mgp/tools/request`` (§16.6): search the index per required capability, load into the session.

    Each ``requirements.capabilities`` item is searched together with ``input_types``/``output_types`` (or the
    ``context`` alone when no capability is given), and a hit counts only if its indexed text contains a token of
    the requirement (exactly or as a prefix: the types refine the ranking, they do not satisfy a requirement);
    ``preferred_risk_level`` is the risk ceiling. ``status`` is
    ``fulfilled`` when every requirement got a tool that fit the budget, ``partial`` when some did,
    ``unavailable`` when none did; ``tools_unavailable`` lists the unmet requirements. ``pending_approval`` and
    ``creating`` are never produced here (permissions are the gateway's decision; tool creation is opt-in and
    not offered). Raises ``ValueError`` on malformed params.
    """
    requirements = params.get("requirements")
    requirements = {} if requirements is None else requirements
    if not isinstance(requirements, Mapping):
        raise ValueError("requirements must be an object")
    context = params.get("context", "")
    if not isinstance(context, str):
        raise ValueError("context must be a string")
    capabilities = _string_list(requirements.get("capabilities"), "requirements.capabilities")
    extra = " ".join(
        _string_list(requirements.get("input_types"), "requirements.input_types")
        + _string_list(requirements.get("output_types"), "requirements.output_types")
    )
    risk = requirements.get("preferred_risk_level")
    if risk is not None and (not isinstance(risk, str) or risk.lower() not in RISK_RANKS):
        raise ValueError("requirements.preferred_risk_level must be one of safe, moderate, dangerous")
    wants = [(cap, f"{cap} {extra}".strip()) for cap in capabilities] or [(context, f"{context} {extra}".strip())]

    loaded: dict[str, dict[str, Any]] = {}
    unavailable: list[str] = []
    tokens_added = 0
    for label, query in wants:
        # the types refine the ranking; the requirement itself must be matched (exactly or as a prefix)
        required = set(tokenize(label))
        found = index.search(query, limit=max(10, per_requirement), risk_level_max=risk, visible=visible).tools
        picks: list[tuple[str, Mapping[str, Any]]] = []
        for hit in found:
            tool = index.get(hit["server_id"], hit["name"])
            if tool is None or not _mentions(tool, required):
                continue
            definition = _definition(tool.name, tool.description, tool.input_schema, tool.security)
            picks.append((tool.server_id, definition))
            if len(picks) == per_requirement:
                break
        outcome = session.load(picks)
        tokens_added += outcome.tokens_added
        for entry in outcome.loaded:
            loaded.setdefault(entry["name"], entry)
        if not outcome.loaded:
            unavailable.append(label)
    met = len(wants) - len(unavailable)
    status = "fulfilled" if not unavailable else ("partial" if met else "unavailable")
    return {
        "status": status,
        "tools_loaded": list(loaded.values()),
        "tools_unavailable": unavailable,
        "session_tools_count": len(session),
        "context_tokens_added": tokens_added,
    }


def _mentions(tool: IndexedTool, required: set[str]) -> bool:
    if not required:
        return True
    terms = set(tokenize(" ".join(tool.field_texts())))
    return any(term == want or term.startswith(want) for want in required for term in terms)


def _definition(
    name: str, description: str, schema: Mapping[str, Any], security: Mapping[str, Any] | None
) -> dict[str, Any]:
    tool: dict[str, Any] = {"name": name, "description": description, "inputSchema": schema}
    if security is not None:
        tool["security"] = security
    return tool


def _string_list(value: object, what: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ValueError(f"{what} must be an array of strings")
    return list(value)
