"""MGP versions the gateway speaks, and the choice of the one each peer is spoken to in.

The seed (``../shared/specs/mgp-0.3.md``) is 0.3; the draft line (Cloto-dev/mgp-spec) is 0.5 to 0.8.
Each peer announces one version (``capabilities.mgp.version`` or the ``dev.cloto/mgp`` settings, as
semver such as ``"0.8.0"``). The gateway answers it in the highest version both support: the highest
of ours not above the peer's. Pre-1.0 minors may break (§2.5), so a peer whose minor differs from
our highest is a *mismatch*: logged with a warning, never fatal (§2.5 "SHOULD log a warning ... but SHOULD still attempt
connection"; WIRE.md: the real kernel does the same). A peer below every version of ours (0.1, 0.2)
is spoken to in the seed, the oldest wire we have.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass

log = logging.getLogger("switchboard.mgp")

SEED = "0.3"
DRAFT_LINE = ("0.5", "0.6", "0.7", "0.8")
SUPPORTED = (SEED, *DRAFT_LINE)
LATEST = SUPPORTED[-1]
# Milestones of the wire (CHANGELOG / MGP_GUIDE §18): 0.4 renamed the permission methods, 0.5 turned
# the kernel's operations into kernel tools and reserved ``mgp.*``, 0.6 split the extension names
# and changed trust levels, 0.8 added the 2026-07-28 era's ``dev.cloto/mgp`` extension.
PERMISSION_AWAIT_SINCE = (0, 4)
KERNEL_TOOLS_SINCE = (0, 5)
SPLIT_EXTENSIONS_SINCE = (0, 6)
REJECTION_ENVELOPE_SINCE = (0, 6)  # 0.6.1 (§14.7); a 0.6 peer is read as 0.6.1
MODERN_ERA_SINCE = (0, 8)
RESOURCE_NOT_FOUND_SINCE = (0, 8)  # §14.3.1: 4004 for an identifier that names nothing

_SEMVER = re.compile(r"^\s*v?(\d+)\.(\d+)(?:\.(\d+))?(?:[-+].*)?\s*$")


def parse(version: object) -> tuple[int, int] | None:
    """``(major, minor)`` of a version string (``"0.8"``, ``"0.8.0"``, ``"0.6.0-draft"``), or None."""
    if not isinstance(version, str):
        return None
    match = _SEMVER.match(version)
    return (int(match.group(1)), int(match.group(2))) if match else None


def short(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def wire(version: str) -> str:
    """The form a version is announced in on the wire (semver, ``"0.8"`` -> ``"0.8.0"``)."""
    parsed = parse(version)
    if parsed is None:
        raise ValueError(f"not an MGP version: {version!r}")
    return f"{short(parsed)}.0"


def at_least(version: str, milestone: tuple[int, int]) -> bool:
    parsed = parse(version)
    return parsed is not None and parsed >= milestone


def is_draft(version: str) -> bool:
    """Whether ``version`` speaks the draft's wire (kernel tools, rejection envelope, ``mgp.*``)."""
    return at_least(version, KERNEL_TOOLS_SINCE)


@dataclass(frozen=True, slots=True)
class Negotiation:
    """The outcome of :func:`negotiate` for one peer.

    ``version`` is the version the peer is spoken to in (one of ours, short form ``"0.8"``);
    ``ours`` is our highest offered; ``theirs`` is what the peer announced, as announced (None when
    absent); ``mismatch`` says ours and theirs differ in minor (or theirs was unreadable), which is
    logged and never fatal.
    """

    version: str
    ours: str
    theirs: str | None
    mismatch: bool
    reason: str = ""

    @property
    def draft(self) -> bool:
        return is_draft(self.version)

    @property
    def wire_version(self) -> str:
        return wire(self.version)


def negotiate(ours: str | Iterable[str], theirs: object, *, peer: str = "peer") -> Negotiation:
    """The version to speak to a peer that announced ``theirs``, given the versions we support
    (``ours``: one version, taken as our highest, or several). The highest both support is the
    highest of ours that is not above theirs; a peer below all of ours gets our lowest. Any
    difference from what the peer announced is a mismatch: logged as a warning, never fatal."""
    offered = _ours(ours)
    announced = theirs if isinstance(theirs, str) else None
    parsed = parse(theirs)
    top = offered[-1]
    if parsed is None:
        chosen = offered[0]
        reason = f"{peer} announced an unreadable version {theirs!r}; speaking {short(chosen)}"
    else:
        below = [version for version in offered if version <= parsed]
        chosen = below[-1] if below else offered[0]
        reason = (
            "" if parsed == top else f"{peer} announced {short(parsed)}, ours is {short(top)}; speaking {short(chosen)}"
        )
    result = Negotiation(short(chosen), short(top), announced, bool(reason), reason)
    if result.mismatch:
        log.warning("MGP version mismatch with %s: %s", peer, reason)
    return result


def _ours(ours: str | Iterable[str]) -> list[tuple[int, int]]:
    if isinstance(ours, str):
        top = parse(ours)
        if top is None:
            raise ValueError(f"not an MGP version: {ours!r}")
        candidates = [version for version in map(parse, SUPPORTED) if version is not None and version <= top]
        if not candidates:
            raise ValueError(f"no supported MGP version at or below {ours!r}")
        return candidates
    parsed = sorted({version for version in map(parse, ours) if version is not None})
    if not parsed:
        raise ValueError("no MGP version offered")
    return parsed
