"""Where MGP's capability object sits in each era, reading and writing it, and permission grants.

Legacy era (``initialize``, seed §2.2-§2.3, MGP_SECURITY.md §2.2-§2.3): ``capabilities.mgp``; servers
built on the Python SDK can only answer under ``capabilities.experimental.mgp`` (§2.3 SDK note,
WIRE.md), so both are read, the top level first. Modern era (MCP 2026-07-28, §2.6): the extension
``dev.cloto/mgp`` in the ``extensions`` map of the ``server/discover`` result's capabilities, and,
from a client, in each request's ``_meta["io.modelcontextprotocol/clientCapabilities"]``. The object
is the same in every place: ``{version, extensions, permissions_required?, server_id?,
trust_level?}``. The two carriers are era-bound and never mixed in one message (§2.6 rule 4).

Grants (§3.6): ``mgp/permission/grant`` carries ``grants`` as ``{perm: "approved"}`` or
``{perm: {"decision": "approved", "scope": {...}}}``; both are read, the object form is written
(as the real kernel does). Toward a modern backend, grants travel per request in
``_meta["dev.cloto/mgp/grants"]`` (§3.8 rule 3).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from adapters.mgp import extensions, versions

CAPABILITY_KEY = "mgp"
EXTENSION_ID = "dev.cloto/mgp"
GRANTS_META_KEY = "dev.cloto/mgp/grants"
CLIENT_CAPABILITIES_META_KEY = "io.modelcontextprotocol/clientCapabilities"
DECISIONS = ("approved", "denied", "deferred")


@dataclass(frozen=True, slots=True)
class MgpCapability:
    """One side's MGP declaration, read leniently (wrong types are dropped, never fatal)."""

    version: str | None
    extensions: frozenset[str]  # canonical (split) names
    permissions_required: tuple[str, ...] = ()
    server_id: str | None = None
    trust_level: str | None = None  # as declared: informational only (§2.3 note)
    raw: Mapping[str, Any] = field(default_factory=dict)


def _dict(value: object) -> dict[str, Any] | None:
    return value if isinstance(value, dict) else None


def find(message_part: Mapping[str, Any]) -> dict[str, Any] | None:
    """The raw MGP object of initialize params/result, a ``server/discover`` result, or a modern
    request's params, wherever the era puts it; None when absent (the peer is plain MCP)."""
    caps = _dict(message_part.get("capabilities"))
    if caps is not None:
        for found in (caps.get(CAPABILITY_KEY), (_dict(caps.get("experimental")) or {}).get(CAPABILITY_KEY)):
            if isinstance(found, dict):
                return found
        found = (_dict(caps.get("extensions")) or {}).get(EXTENSION_ID)
        if isinstance(found, dict):
            return found
    return from_request_meta(message_part)


