"""Tool security metadata (§4), trust levels and ``effective_risk_level`` (draft §4.6).

A tool's ``security`` block (seed §4.2-4.3; MGP_SECURITY.md §4.3) is read leniently: a field of the
wrong type is dropped, unknown keys are kept for relay. ``risk_level``, ``side_effects`` and
``reversible`` are the server's self-declaration and *informational*; ``effective_risk_level`` is
the kernel's and authoritative (§4.3): it is what decisions use.

Trust levels are the draft's ``core | standard | experimental | untrusted`` (§2.3, 0.6+); the seed's
``trusted | standard | sandboxed`` are read as ``core | standard | untrusted``. A server's declared
level is informational: the kernel's (configured) level governs, and a declaration can only lower
it (a server declaring more than the kernel grants is downgraded, §2.3 note).

``effective_risk_level = max(trust, validator, permissions)`` with ``safe < moderate < dangerous``
and the three mapping tables of §4.6, verbatim. The draft's validator table covers declared values;
a tool with *no* validator contributes nothing, while an unknown validator name (one the kernel
cannot apply) counts as ``none`` (dangerous), failing closed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

RISK_LEVELS = ("safe", "moderate", "dangerous")
TRUST_LEVELS = ("core", "standard", "experimental", "untrusted")  # most to least trusted
SEED_TRUST_LEVELS = {"trusted": "core", "standard": "standard", "sandboxed": "untrusted"}
DEFAULT_TRUST = "standard"
VALIDATORS = ("sandbox", "readonly", "network_restricted", "code_safety", "none")
SIDE_EFFECTS = ("filesystem", "network", "process", "database", "notification")
CODE_SAFETY_LEVELS = ("unrestricted", "standard", "strict", "readonly")  # §7.2

# §4.6 mapping tables.
RISK_FROM_TRUST = {"core": "safe", "standard": "moderate", "experimental": "dangerous", "untrusted": "dangerous"}
RISK_FROM_VALIDATOR = {
    "readonly": "safe",
    "sandbox": "moderate",
    "network_restricted": "moderate",
    "code_safety": "moderate",
    "none": "dangerous",
}
DANGEROUS_PERMISSIONS = frozenset({"shell.execute", "code_execution"})
MODERATE_PERMISSIONS = frozenset({"filesystem.write"})

_FIELDS = (
    "risk_level",
    "effective_risk_level",
    "permissions_required",
    "side_effects",
    "validator",
    "reversible",
    "confirmation_required",
    "code_safety",
)


def max_risk(*levels: str) -> str:
    return RISK_LEVELS[max(RISK_LEVELS.index(level) for level in levels)] if levels else "safe"


def normalize_trust(level: object) -> str | None:
    """A trust level of either wire in the draft's names; None for anything unknown."""
    if not isinstance(level, str):
        return None
    if level in TRUST_LEVELS:
        return level
    return SEED_TRUST_LEVELS.get(level)


def effective_trust(configured: object, declared: object = None) -> str:
    """The trust level the gateway holds a backend to: the configured one (default ``standard``),
    lowered by the server's own declaration when that is lower, never raised by it."""
    kernel = normalize_trust(configured) or DEFAULT_TRUST
    own = normalize_trust(declared)
    if own is not None and TRUST_LEVELS.index(own) > TRUST_LEVELS.index(kernel):
        return own
    return kernel


def risk_from_permissions(permissions: tuple[str, ...] | list[str] | frozenset[str]) -> str:
    if DANGEROUS_PERMISSIONS.intersection(permissions):
        return "dangerous"
    if MODERATE_PERMISSIONS.intersection(permissions):
        return "moderate"
    return "safe"


def effective_risk_level(trust_level: object, validator: object, permissions: tuple[str, ...] | list[str]) -> str:
    """§4.6: ``max(derive_from_trust_level, derive_from_validator, derive_from_permissions)``."""
    trust = normalize_trust(trust_level) or "untrusted"
    levels = [RISK_FROM_TRUST[trust], risk_from_permissions(tuple(permissions))]
    if isinstance(validator, str):
        levels.append(RISK_FROM_VALIDATOR.get(validator, "dangerous"))
    return max_risk(*levels)


