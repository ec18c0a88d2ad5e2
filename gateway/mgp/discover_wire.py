"""The wire side of MGP §16.5 tool discovery: the indexed tool, risk levels, params and result shapes.

Pure (no I/O, no index state); :class:`gateway.mgp.discovery.ToolIndex` holds :class:`IndexedTool` entries and
answers with :class:`DiscoverResult`. Filters (§16.5 ``filter``) and the result shape are described in the
docstring of :mod:`gateway.mgp.discovery`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "DEFAULT_MAX_RESULTS",
    "MAX_RESULTS_CAP",
    "RISK_RANKS",
    "RISK_UNKNOWN",
    "STATUSES",
    "STRATEGIES",
    "DiscoverParams",
    "DiscoverResult",
    "DiscoveryParamsError",
    "IndexedTool",
    "Visibility",
    "parse_discover_params",
    "risk_rank",
]

DEFAULT_MAX_RESULTS = 5  # draft §16.5: "max_results": {"default": 5}
MAX_RESULTS_CAP = 100

# -- risk levels (§4.4) -------------------------------------------------------------------------------------

RISK_RANKS: Mapping[str, int] = {
    "safe": 0,
    "low": 0,
    "moderate": 1,
    "medium": 1,
    "high": 2,
    "dangerous": 3,
    "critical": 3,
}
RISK_UNKNOWN = 3


def risk_rank(security: Mapping[str, Any] | None) -> int:
    """The tool's risk for ``risk_level_max``: the higher of ``effective_risk_level`` and ``risk_level``.

    Missing metadata or an unknown level is the highest rank: a ceiling below ``dangerous`` never lets
    through a tool whose risk nobody declared.
    """
    if not security:
        return RISK_UNKNOWN
    ranks = [
        RISK_RANKS.get(value.lower(), RISK_UNKNOWN) if isinstance(value, str) else RISK_UNKNOWN
        for key in ("risk_level", "effective_risk_level")
        if (value := security.get(key)) is not None
    ]
    return max(ranks) if ranks else RISK_UNKNOWN


# -- the indexed tool ---------------------------------------------------------------------------------------


@dataclass(slots=True, frozen=True)
class IndexedTool:
    """One federated tool as the index holds it (and as ``visible`` predicates see it)."""

    server_id: str
    name: str
    title: str
    description: str
    input_schema: Mapping[str, Any]
    security: Mapping[str, Any] | None
    categories: tuple[str, ...]
    keywords: tuple[str, ...]
    param_names: tuple[str, ...]
    risk: int

    @classmethod
    def from_tool(cls, server_id: str, tool: Mapping[str, Any]) -> IndexedTool | None:
        """Build from an MCP tool definition (client-visible name); ``None`` if it has no usable name."""
        name = tool.get("name")
        if not isinstance(name, str) or not name:
            return None
        mgp = tool.get("_mgp") if isinstance(tool.get("_mgp"), Mapping) else None
        security = tool.get("security")
        if not isinstance(security, Mapping) and mgp is not None:
            security = mgp.get("security")
        security = security if isinstance(security, Mapping) else None
        schema = tool.get("inputSchema")
        schema = schema if isinstance(schema, Mapping) else {"type": "object"}
        props = schema.get("properties")
        params = tuple(key for key in props if isinstance(key, str)) if isinstance(props, Mapping) else ()
        categories = _strings(tool.get("categories")) + (_strings(mgp.get("categories")) if mgp else ())
        keywords = _strings(tool.get("keywords")) + (_strings(mgp.get("keywords")) if mgp else ())
        return cls(
            server_id=server_id,
            name=name,
            title=_text(tool.get("title")) or _annotation_title(tool.get("annotations")),
            description=_text(tool.get("description")),
            input_schema=schema,
            security=security,
            categories=_derive_categories(server_id, name, categories),
            keywords=keywords,
            param_names=params,
            risk=risk_rank(security),
        )

    def to_wire(self, relevance_score: float) -> dict[str, Any]:
        """The §16.5 result entry."""
        entry: dict[str, Any] = {
            "name": self.name,
            "server_id": self.server_id,
            "description": self.description,
            "relevance_score": relevance_score,
            "inputSchema": self.input_schema,
        }
        if self.security is not None:
            entry["security"] = self.security
        return entry

    def matches_categories(self, wanted: Iterable[str]) -> bool:
        for want in wanted:
            for have in self.categories:
                if have == want or have.startswith((want + ".", want + "/")):
                    return True
        return False

    def field_texts(self) -> tuple[str, ...]:
        """The texts of :data:`FIELDS`, in order."""
        return (
            self.name,
            self.title,
            " ".join(self.keywords),
            self.description,
            " ".join(self.param_names),
            " ".join(self.categories),
        )


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _annotation_title(annotations: object) -> str:
    return _text(annotations.get("title")) if isinstance(annotations, Mapping) else ""


def _strings(value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list | tuple):
        return tuple(item for item in value if isinstance(item, str) and item)
    return ()


def _derive_categories(server_id: str, name: str, explicit: tuple[str, ...]) -> tuple[str, ...]:
    found: dict[str, None] = {}
    for category in (*explicit, server_id, server_id.rsplit(".", 1)[-1]):
        if category:
            found[category.lower()] = None
    namespace, dot, _ = name.partition(".")
    if dot and namespace:
        found[namespace.lower()] = None
    return tuple(found)


Visibility = Callable[[IndexedTool], bool]
"""The principal's visibility: ``True`` for a tool the caller may see and use."""