def from_request_meta(params: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ``dev.cloto/mgp`` object a modern client declared in one request's ``_meta``."""
    meta = _dict(params.get("_meta")) or {}
    client_caps = _dict(meta.get(CLIENT_CAPABILITIES_META_KEY)) or {}
    found = (_dict(client_caps.get("extensions")) or {}).get(EXTENSION_ID)
    return found if isinstance(found, dict) else None


def parse(raw: Mapping[str, Any]) -> MgpCapability:
    version = raw.get("version") if isinstance(raw.get("version"), str) else None
    server_id = raw.get("server_id")
    trust = raw.get("trust_level")
    return MgpCapability(
        version=version,
        extensions=extensions.canonical(raw.get("extensions"), version),
        permissions_required=tuple(extensions.names(raw.get("permissions_required"))),
        server_id=server_id if isinstance(server_id, str) else None,
        trust_level=trust if isinstance(trust, str) else None,
        raw=dict(raw),
    )


def read(message_part: Mapping[str, Any]) -> MgpCapability | None:
    raw = find(message_part)
    return parse(raw) if raw is not None else None


def build(
    version: str,
    active: Iterable[str],
    *,
    permissions_required: Iterable[str] | None = None,
    server_id: str | None = None,
    trust_level: str | None = None,
) -> dict[str, Any]:
    """The MGP object to announce, in ``version``'s names (semver version, sorted extensions)."""
    obj: dict[str, Any] = {"version": versions.wire(version), "extensions": extensions.to_wire(active, version)}
    if permissions_required is not None:
        obj["permissions_required"] = list(permissions_required)
    if server_id is not None:
        obj["server_id"] = server_id
    if trust_level is not None:
        obj["trust_level"] = trust_level
    return obj


def put_legacy(capabilities: dict[str, Any], obj: Mapping[str, Any], *, experimental: bool = False) -> None:
    """Write the object into an initialize ``capabilities`` (``mgp``, or ``experimental.mgp``)."""
    if experimental:
        capabilities.setdefault("experimental", {})[CAPABILITY_KEY] = dict(obj)
    else:
        capabilities[CAPABILITY_KEY] = dict(obj)


def put_discover(result: dict[str, Any], obj: Mapping[str, Any]) -> None:
    """Advertise the object in a ``server/discover`` result (§2.6 server -> client)."""
    result.setdefault("capabilities", {}).setdefault("extensions", {})[EXTENSION_ID] = dict(obj)


def put_request(params: dict[str, Any], obj: Mapping[str, Any]) -> None:
    """Declare the object in one modern request's client capabilities (§2.6 client -> server)."""
    meta = params.setdefault("_meta", {})
    client_caps = meta.setdefault(CLIENT_CAPABILITIES_META_KEY, {})
    client_caps.setdefault("extensions", {})[EXTENSION_ID] = dict(obj)


def answer(client: Mapping[str, Any] | None, ours: Iterable[str], version: str, **fields: Any) -> dict[str, Any] | None:
    """The object to answer a client with: None when it sent none (§2.4 rule 3), else the active
    set (intersection with ``ours``) in the names of the negotiated ``version``."""
    if client is None:
        return None
    theirs = extensions.canonical(
        client.get("extensions"), client.get("version") if isinstance(client.get("version"), str) else None
    )
    return build(version, extensions.active(theirs, ours), **fields)


# ---- grants (§3.6, §3.8) -------------------------------------------------------------------------


def normalize_grants(grants: object) -> dict[str, dict[str, Any]]:
    """``{perm: {"decision", "scope"?}}`` from either grant form; entries with no known decision are
    dropped (a server MUST treat absent grants as ungranted, §3.8)."""
    out: dict[str, dict[str, Any]] = {}
    if not isinstance(grants, dict):
        return out
    for perm, value in grants.items():
        if not isinstance(perm, str):
            continue
        if isinstance(value, str) and value in DECISIONS:
            out[perm] = {"decision": value}
        elif isinstance(value, dict) and value.get("decision") in DECISIONS:
            entry: dict[str, Any] = {"decision": value["decision"]}
            if isinstance(value.get("scope"), dict):
                entry["scope"] = value["scope"]
            out[perm] = entry
    return out


def approved(grants: object) -> frozenset[str]:
    return frozenset(perm for perm, entry in normalize_grants(grants).items() if entry["decision"] == "approved")


def grant_params(
    request_id: str,
    grants: Mapping[str, str | Mapping[str, Any]],
    *,
    approved_by: str | None = None,
    expires_at: str | None = None,
) -> dict[str, Any]:
    """Params of ``mgp/permission/grant`` in the object form (§3.6)."""
    params: dict[str, Any] = {"request_id": request_id, "grants": normalize_grants(dict(grants))}
    if approved_by is not None:
        params["approved_by"] = approved_by
    if expires_at is not None:
        params["expires_at"] = expires_at
    return params


def put_grants(params: dict[str, Any], grants: Mapping[str, Any] | str) -> None:
    """Attach grants (the §3.6 object, or an opaque server-minted handle) to a modern request."""
    value: Any = grants if isinstance(grants, str) else normalize_grants(dict(grants))
    params.setdefault("_meta", {})[GRANTS_META_KEY] = value


def read_grants(params: Mapping[str, Any]) -> dict[str, dict[str, Any]] | str | None:
    """The grants a modern request carries: normalised object form, a handle string, or None."""
    meta = _dict(params.get("_meta")) or {}
    value = meta.get(GRANTS_META_KEY)
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return normalize_grants(value)
    return None
