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

Layout: tokenisation and the ranking constants live in :mod:`gateway.mgp.ranking`, the indexed tool, risk levels
and the wire params/result shapes in :mod:`gateway.mgp.discover_wire`; this module holds :class:`ToolIndex` and
re-exports their public names.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gateway.mgp.discover_wire import (
    DEFAULT_MAX_RESULTS as DEFAULT_MAX_RESULTS,
    MAX_RESULTS_CAP as MAX_RESULTS_CAP,
    RISK_RANKS as RISK_RANKS,
    RISK_UNKNOWN,
    STATUSES,
    STRATEGIES,
    DiscoverParams as DiscoverParams,
    DiscoverResult as DiscoverResult,
    DiscoveryParamsError as DiscoveryParamsError,
    IndexedTool as IndexedTool,
    Visibility as Visibility,
    parse_discover_params as parse_discover_params,
    risk_rank as risk_rank,
)
from gateway.mgp.ranking import (
    FIELD_B,
    FIELD_WEIGHTS as FIELD_WEIGHTS,
    FIELDS as FIELDS,
    K1,
    NFIELDS,
    PREFIX_MAX_LEN as PREFIX_MAX_LEN,
    PREFIX_MIN_LEN as PREFIX_MIN_LEN,
    PREFIX_QUERY_MAX_TOKENS as PREFIX_QUERY_MAX_TOKENS,
    PREFIX_WEIGHT as PREFIX_WEIGHT,
    STOPWORDS,
    relevance,
    tokenize as tokenize,
)

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

_FACTOR_CACHES = 8  # distinct corpora (principals and filters) whose length factors are kept between queries

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


# -- the index ----------------------------------------------------------------------------------------------


class ToolIndex:
    """Every federated tool, searchable; updated per backend (see the module docstring for invariants)."""

    __slots__ = ("_backends", "_docs", "_factors", "_field_present", "_field_sums", "_postings", "_prefixes")

    def __init__(self) -> None:
        self._docs: dict[DocKey, _Doc] = {}
        self._backends: dict[str, _Backend] = {}
        self._postings: dict[str, dict[DocKey, Tf]] = {}
        self._field_sums = [0] * NFIELDS  # total tokens per field, over every indexed tool
        self._field_present = [0] * NFIELDS  # tools with a non-empty field
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
                per_term.setdefault(token, [0] * NFIELDS)[slot] += 1
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
        if strategy not in STRATEGIES:
            raise ValueError(f"unknown strategy {strategy!r}")
        ceiling = RISK_UNKNOWN
        if risk_level_max is not None:
            if risk_level_max.lower() not in RISK_RANKS:
                raise ValueError(f"unknown risk level {risk_level_max!r}")
            ceiling = RISK_RANKS[risk_level_max.lower()]
        status = status or "connected"
        if status not in STATUSES:
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
        meaningful = [token for token in tokens if token not in STOPWORDS] or tokens
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
            sums, present = [0] * NFIELDS, [0] * NFIELDS
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
        c0, c1, c2, c3, c4, c5 = (1.0 - b for b in FIELD_B)
        d0, d1, d2, d3, d4, d5 = (b / average for b, average in zip(FIELD_B, averages, strict=True))

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
                totals[key] = totals.get(key, 0.0) + idf * value / (K1 + value)

        exact = tuple(tokens)
        ranked: list[tuple[float, str, str, float]] = []
        for key, score in totals.items():
            boost = upper if docs[key].name_tokens == exact else 0.0
            ranked.append((-(score + boost), key[1], key[0], score + boost))
        best = heapq.nsmallest(limit, ranked)
        return [(relevance(total, upper), docs[(server_id, name)].tool) for _, name, server_id, total in best]