# -- parameters and result ----------------------------------------------------------------------------------


class DiscoveryParamsError(ValueError):
    """Invalid ``mgp/tools/discover`` parameters (the caller answers with invalid params)."""


STRATEGIES = ("keyword", "semantic", "category")
STATUSES = ("connected", "disconnected", "all")


@dataclass(slots=True, frozen=True)
class DiscoverParams:
    """``mgp/tools/discover`` / ``mgp.tools.discover`` arguments (§16.5)."""

    query: str
    strategy: str = "keyword"
    max_results: int = DEFAULT_MAX_RESULTS
    categories: tuple[str, ...] | None = None
    risk_level_max: str | None = None
    status: str | None = None


def parse_discover_params(params: Mapping[str, Any] | None) -> DiscoverParams:
    """Validate the wire params: ``{query, strategy?, max_results?, filter?: {categories, risk_level_max,
    status}}``. ``max_results`` is clamped to ``1..MAX_RESULTS_CAP``."""
    params = params or {}
    query = params.get("query", "")
    if not isinstance(query, str):
        raise DiscoveryParamsError("query must be a string")
    strategy = params.get("strategy", "keyword")
    if strategy not in STRATEGIES:
        raise DiscoveryParamsError(f"strategy must be one of {', '.join(STRATEGIES)}")
    raw_max = params.get("max_results", DEFAULT_MAX_RESULTS)
    if isinstance(raw_max, bool) or not isinstance(raw_max, int | float) or not math.isfinite(raw_max):
        raise DiscoveryParamsError("max_results must be a number")
    max_results = max(1, min(MAX_RESULTS_CAP, int(raw_max)))
    flt = params.get("filter")
    flt = {} if flt is None else flt
    if not isinstance(flt, Mapping):
        raise DiscoveryParamsError("filter must be an object")
    categories = flt.get("categories")
    if categories is not None and (
        not isinstance(categories, list) or not all(isinstance(item, str) for item in categories)
    ):
        raise DiscoveryParamsError("filter.categories must be an array of strings")
    risk = flt.get("risk_level_max")
    if risk is not None and (not isinstance(risk, str) or risk.lower() not in RISK_RANKS):
        raise DiscoveryParamsError("filter.risk_level_max must be one of safe, moderate, dangerous")
    status = flt.get("status")
    if status is not None and status not in STATUSES:
        raise DiscoveryParamsError("filter.status must be one of connected, disconnected, all")
    return DiscoverParams(
        query=query,
        strategy=strategy,
        max_results=max_results,
        categories=tuple(categories) if categories is not None else None,
        risk_level_max=risk,
        status=status,
    )


@dataclass(slots=True)
class DiscoverResult:
    tools: list[dict[str, Any]]
    total_available: int
    search_strategy: str
    query_time_ms: float
    fallback_strategy: str | None = None

    def to_wire(self) -> dict[str, Any]:
        """The §16.5 result object."""
        out: dict[str, Any] = {
            "tools": self.tools,
            "total_available": self.total_available,
            "search_strategy": self.search_strategy,
            "query_time_ms": self.query_time_ms,
        }
        if self.fallback_strategy is not None:
            out["fallback_strategy"] = self.fallback_strategy
        return out
