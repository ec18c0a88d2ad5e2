"""Tokenisation and the BM25F ranking constants of the MGP §16 tool index (pure; see :mod:`gateway.mgp.discovery`).

Tokens come from splitting on every non-alphanumeric character and on camelCase/acronym boundaries, lowercased;
no stemming. BM25F (Robertson/Zaragoza) weights the fields name > title > keywords > description > parameter
names > categories; :class:`gateway.mgp.discovery.ToolIndex` applies them.
"""

from __future__ import annotations

import math
import re

__all__ = [
    "FIELDS",
    "FIELD_B",
    "FIELD_WEIGHTS",
    "K1",
    "NFIELDS",
    "PREFIX_MAX_LEN",
    "PREFIX_MIN_LEN",
    "PREFIX_QUERY_MAX_TOKENS",
    "PREFIX_WEIGHT",
    "STOPWORDS",
    "relevance",
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
STOPWORDS = frozenset(
    "a an and are as at be by can for from i in into is it me my of on or please that the this to with "
    "want need some".split()
)

# -- fields and ranking constants ---------------------------------------------------------------------------

FIELDS = ("name", "title", "keywords", "description", "params", "categories")
FIELD_WEIGHTS: tuple[float, ...] = (3.0, 2.0, 1.5, 1.0, 0.6, 0.4)
FIELD_B: tuple[float, ...] = (0.5, 0.5, 0.5, 0.75, 0.5, 0.3)
K1 = 1.2
NFIELDS = len(FIELDS)
assert NFIELDS == 6, "ToolIndex._rank unrolls the per-field dot product over six fields"

PREFIX_QUERY_MAX_TOKENS = 3
"""A query with at most this many (non-stopword) tokens also matches by prefix."""
PREFIX_MIN_LEN = 2
"""A query token shorter than this never matches by prefix."""
PREFIX_MAX_LEN = 32
"""Prefixes are tabled up to this length; longer query tokens match exactly only."""
PREFIX_WEIGHT = 0.5
"""Frequency weight of a prefix match relative to an exact one."""


def relevance(score: float, upper: float) -> float:
    """A BM25F score as a relevance in ``[0, 1]``: divided by its query-dependent upper bound, rounded."""
    if upper <= 0.0 or not math.isfinite(score):
        return 0.0
    return round(min(1.0, max(0.0, score / upper)), 4)
