"""A legacy session's shared state as a record any replica can restore (issue 14, ADR 0016).

What a replica needs to serve a request of a session it did not create: who it belongs to (the
credentials it was opened with: each request is still held to its own credential), the view, the
negotiated version and codec, what the client declared (info and capabilities, from which the
MCPL and MGP facets are derived again), whether it finished initializing, its log level, its
resource subscriptions, its MCPC handshake, and which replica holds its standalone stream.

Invariants: a record is plain JSON (``FORMAT`` versioned; an unknown format is not restored); the
fingerprint changes whenever a field of the record would, so a replica writes only on change;
restoring never trusts the record for authorization (the principal is resolved again from the
credentials by the live registry, and every request presents its own credential).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from adapters import codecs
from gateway.events import Dialect
from gateway.mcpc.client import McpcClient
from policies.auth import Credentials
from policies.scopes import ScopeRules

if TYPE_CHECKING:
    from gateway.mcpl.state import McplSession
    from gateway.sessions import ClientSession

FORMAT: Final = 1
_CODECS: Final[dict[str, codecs.ClientCodec]] = {c.name: c for c in (codecs.LEGACY, codecs.DRAFT, codecs.MODERN)}


def record_of(session: ClientSession, holder: str | None) -> dict[str, Any]:
    creds = session.credentials
    mcpc = session.mcpc
    return {
        "format": FORMAT,
        "transport": session.transport,
        "view": session.view.name,
        "credentials": {
            "kind": creds.kind,
            "name": creds.name,
            "token_capabilities": list(creds.token_capabilities) if creds.token_capabilities is not None else None,
            "expires": creds.expires,
            "topic": creds.topic,
        },
        "protocol_version": session.protocol_version,
        "codec": session.codec.name,
        "client_info": session.client_info,
        "client_capabilities": session.client_capabilities,
        "dialects": sorted(d.value for d in session.dialects),
        "initialized": session.initialized,
        "log_level": session.log_level,
        "subscriptions": sorted([backend, uri] for backend, uri in session.subscriptions),
        "mcpc": None
        if mcpc is None
        else {
            "version": mcpc.version,
            "provider": mcpc.provider,
            "handshake": mcpc.handshake,
            "session_id": mcpc.session_id,
        },
        "mcpl": None if session.mcpl is None else _mcpl_record(session.mcpl),
        "holder": holder,
    }


def _mcpl_record(facet: McplSession) -> dict[str, Any]:
    return {
        "selection": [[pattern, state] for pattern, state in facet.selection.snapshot().items()],
        "scopes": {
            name: {"whitelist": list(r.whitelist), "blacklist": list(r.blacklist)} for name, r in facet.scopes.items()
        },
        "approvals": [list(key) for key in facet.approvals],
    }


def _mcpl_fingerprint(facet: McplSession) -> tuple[Any, ...]:
    return tuple(facet.selection.snapshot().items()), len(facet.scopes), len(facet.approvals)


def fingerprint(session: ClientSession) -> tuple[Any, ...]:
    """Cheap: what the record of ``session`` depends on that changes after ``initialize``."""
    mcpc = session.mcpc
    return (
        session.protocol_version,
        session.initialized,
        session.log_level,
        session.codec.name,
        len(session.subscriptions),
        None if mcpc is None else (mcpc.version, mcpc.session_id),
        None if session.mcpl is None else _mcpl_fingerprint(session.mcpl),
    )


def credentials_of(record: dict[str, Any]) -> Credentials | None:
    raw = record.get("credentials")
    if record.get("format") != FORMAT or not isinstance(raw, dict):
        return None
    kind, name = raw.get("kind"), raw.get("name")
    if not isinstance(kind, str) or not isinstance(name, str):
        return None
    caps = raw.get("token_capabilities")
    expires = raw.get("expires")
    topic = raw.get("topic")
    return Credentials(
        kind,
        name,
        tuple(str(c) for c in caps) if isinstance(caps, list) else None,
        float(expires) if isinstance(expires, int | float) else None,
        topic if isinstance(topic, str) else None,
    )


def apply(session: ClientSession, record: dict[str, Any]) -> None:
    """Bring ``session`` (a local copy) up to ``record``'s state, in place (calls in flight keep it)."""
    version = record.get("protocol_version")
    session.protocol_version = version if isinstance(version, str) else None
    codec = _CODECS.get(str(record.get("codec")))
    if codec is not None:
        session.codec = codec
    info, caps = record.get("client_info"), record.get("client_capabilities")
    session.client_info = info if isinstance(info, dict) else {}
    session.client_capabilities = caps if isinstance(caps, dict) else {}
    dialects = record.get("dialects")
    if isinstance(dialects, list):
        known = {d.value: d for d in Dialect}
        session.dialects = frozenset(known[d] for d in dialects if d in known) or frozenset({Dialect.MCP})
    session.initialized = record.get("initialized") is True
    level = record.get("log_level")
    session.log_level = level if isinstance(level, str) else None
    subs = record.get("subscriptions")
    if isinstance(subs, list):
        session.subscriptions = {
            (s[0], s[1]) for s in subs if isinstance(s, list) and len(s) == 2 and all(isinstance(x, str) for x in s)
        }
    mcpc = record.get("mcpc")
    if isinstance(mcpc, dict) and isinstance(mcpc.get("version"), str):
        session.mcpc = McpcClient(
            mcpc["version"],
            mcpc.get("provider") if isinstance(mcpc.get("provider"), str) else None,
            str(mcpc.get("handshake") or ""),
            mcpc.get("session_id") if isinstance(mcpc.get("session_id"), str) else None,
        )
    elif mcpc is None:
        session.mcpc = None
    mcpl = record.get("mcpl")
    if session.mcpl is not None and isinstance(mcpl, dict):
        apply_mcpl(session.mcpl, mcpl)


def apply_mcpl(facet: McplSession, record: dict[str, Any]) -> None:
    """An MCPL host's feature-set choices and scope rules as another replica recorded them."""
    selection = record.get("selection")
    if isinstance(selection, list):
        facet.selection.restore((s[0], s[1]) for s in selection if isinstance(s, list) and len(s) == 2)
    scopes = record.get("scopes")
    if isinstance(scopes, dict):
        facet.scopes = {name: ScopeRules.from_wire(rules) for name, rules in scopes.items() if isinstance(name, str)}
    approvals = record.get("approvals")
    if isinstance(approvals, list):
        facet.approvals.clear()
        for item in approvals:
            if isinstance(item, list) and len(item) == 3 and all(isinstance(part, str) for part in item):
                facet.approve(item[0], item[1], item[2])  # bounded like the host's own (MAX_APPROVALS)


def initialize_params(session: ClientSession) -> dict[str, Any]:
    """The ``initialize`` params the facets are derived from again on a replica that restores it."""
    return {
        "protocolVersion": session.protocol_version,
        "capabilities": session.client_capabilities,
        "clientInfo": session.client_info,
    }
