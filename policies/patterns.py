"""Capability patterns in MCPx §4 syntax, one matcher for every dialect.

A pattern is a kind string where ``*`` matches any run of characters, at the end
(``mcp/request:tools/*``) or in the middle (``mcp/request:*/list``). A pattern without any ``*``
also covers the same action narrowed by a context, so ``mcp/request:tools/call`` allows
``mcp/request:tools/call:echo`` (the context is a refinement of the method, never a new method).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache


@lru_cache(maxsize=4096)
def _compile(pattern: str) -> re.Pattern[str]:
    body = ".*".join(re.escape(part) for part in pattern.split("*"))
    if "*" not in pattern:
        body += r"(?::.*)?"
    return re.compile(body, re.DOTALL)


def matches(pattern: str, action: str) -> bool:
    return _compile(pattern).fullmatch(action) is not None


class CapabilitySet:
    """An immutable set of patterns with a cached verdict per action."""

    __slots__ = ("_cache", "_regex", "everything", "patterns")

    def __init__(self, patterns: Iterable[str]) -> None:
        self.patterns: tuple[str, ...] = tuple(dict.fromkeys(p for p in patterns if p))
        self.everything = "*" in self.patterns
        self._regex = (
            re.compile("|".join(f"(?:{_compile(p).pattern})" for p in self.patterns), re.DOTALL)
            if self.patterns
            else None
        )
        self._cache: dict[str, bool] = {}

    def allows(self, action: str) -> bool:
        if self.everything:
            return True
        verdict = self._cache.get(action)
        if verdict is None:
            verdict = self._regex is not None and self._regex.fullmatch(action) is not None
            if len(self._cache) < 8192:
                self._cache[action] = verdict
        return verdict

    def __repr__(self) -> str:
        return f"CapabilitySet({list(self.patterns)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CapabilitySet) and set(self.patterns) == set(other.patterns)

    def __hash__(self) -> int:
        return hash(frozenset(self.patterns))
