"""Who is asking, after authentication."""

from __future__ import annotations

from dataclasses import dataclass

from policies.patterns import CapabilitySet


@dataclass(frozen=True, slots=True)
class Principal:
    name: str
    capabilities: CapabilitySet
    anonymous: bool = False


ANONYMOUS_ALL = Principal("anonymous", CapabilitySet(["*"]), anonymous=True)
