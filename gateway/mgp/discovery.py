"""The tool-discovery index of MGP §16 (``mgp/tools/discover`` in 0.3, kernel tool ``mgp.tools.discover`` 0.5+).

Spec: ``shared/specs/mgp-0.3.md`` §16.4 (the tool index), §16.5 (Mode A: discover), §4.3/§4.4 (security
metadata, risk levels); the draft's ``docs/MGP_DISCOVERY.md`` §16.4 ("keyword + category search alone is
sufficient for ``tool_discovery`` compliance"; ``semantic`` without embeddings falls back to keyword and says
so with ``fallback_strategy: "keyword"``) and §16.5 (input schema of ``mgp.tools.discover``).

What is indexed, per federated tool (keyed by ``(server_id, name)``, ``name`` being the client-visible name):
``name``, ``title``, ``description``, ``keywords``, the parameter names of ``inputSchema.properties`` and the
tool's categories (explicit ``categories`` / ``_mgp.categories``, plus, as the draft's implementation derives
them, the backend id, its last dotted segment and the tool name's namespace before the first ``.``).

Ranking: BM25F (Robertson/Zaragoza) over those fields with weights name > title > keywords > description >
parameter names > categories; one saturation per query term over the weighted, length-normalised field
frequencies, so a term repeated across fields cannot outscore a rarer one without bound. Tokens come from
splitting on every non-alphanumeric character and on camelCase/acronym boundaries, lowercased; no stemming.
A query of at most :data:`PREFIX_QUERY_MAX_TOKENS` tokens also matches index terms that *start with* a query
token (weighted :data:`PREFIX_WEIGHT`), so ``calc`` finds ``calculator``. A query whose tokens equal a tool's
name tokens (``read file`` / ``readFile`` / ``read_file``) ranks that tool first with relevance 1.0.

Invariants (each has a test in ``tests/gateway/mgp/test_discovery.py``):

1. **Visibility before ranking.** ``search(..., visible=p)`` scores over the corpus ``{t | p(t) and t passes
   the filters}`` only: document frequencies, corpus size and average field lengths (over the corpus tools
   that have the field) are computed over that corpus, so every score, the order and ``total_available`` are
   exactly those of an index holding only the tools the caller may see. A caller cannot learn of a hidden
   tool, not even through a score.
2. **Scores** are finite, ``0 <= relevance_score <= 1`` (the BM25F score divided by its query-dependent upper
   bound, the sum of the query terms' IDFs), results are sorted by descending score, ties by ``(name,
   server_id)``; at most ``limit`` results; every result matched at least one query term.
3. **Incremental updates.** ``replace_backend``/``remove_backend`` cost O(tokens of that backend's tools)
   (postings, field-length totals and the prefix table are maintained per term; the per-corpus length factors
   cached between queries are dropped), and an index built by any sequence of updates answers every query
   exactly as one built from scratch from the final tool lists.
4. **Filters** (§16.5 ``filter``): ``categories`` (any match; hierarchical: ``fs`` matches ``fs.read`` and
   ``fs/read``), ``risk_level_max`` (``safe < moderate < dangerous``, §4.4; the ordering ``low < medium <
   high < critical`` is accepted as well, ``low`` = ``safe``, ``medium`` = ``moderate``, ``critical`` =
   ``dangerous``, ``high`` between the two), ``status`` (``connected`` — the default — ``disconnected`` or
   ``all``). A tool's risk is the higher of ``effective_risk_level`` and ``risk_level``; a tool without
   security metadata, or with a level we do not know, counts as the highest level (it passes only a
   ``dangerous``/``critical`` ceiling).

Results have the §16.5 shape ``{name, server_id, description, relevance_score, inputSchema, security}``
(``security`` only when the tool has metadata); the response adds ``total_available`` (size of the searched
corpus: visible tools passing the filters), ``search_strategy`` and ``query_time_ms``.
"""

from __future__ import annotations

