"""A reference model of the capability grammar (policies/patterns.py), written as the definition reads.

It is deliberately naive (memoized recursion over positions, no splitting tricks) so that it shares
no code or strategy with the matcher it judges:

- a final ``*`` matches any rest of the action;
- any other ``*`` matches a run of characters without ``:``;
- a pattern without a final ``*`` that has at most one ``:`` (it names ``KIND`` or ``KIND:METHOD``)
  also covers the action followed by ``:`` and any context;
- everything else is literal.
"""

from __future__ import annotations

from functools import cache


def _glob_within_segments(pattern: str, text: str) -> bool:
    """Whole ``text`` against ``pattern`` where ``*`` matches any run without ``:``."""

    @cache
    def at(p: int, t: int) -> bool:
        if p == len(pattern):
            return t == len(text)
        if pattern[p] == "*":
            if at(p + 1, t):
                return True
            return t < len(text) and text[t] != ":" and at(p, t + 1)
        return t < len(text) and text[t] == pattern[p] and at(p + 1, t + 1)

    return at(0, 0)


def reference(pattern: str, action: str) -> bool:
    if pattern.endswith("*"):
        head = pattern[:-1]
        return any(_glob_within_segments(head, action[:k]) for k in range(len(action) + 1))
    if _glob_within_segments(pattern, action):
        return True
    if pattern.count(":") >= 2:
        return False  # the pattern names a context: that context, whole
    return any(action[k] == ":" and _glob_within_segments(pattern, action[:k]) for k in range(len(action)))
