"""MCPC library versions, and what each one puts on the wire (shared/notes/WIRE.md "MCPC").

- handshake tool: ``_mcpc_init`` from 0.2.5, ``_is_mcpc_enabled`` in 0.2.3-0.2.4, ``is_mcpc_enabled``
  up to 0.2.2;
- per-call metadata: ``mcpc_params`` from 0.2.5, ``_metadata`` before.

Invariant: a version that is missing or unreadable counts as :data:`LIBRARY_VERSION`, the newest
release (so a peer that says nothing useful gets the current wire). Versions compare numerically,
component by component, with missing components as 0 (``0.2`` == ``0.2.0``); a suffix after the
numbers (``0.2.5rc1``, ``-dev``) is ignored. Nothing here raises.
"""

from __future__ import annotations

import re
from typing import Any, Final

LIBRARY_VERSION: Final = "0.2.6"
"""The last release of the ``mcpc`` library (PyPI)."""

PARAMS_SINCE: Final = (0, 2, 5)
"""First version with ``_mcpc_init`` and ``mcpc_params``."""
UNDERSCORE_HANDSHAKE_SINCE: Final = (0, 2, 3)
"""First version with ``_is_mcpc_enabled`` (before: ``is_mcpc_enabled`` with ``{}``)."""

_VERSION = re.compile(r"\s*[vV]?(\d+(?:\.\d+)*)")
_MAX_DIGITS = 18


def parse_version(text: Any) -> tuple[int, ...] | None:
    """``"0.2.6"`` -> ``(0, 2, 6)``; None for anything that does not start with a version number."""
    if not isinstance(text, str):
        return None
    match = _VERSION.match(text)
    if match is None:
        return None
    parts = match.group(1).split(".")
    if any(len(part) > _MAX_DIGITS for part in parts):
        return None
    return tuple(int(part) for part in parts)


def effective_version(text: Any) -> tuple[int, ...]:
    """The parsed version, or :data:`LIBRARY_VERSION`'s when ``text`` is missing or unreadable."""
    parsed = parse_version(text)
    return parsed if parsed is not None else _LIBRARY


def _padded(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    width = max(len(a), len(b))
    return a + (0,) * (width - len(a)), b + (0,) * (width - len(b))


def compare_versions(a: Any, b: Any) -> int:
    """-1, 0 or 1 as version ``a`` is older than, equal to or newer than ``b`` (see the invariant)."""
    left, right = _padded(effective_version(a), effective_version(b))
    return (left > right) - (left < right)


def at_least(version: Any, minimum: tuple[int, ...] | str) -> bool:
    """Whether ``version`` is ``minimum`` or newer."""
    floor = parse_version(minimum) if isinstance(minimum, str) else minimum
    left, right = _padded(effective_version(version), floor or ())
    return left >= right


_LIBRARY: Final = (0, 2, 6)
