"""Capability patterns in MCPx §4 syntax, one matcher for every dialect.

A pattern is a kind string where ``*`` matches any run of characters, at the end
(``mcp/request:tools/*``) or in the middle (``mcp/request:*/list``). A pattern without any ``*``
also covers the same action narrowed by a context, so ``mcp/request:tools/call`` allows
``mcp/request:tools/call:echo`` (the context is a refinement of the method, never a new method).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import lru_cache

Matcher = Callable[[str], bool]


@lru_cache(maxsize=4096)
def _compile(pattern: str) -> Matcher:
    if "*" not in pattern:
        refined = pattern + ":"
        return lambda action: action == pattern or action.startswith(refined)
    parts = pattern.split("*")
    head, tail = parts[0], parts[-1]
    middle = tuple(part for part in parts[1:-1] if part)
    fixed = len(head) + len(tail)

    def match(action: str) -> bool:
        # Not a regex of ".*" runs: those backtrack in O(len(action) ** stars), and actions carry
        # peer-chosen tool names and URIs (3 stars and a 4 kB name took over a minute). Placing each
        # literal between stars at its leftmost fit is exact for "*"-only globs and one pass long.
        if len(action) < fixed or not action.startswith(head) or not action.endswith(tail):
            return False
        pos, end = len(head), len(action) - len(tail)
        for part in middle:
            found = action.find(part, pos, end)
            if found < 0:
                return False
            pos = found + len(part)
        return True

    return match


def matches(pattern: str, action: str) -> bool:
    return _compile(pattern)(action)


class CapabilitySet:
    """An immutable set of patterns with a cached verdict per action."""

    __slots__ = ("_cache", "_matchers", "_within", "everything", "patterns")

    def __init__(self, patterns: Iterable[str], within: CapabilitySet | None = None) -> None:
        self.patterns: tuple[str, ...] = tuple(dict.fromkeys(p for p in patterns if p))
        # A narrowed set (e.g. a JWT's claim inside the configured set) allows only what both allow.
        self._within = within if within is not None and not within.everything else None
        self.everything = "*" in self.patterns and self._within is None
        self._matchers = tuple(_compile(p) for p in self.patterns)
        self._cache: dict[str, bool] = {}

    def narrowed(self, other: CapabilitySet) -> CapabilitySet:
        """The capabilities in both sets: ``self`` can only lose by it, never gain."""
        if other.everything:
            return self
        if self.everything:
            return other
        return CapabilitySet(self.patterns, within=other if self._within is None else self._within.narrowed(other))

    def allows(self, action: str) -> bool:
        if self.everything:
            return True
        verdict = self._cache.get(action)
        if verdict is None:
            verdict = any(match(action) for match in self._matchers) and (
                self._within is None or self._within.allows(action)
            )
            if len(self._cache) < 8192:
                self._cache[action] = verdict
        return verdict

    def __repr__(self) -> str:
        return f"CapabilitySet({list(self.patterns)!r})"

    def describe(self) -> list[str]:
        """The patterns, with what they are narrowed by, for the admin API and welcome messages."""
        if self._within is None:
            return list(self.patterns)
        return [*self.patterns, *(f"(within) {p}" for p in self._within.describe())]

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, CapabilitySet)
            and set(self.patterns) == set(other.patterns)
            and self._within == other._within
        )

    def __hash__(self) -> int:
        return hash((frozenset(self.patterns), self._within))