import heapq
import math
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "DEFAULT_MAX_RESULTS",
    "FIELD_WEIGHTS",
    "MAX_RESULTS_CAP",
    "RISK_RANKS",
    "DiscoverParams",
    "DiscoverResult",
    "DiscoveryParamsError",
    "IndexedTool",
    "ToolIndex",
    "Visibility",
    "parse_discover_params",
    "risk_rank",
    "tokenize",
]

# -- tokenisation -------------------------------------------------------------------------------------------

_ALNUM_RUN = re.compile(r"[^\W_]+")  # Unicode letters and digits; "_" and all punctuation split
_CAMEL = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")


def tokenize(text: str) -> list[str]:
    """Lowercased tokens of ``text``: split on non-alphanumerics, snake/kebab/dot case and camelCase.

    ``"getHTTPResponse_v2"`` → ``["get", "http", "response", "v", "2"]``. Non-ASCII runs (e.g. Japanese) are
    kept whole, casefolded.
    """
    if text.isascii():  # the common case, in one pass: the camel pattern never matches across a non-alphanumeric
        return [part.lower() for part in _CAMEL.findall(text)]
    tokens: list[str] = []
    for run in _ALNUM_RUN.findall(text):
        if run.isascii():
            tokens.extend(part.lower() for part in _CAMEL.findall(run))
        else:
            tokens.append(run.casefold())
    return tokens


# Dropped from queries only (never from documents), unless nothing else is left: natural-language intents
# ("read the contents of a file from disk") would otherwise lose relevance for words no tool mentions.
_STOPWORDS = frozenset(
    "a an and are as at be by can for from i in into is it me my of on or please that the this to with "
    "want need some".split()
)

# -- fields and ranking constants ---------------------------------------------------------------------------

FIELDS = ("name", "title", "keywords", "description", "params", "categories")
FIELD_WEIGHTS: tuple[float, ...] = (3.0, 2.0, 1.5, 1.0, 0.6, 0.4)
_FIELD_B: tuple[float, ...] = (0.5, 0.5, 0.5, 0.75, 0.5, 0.3)
_K1 = 1.2
_NFIELDS = len(FIELDS)
assert _NFIELDS == 6, "ToolIndex._rank unrolls the per-field dot product over six fields"

PREFIX_QUERY_MAX_TOKENS = 3
"""A query with at most this many (non-stopword) tokens also matches by prefix."""
PREFIX_MIN_LEN = 2
"""A query token shorter than this never matches by prefix."""
PREFIX_MAX_LEN = 32
"""Prefixes are tabled up to this length; longer query tokens match exactly only."""
PREFIX_WEIGHT = 0.5
"""Frequency weight of a prefix match relative to an exact one."""
_FACTOR_CACHES = 8  # distinct corpora (principals and filters) whose length factors are kept between queries

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
_RISK_UNKNOWN = 3


def risk_rank(security: Mapping[str, Any] | None) -> int:
    """The tool's risk for ``risk_level_max``: the higher of ``effective_risk_level`` and ``risk_level``.

    Missing metadata or an unknown level is the highest rank: a ceiling below ``dangerous`` never lets
    through a tool whose risk nobody declared.
    """
    if not security:
        return _RISK_UNKNOWN
    ranks = [
        RISK_RANKS.get(value.lower(), _RISK_UNKNOWN) if isinstance(value, str) else _RISK_UNKNOWN
        for key in ("risk_level", "effective_risk_level")
        if (value := security.get(key)) is not None
    ]
    return max(ranks) if ranks else _RISK_UNKNOWN


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

DocKey = tuple[str, str]  # (server_id, name)
Tf = tuple[int, ...]  # per-field term frequency, aligned with FIELDS


@dataclass(slots=True)
class _Doc:
    tool: IndexedTool
    lengths: tuple[int, ...]
    tfs: dict[str, Tf]
    name_tokens: tuple[str, ...]


@dataclass(slots=True)
class _Backend:
    status: str
    keys: list[DocKey] = field(default_factory=list)


# -- parameters and result ----------------------------------------------------------------------------------


class DiscoveryParamsError(ValueError):
    """Invalid ``mgp/tools/discover`` parameters (the caller answers with invalid params)."""