@dataclass(frozen=True, slots=True)
class SecurityMeta:
    """A normalised ``security`` block; ``None`` fields were absent (or unusable) on the wire."""

    risk_level: str | None = None
    permissions_required: tuple[str, ...] = ()
    side_effects: tuple[str, ...] = ()
    validator: str | None = None
    reversible: bool | None = None
    confirmation_required: bool | None = None
    code_safety: Mapping[str, Any] | None = None
    effective_risk_level: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.risk_level is not None:
            out["risk_level"] = self.risk_level
        if self.effective_risk_level is not None:
            out["effective_risk_level"] = self.effective_risk_level
        if self.permissions_required:
            out["permissions_required"] = list(self.permissions_required)
        if self.side_effects:
            out["side_effects"] = list(self.side_effects)
        for key in ("validator", "reversible", "confirmation_required"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.code_safety is not None:
            out["code_safety"] = dict(self.code_safety)
        out.update({key: value for key, value in self.extra.items() if key not in out})
        return out


def _strs(value: object) -> tuple[str, ...]:
    if not isinstance(value, list | tuple):
        return ()
    return tuple(item for item in value if isinstance(item, str) and item)


def _code_safety(value: object) -> dict[str, Any] | None:
    """§7.3's block: ``level`` must be one of §7.2's; the lists and size are kept when well typed."""
    if not isinstance(value, dict):
        return None
    out: dict[str, Any] = {}
    if value.get("level") in CODE_SAFETY_LEVELS:
        out["level"] = value["level"]
    if isinstance(value.get("language"), str):
        out["language"] = value["language"]
    size = value.get("max_code_size_bytes")
    if isinstance(size, int) and not isinstance(size, bool) and size >= 0:
        out["max_code_size_bytes"] = size
    for key in ("blocked_imports", "blocked_patterns", "allowed_imports"):
        if key in value and isinstance(value[key], list):
            out[key] = list(_strs(value[key]))
    return out


def parse_security(raw: object) -> SecurityMeta | None:
    """A ``security`` block (from ``tools/list`` or config) normalised; None if it is not an object."""
    if not isinstance(raw, dict):
        return None
    risk = raw.get("risk_level")
    effective = raw.get("effective_risk_level")
    validator = raw.get("validator")
    reversible = raw.get("reversible")
    confirm = raw.get("confirmation_required")
    return SecurityMeta(
        risk_level=risk if risk in RISK_LEVELS else None,
        permissions_required=_strs(raw.get("permissions_required")),
        side_effects=_strs(raw.get("side_effects")),
        validator=validator if isinstance(validator, str) and validator else None,
        reversible=reversible if isinstance(reversible, bool) else None,
        confirmation_required=confirm if isinstance(confirm, bool) else None,
        code_safety=_code_safety(raw.get("code_safety")),
        effective_risk_level=effective if effective in RISK_LEVELS else None,
        extra={key: value for key, value in raw.items() if key not in _FIELDS},
    )


def merge(declared: SecurityMeta | None, configured: SecurityMeta | None) -> SecurityMeta | None:
    """The backend's declaration with the operator's configuration on top, field by field (config
    is the kernel's authority: ``validator`` comes "from mcp.toml", §4.3)."""
    if declared is None or configured is None:
        return configured or declared
    fields: dict[str, Any] = {}
    for key in _FIELDS:
        mine, theirs = getattr(configured, key), getattr(declared, key)
        fields[key] = mine if mine not in (None, ()) else theirs
    fields["effective_risk_level"] = None  # the kernel's, recomputed by ``assess``
    return SecurityMeta(**fields, extra={**declared.extra, **configured.extra})


def assess(meta: SecurityMeta | None, trust_level: object) -> SecurityMeta:
    """``meta`` with the kernel's ``effective_risk_level`` set (§4.6), and ``confirmation_required``
    forced on for a dangerous tool (the kernel MAY override it to true, §4.3)."""
    meta = meta or SecurityMeta()
    effective = effective_risk_level(trust_level, meta.validator, meta.permissions_required)
    confirm = True if effective == "dangerous" else meta.confirmation_required
    return SecurityMeta(
        risk_level=meta.risk_level,
        permissions_required=meta.permissions_required,
        side_effects=meta.side_effects,
        validator=meta.validator,
        reversible=meta.reversible,
        confirmation_required=confirm,
        code_safety=meta.code_safety,
        effective_risk_level=effective,
        extra=meta.extra,
    )


def secure_tool(tool: Mapping[str, Any], trust_level: object, configured: SecurityMeta | None = None) -> dict[str, Any]:
    """A copy of a ``tools/list`` entry whose ``security`` is the backend's declaration merged with
    the operator's (``configured``) and assessed by the kernel (``effective_risk_level``)."""
    meta = assess(merge(parse_security(tool.get("security")), configured), trust_level)
    return {**tool, "security": meta.to_wire()}
