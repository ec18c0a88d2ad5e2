"""MGP extension names of both wires, canonicalisation both ways, and the active set.

The seed (0.3 §2.2) names nine extensions; 0.6 split two of them (MGP_SECURITY.md §2.2):
``security`` = ``permissions`` + ``tool_security``, ``bidirectional`` = ``callbacks`` + ``events``,
and gave progress reporting (the seed's §12.6, part of ``streaming``) its own ``progress``. The
draft also names ``error_handling`` and the real kernel sends ``delegation`` (§1.6.4).

Inside the gateway a set of extensions is always *canonical*: the split names. :func:`canonical`
reads any mix of both name sets (the real kernel sends split names whatever version it announces),
:func:`to_wire` writes a set in the names a peer of a given version uses. Unknown names are kept
unchanged both ways (custom extensions are negotiable too). The active set is the intersection of
the two sides' canonical sets (§2.4 rule 1); a client that sent no ``mgp`` gets none (rule 3).
"""

from __future__ import annotations

from collections.abc import Iterable

from adapters.mgp import versions

SEED_EXTENSIONS = (
    "security",
    "access_control",
    "audit",
    "code_safety",
    "lifecycle",
    "streaming",
    "bidirectional",
    "discovery",
    "tool_discovery",
)
DRAFT_EXTENSIONS = (
    "permissions",
    "tool_security",
    "access_control",
    "audit",
    "code_safety",
    "lifecycle",
    "streaming",
    "progress",
    "callbacks",
    "events",
    "discovery",
    "tool_discovery",
    "error_handling",
    "delegation",
)
# A seed name -> the draft names it stands for (read); the reverse is :data:`JOINED`.
SPLITS: dict[str, tuple[str, ...]] = {
    "security": ("permissions", "tool_security"),
    "bidirectional": ("callbacks", "events"),
}
JOINED = {part: whole for whole, parts in SPLITS.items() for part in parts}
# In the seed, progress reporting (§12.6) is part of ``streaming``.
_SEED_STREAMING = ("streaming", "progress")

# Everything the gateway itself can serve, canonical.
ALL = frozenset(DRAFT_EXTENSIONS)


def names(value: object) -> list[str]:
    """The string members of an ``extensions`` value (anything else on the wire is ignored)."""
    if not isinstance(value, list | tuple | set | frozenset):
        return []
    return [item for item in value if isinstance(item, str) and item]


def canonical(value: object, version: str | None = None) -> frozenset[str]:
    """The canonical (split) set for extension names of either wire. ``version`` below 0.6 (the
    seed's meaning) also reads ``streaming`` as including ``progress``."""
    seed_meaning = version is not None and not versions.at_least(version, versions.SPLIT_EXTENSIONS_SINCE)
    found: set[str] = set()
    for name in names(value):
        found.update(SPLITS.get(name, (name,)))
        if seed_meaning and name == "streaming":
            found.update(_SEED_STREAMING)
    return frozenset(found)


def to_wire(extensions: Iterable[str], version: str) -> list[str]:
    """A canonical set written in the names of ``version`` (sorted, for stable output).

    Below 0.6 a split pair is written as its seed name when any part of it is active (a seed peer
    can only say the whole), and ``progress`` travels inside ``streaming``; from 0.6 on the names
    are the split ones and a seed name that slipped in is split.
    """
    wanted = set(canonical(list(extensions)))
    if versions.at_least(version, versions.SPLIT_EXTENSIONS_SINCE):
        return sorted(wanted)
    out: set[str] = set()
    for name in wanted:
        if name == "progress":
            continue
        out.add(JOINED.get(name, name))
    return sorted(out)


def active(client: Iterable[str] | None, server: Iterable[str] | None) -> frozenset[str]:
    """The active set (§2.4 rule 1): the intersection of both sides' canonical sets; empty when
    either side did not declare MGP at all (rules 2 and 3)."""
    if client is None or server is None:
        return frozenset()
    return canonical(list(client)) & canonical(list(server))