_STRATEGIES = ("keyword", "semantic", "category")
_STATUSES = ("connected", "disconnected", "all")


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
    if strategy not in _STRATEGIES:
        raise DiscoveryParamsError(f"strategy must be one of {', '.join(_STRATEGIES)}")
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
    if status is not None and status not in _STATUSES:
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


# -- the index ----------------------------------------------------------------------------------------------


class ToolIndex:
    """Every federated tool, searchable; updated per backend (see the module docstring for invariants)."""

    __slots__ = ("_backends", "_docs", "_factors", "_field_present", "_field_sums", "_postings", "_prefixes")

    def __init__(self) -> None:
        self._docs: dict[DocKey, _Doc] = {}
        self._backends: dict[str, _Backend] = {}
        self._postings: dict[str, dict[DocKey, Tf]] = {}
        self._field_sums = [0] * _NFIELDS  # total tokens per field, over every indexed tool
        self._field_present = [0] * _NFIELDS  # tools with a non-empty field
        self._factors: dict[tuple[float, ...], dict[DocKey, tuple[float, ...]]] = {}  # see _rank
        self._prefixes: dict[str, set[str]] = {}

    # -- updates ----------------------------------------------------------------------------------------

    def replace_backend(self, server_id: str, tools: Iterable[Mapping[str, Any]], *, status: str = "connected") -> int:
        """Index ``tools`` (client-visible definitions) as backend ``server_id``'s whole list; returns how many
        were indexed. A nameless tool is skipped; of two with one name the first wins."""
        if status not in ("connected", "disconnected"):
            raise ValueError(f"status must be connected or disconnected, not {status!r}")
        self.remove_backend(server_id)
        backend = self._backends[server_id] = _Backend(status)  # registered first: every doc has its backend
        for tool in tools:
            entry = IndexedTool.from_tool(server_id, tool)
            if entry is None or (server_id, entry.name) in self._docs:
                continue
            self._add(entry)
            backend.keys.append((server_id, entry.name))
        return len(backend.keys)

    def remove_backend(self, server_id: str) -> bool:
        """Forget a backend and its tools; ``False`` if it was not indexed."""
        backend = self._backends.pop(server_id, None)
        if backend is None:
            return False
        for key in backend.keys:
            self._remove(key)
        return True

    def set_status(self, server_id: str, status: str) -> None:
        """Mark a backend ``connected`` or ``disconnected`` (its tools stay indexed, for ``status: all``)."""
        if status not in ("connected", "disconnected"):
            raise ValueError(f"status must be connected or disconnected, not {status!r}")
        if server_id in self._backends:
            self._backends[server_id].status = status

    def _add(self, tool: IndexedTool) -> None:
        self._factors = {}
        key = (tool.server_id, tool.name)
        per_term: dict[str, list[int]] = {}
        lengths = []
        for slot, text in enumerate(tool.field_texts()):
            tokens = tokenize(text)
            lengths.append(len(tokens))
            if tokens:
                self._field_sums[slot] += len(tokens)
                self._field_present[slot] += 1
            for token in tokens:
                per_term.setdefault(token, [0] * _NFIELDS)[slot] += 1
        tfs = {term: tuple(counts) for term, counts in per_term.items()}
        for term, tf in tfs.items():
            postings = self._postings.get(term)
            if postings is None:
                postings = self._postings[term] = {}
                for size in range(PREFIX_MIN_LEN, min(len(term) - 1, PREFIX_MAX_LEN) + 1):
                    self._prefixes.setdefault(term[:size], set()).add(term)
            postings[key] = tf
        self._docs[key] = _Doc(tool, tuple(lengths), tfs, tuple(tokenize(tool.name)))

    def _remove(self, key: DocKey) -> None:
        self._factors = {}
        doc = self._docs.pop(key)
        for slot, length in enumerate(doc.lengths):
            if length:
                self._field_sums[slot] -= length
                self._field_present[slot] -= 1
        for term in doc.tfs:
            postings = self._postings[term]
            del postings[key]
            if postings:
                continue
            del self._postings[term]
            for size in range(PREFIX_MIN_LEN, min(len(term) - 1, PREFIX_MAX_LEN) + 1):
                prefix = term[:size]
                terms = self._prefixes[prefix]
                terms.discard(term)
                if not terms:
                    del self._prefixes[prefix]

    # -- reading ----------------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._docs)

    def __contains__(self, key: object) -> bool:
        return key in self._docs

    def get(self, server_id: str, name: str) -> IndexedTool | None:
        doc = self._docs.get((server_id, name))
        return doc.tool if doc is not None else None

    def tools(self) -> list[IndexedTool]:
        return [doc.tool for doc in self._docs.values()]

    def backends(self) -> dict[str, str]:
        """``server_id → status``."""
        return {server_id: backend.status for server_id, backend in self._backends.items()}

    def discover(self, params: Mapping[str, Any] | None, *, visible: Visibility | None = None) -> dict[str, Any]:
        """Answer ``mgp/tools/discover`` wire params with the wire result (raises DiscoveryParamsError)."""
        parsed = parse_discover_params(params)
        return self.search(
            parsed.query,
            limit=parsed.max_results,
            categories=parsed.categories,
            risk_level_max=parsed.risk_level_max,
            status=parsed.status,
            visible=visible,
            strategy=parsed.strategy,
        ).to_wire()

    def search(
        self,
        query: str,
        *,
        limit: int = DEFAULT_MAX_RESULTS,
        categories: Sequence[str] | None = None,
        risk_level_max: str | None = None,
        status: str | None = None,
        visible: Visibility | None = None,
        strategy: str = "keyword",
    ) -> DiscoverResult:
        """Rank the caller's corpus (visible tools passing the filters) against ``query``.

        ``strategy``: ``keyword`` (BM25F), ``semantic`` (no embeddings here: keyword, reported as
        ``fallback_strategy``), ``category`` (no ranking: the corpus in name order, the query's tokens acting as
        extra categories). A query without tokens lists the corpus in name order with score 0.
        """
        started = time.perf_counter()
        if limit < 1:
            raise ValueError("limit must be at least 1")
        if strategy not in _STRATEGIES:
            raise ValueError(f"unknown strategy {strategy!r}")
        ceiling = _RISK_UNKNOWN
        if risk_level_max is not None:
            if risk_level_max.lower() not in RISK_RANKS:
                raise ValueError(f"unknown risk level {risk_level_max!r}")
            ceiling = RISK_RANKS[risk_level_max.lower()]
        status = status or "connected"
        if status not in _STATUSES:
            raise ValueError(f"unknown status {status!r}")
        wanted = tuple(category.lower() for category in categories) if categories else ()
        if strategy == "category" and query.strip():
            wanted = (*wanted, query.strip().lower(), *tokenize(query))

        corpus: list[_Doc] = []
        for doc in self._docs.values():
            tool = doc.tool
            if tool.risk > ceiling:
                continue
            if status != "all" and self._backends[tool.server_id].status != status:
                continue
            if wanted and not tool.matches_categories(wanted):
                continue
            if visible is not None and not visible(tool):
                continue
            corpus.append(doc)

        tokens = tokenize(query) if strategy != "category" else []
        if tokens:
            scored = self._rank(tokens, corpus, limit)
        else:
            scored = [(0.0, doc.tool) for doc in corpus]
            scored.sort(key=lambda item: (item[1].name, item[1].server_id))
        elapsed = (time.perf_counter() - started) * 1000.0
        return DiscoverResult(
            tools=[tool.to_wire(score) for score, tool in scored[:limit]],
            total_available=len(corpus),
            search_strategy=strategy,
            query_time_ms=round(elapsed, 3),
            fallback_strategy="keyword" if strategy == "semantic" else None,
        )

    def _rank(self, tokens: list[str], corpus: list[_Doc], limit: int) -> list[tuple[float, IndexedTool]]:
        """The ``limit`` best of ``corpus`` for ``tokens`` (BM25F; see the module docstring)."""
        if not corpus:
            return []
        meaningful = [token for token in tokens if token not in _STOPWORDS] or tokens
        terms = list(dict.fromkeys(meaningful))
        prefixing = len(terms) <= PREFIX_QUERY_MAX_TOKENS
        count = len(corpus)
        whole = count == len(self._docs)
        members = None if whole else {(doc.tool.server_id, doc.tool.name) for doc in corpus}
        # average length of each field over the corpus documents that have it (a field most tools leave empty,
        # such as title, is not penalised for being longer than "nothing")
        if whole:
            sums, present = self._field_sums, self._field_present
        else:
            sums, present = [0] * _NFIELDS, [0] * _NFIELDS
            for doc in corpus:
                for slot, length in enumerate(doc.lengths):
                    if length:
                        sums[slot] += length
                        present[slot] += 1
        averages = [total / have if have else 1.0 for total, have in zip(sums, present, strict=True)]
        docs = self._docs
        # per document: each field's weight over its BM25 length normalisation. They depend only on the document
        # and the corpus averages, so they are kept per averages (the same principal, or the whole index, hits
        # again) until the index changes.
        key_averages = tuple(averages)
        factors = self._factors.get(key_averages)
        if factors is None:
            if len(self._factors) >= _FACTOR_CACHES:
                del self._factors[next(iter(self._factors))]
            factors = self._factors[key_averages] = {}
        w0, w1, w2, w3, w4, w5 = FIELD_WEIGHTS
        c0, c1, c2, c3, c4, c5 = (1.0 - b for b in _FIELD_B)
        d0, d1, d2, d3, d4, d5 = (b / average for b, average in zip(_FIELD_B, averages, strict=True))

        totals: dict[DocKey, float] = {}
        upper = 0.0
        for term in terms:
            # the weighted, normalised frequency of this query term per document (linear in the field
            # frequencies, so exact and prefix matches simply add up, prefix ones at a discount)
            pseudo: dict[DocKey, float] = {}
            sources: list[tuple[str, float]] = [(term, 1.0)] if term in self._postings else []
            if prefixing and PREFIX_MIN_LEN <= len(term) <= PREFIX_MAX_LEN:
                sources.extend((longer, PREFIX_WEIGHT) for longer in sorted(self._prefixes.get(term, ())))
            for source, weight in sources:
                for key, tf in self._postings[source].items():
                    if members is not None and key not in members:
                        continue
                    f = factors.get(key)
                    if f is None:
                        n = docs[key].lengths
                        f = factors[key] = (
                            w0 / (c0 + d0 * n[0]),
                            w1 / (c1 + d1 * n[1]),
                            w2 / (c2 + d2 * n[2]),
                            w3 / (c3 + d3 * n[3]),
                            w4 / (c4 + d4 * n[4]),
                            w5 / (c5 + d5 * n[5]),
                        )
                    dot = tf[0] * f[0] + tf[1] * f[1] + tf[2] * f[2] + tf[3] * f[3] + tf[4] * f[4] + tf[5] * f[5]
                    pseudo[key] = pseudo.get(key, 0.0) + weight * dot
            df = len(pseudo)
            idf = math.log(1.0 + (count - df + 0.5) / (df + 0.5))
            upper += idf
            for key, value in pseudo.items():
                totals[key] = totals.get(key, 0.0) + idf * value / (_K1 + value)

        exact = tuple(tokens)
        ranked: list[tuple[float, str, str, float]] = []
        for key, score in totals.items():
            boost = upper if docs[key].name_tokens == exact else 0.0
            ranked.append((-(score + boost), key[1], key[0], score + boost))
        best = heapq.nsmallest(limit, ranked)
        return [(_relevance(total, upper), docs[(server_id, name)].tool) for _, name, server_id, total in best]


def _relevance(score: float, upper: float) -> float:
    if upper <= 0.0 or not math.isfinite(score):
        return 0.0
    return round(min(1.0, max(0.0, score / upper)), 4)
