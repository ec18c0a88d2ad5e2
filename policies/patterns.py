"""Capability patterns in MCPx §4 syntax, one matcher for every dialect.

An action string has up to three segments, ``KIND[:METHOD[:CONTEXT]]``: ``mcp/request:tools/call:echo``,
``mcp/request:resources/read:file:///etc/hosts``, ``chat``. The first two ``:`` separate the segments;
the context is everything after the second one (tool names and URIs may contain ``:`` themselves).

The grammar of a pattern (security review, issue 10):

- A ``*`` that ends the pattern matches any rest of the action, ``:`` included
  (``mcp/*``, ``mcp/request:tools/*``, ``mcp/request:tools/call:weather_*``).
- A ``*`` anywhere else matches a run of characters *within one segment*: never a ``:``. So
  ``mcp/request:*/list`` admits ``tools/list`` and ``resources/templates/list`` but never a
  ``tools/call`` whose tool is named ``add/list``.
- A pattern that names no context (``KIND`` or ``KIND:METHOD``, without a final ``*``) also covers
  the same action narrowed by any context: ``mcp/request:tools/call`` admits every tool, and
  ``mcp/request:*/read`` every resource read. The context narrows a method, it is never a new one.
- A pattern that names a context matches that whole context and nothing longer:
  ``mcp/request:tools/call:echo`` admits the tool ``echo``, not ``echo:add`` nor ``echo:``.
- Everything else is literal and compared by code point (no case folding, no Unicode
  normalization: a look-alike name is another name).

Matching is linear in the action's length: peers choose tool names and URIs, and a backtracking
matcher has hung this gateway once (a 4 kB name against three stars).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import lru_cache

Matcher = Callable[[str], bool]

SEPARATOR = ":"
_KIND_AND_METHOD = 2  # a pattern naming no more segments than these covers every context


@lru_cache(maxsize=4096)
def star_glob(pattern: str) -> Matcher:
    """A whole-text glob where ``*`` matches any run and all else is literal. Here it matches one
    segment of an action (a text without ``:``); elsewhere, a bare name (rate-limit tool patterns).

    Placing each literal between stars at its leftmost fit is exact for ``*``-only globs, so one
    pass suffices (no backtracking)."""
    if "*" not in pattern:
        return pattern.__eq__
    parts = pattern.split("*")
    head, tail = parts[0], parts[-1]
    middle = tuple(part for part in parts[1:-1] if part)
    fixed = len(head) + len(tail)

    def match(text: str) -> bool:
        if len(text) < fixed or not text.startswith(head) or not text.endswith(tail):
            return False
        pos, end = len(head), len(text) - len(tail)
        for part in middle:
            found = text.find(part, pos, end)
            if found < 0:
                return False
            pos = found + len(part)
        return True

    return match


@lru_cache(maxsize=4096)
def _compile(pattern: str) -> Matcher:
    trailing = pattern.endswith("*")
    body = pattern[:-1] if trailing else pattern
    pieces = body.split(SEPARATOR)
    globs = tuple(star_glob(piece) for piece in pieces)
    count = len(pieces)
    # Without a final "*", a pattern naming fewer segments than KIND:METHOD:CONTEXT covers every
    # context of what it names; one naming the context matches the action's whole length.
    open_ended = trailing or count <= _KIND_AND_METHOD
    if trailing:
        # The last named piece need only match a prefix of its action piece; the rest is free.
        prefix = star_glob(pieces[-1] + "*")
        globs = (*globs[:-1], prefix)

    def match(action: str) -> bool:
        # A mid-pattern "*" never crosses ":", so each named piece of the pattern meets exactly one
        # ":"-free piece of the action; what follows the named pieces is free only when allowed.
        split = action.split(SEPARATOR, count)
        if len(split) < count or (len(split) > count and not open_ended):
            return False
        return all(glob(piece) for glob, piece in zip(globs, split, strict=False))

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
        self.everything: bool = "*" in self.patterns and self._within is None
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
