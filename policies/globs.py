"""Path-style globs for MCPL scope labels and feature-set names, matched in linear time.

MCPL leaves pattern semantics to the host (§7.2); the gateway uses one small glob dialect for both:
``**`` matches any run of characters, ``*`` any run without the separator, ``?`` one character other
than the separator, and everything else is literal (no classes, no escapes, so a label such as
``#dev-[x]`` needs no quoting). ``**`` directly followed by the separator may also match nothing, so
``**/.env`` covers a top-level ``.env`` the way users expect from gitignore.

The text being matched is chosen by remote peers (scope labels, feature-set names), and so, for
``featureSets/update``, is the pattern. A regex made of ``.*`` runs backtracks in
O(len(text) ** stars), which has already hung this gateway once, so matching here is a bit-parallel
simulation of the pattern's NFA: one pass over the text, each step a few integer operations on a
bitmask with one bit per pattern position, so at worst O(len(text) * len(pattern) / word size).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import lru_cache

Matcher = Callable[[str], bool]

# Token kinds. A token sits at one NFA position; consuming a character either advances past it
# (literal, "?") or stays on it (the star loops), and stars also advance without consuming. An
# _OPTIONAL position consumes nothing: it stands before a "**" + separator pair and may either enter
# it or jump past both, which is how "**/" also matches nothing (the jump must not be reachable once
# the "**" has consumed a character, or "**/.env" would match "x.env").
_LITERAL, _ONE, _STAR, _DEEP, _OPTIONAL = range(5)


def is_literal(pattern: str) -> bool:
    """Whether ``pattern`` matches only itself (the cheap equality path, and "a literal beats a wildcard")."""
    return "*" not in pattern and "?" not in pattern


def _tokens(pattern: str, separator: str | None) -> list[tuple[int, str]]:
    tokens: list[tuple[int, str]] = []
    i, n = 0, len(pattern)
    while i < n:
        char = pattern[i]
        if char == "*":
            j = i
            while j < n and pattern[j] == "*":
                j += 1
            # Three or more stars count as "**"; with no separator there is nothing for "*" to stop at.
            tokens.append((_DEEP if j - i >= 2 or separator is None else _STAR, "*"))
            i = j
            continue
        tokens.append((_ONE, "?") if char == "?" else (_LITERAL, char))
        i += 1
    if separator is not None:
        # "**/**/" matches exactly what "**/" matches (nothing, or anything ending in the separator).
        # Folding the repeats keeps every chain of non-consuming moves at most three steps long, which is
        # what bounds the closure loop in the matcher below to a constant number of rounds.
        deep_sep = [(_DEEP, "*"), (_LITERAL, separator)]
        folded: list[tuple[int, str]] = []
        for token in tokens:
            folded.append(token)
            if len(folded) >= 4 and folded[-4:-2] == deep_sep and folded[-2:] == deep_sep:
                del folded[-2:]
        tokens = []  # and mark where each remaining "**" + separator pair may be skipped whole
        for position, token in enumerate(folded):
            if token == deep_sep[0] and folded[position + 1 : position + 2] == deep_sep[1:]:
                tokens.append((_OPTIONAL, ""))
            tokens.append(token)
    return tokens


@lru_cache(maxsize=4096)
def compile_glob(pattern: str, separator: str | None = "/") -> Matcher:
    """A matcher for the whole of a text against ``pattern`` (see the module docstring for the syntax)."""
    if separator is not None and len(separator) != 1:
        # "?" is "one character other than the separator": only meaningful for a one-character separator.
        raise ValueError(f"separator must be one character or None, not {separator!r}")
    if is_literal(pattern):
        return lambda text: text == pattern
    tokens = _tokens(pattern, separator)
    if tokens == [(_DEEP, "*")]:  # "**" (or "*" without a separator): everything
        return lambda text: True

    advance: dict[str, int] = {}  # char -> positions that consume it and move on (literals)
    one = stay_deep = stay_star = 0  # positions of "?", "**" and "*"
    optional = 0  # positions before a "**" + separator pair (see _OPTIONAL)
    for position, (kind, char) in enumerate(tokens):
        bit = 1 << position
        if kind == _LITERAL:
            advance[char] = advance.get(char, 0) | bit
        elif kind == _ONE:
            one |= bit
        elif kind == _DEEP:
            stay_deep |= bit
        elif kind == _STAR:
            stay_star |= bit
        else:
            optional |= bit
    stars = stay_deep | stay_star
    accept = 1 << len(tokens)

    # Per character: (positions that consume it and advance, positions that consume it and stay).
    # Every character not in the pattern behaves alike, so it shares the default entry.
    default = (one, stars)
    steps: dict[str, tuple[int, int]] = {char: (mask | one, stars) for char, mask in advance.items()}
    if separator is not None:
        steps[separator] = (advance.get(separator, 0), stay_deep)

    def closure(states: int) -> int:
        # Stars and optional positions may be passed without consuming anything. After _tokens' folding
        # no chain of such moves is longer than three, so this loop runs a bounded number of rounds.
        while True:
            entering = states & optional
            wider = states | ((states & stars) << 1) | (entering << 1) | (entering << 3)
            if wider == states:
                return states
            states = wider

    start = closure(1)

    def match(text: str) -> bool:
        states = start
        get = steps.get
        for char in text:
            moving, staying = get(char, default)
            states = closure(((states & moving) << 1) | (states & staying))
            if not states:
                return False
        return bool(states & accept)

    return match


def matches_any(patterns: Iterable[str], text: str, separator: str | None = "/") -> str | None:
    """The first of ``patterns`` that matches ``text``, or None: callers name it in denial reasons."""
    for pattern in patterns:
        if compile_glob(pattern, separator)(text):
            return pattern
    return None
