"""MGP (Multi-Agent Gateway Protocol; the seed 0.3 and the draft line 0.5-0.8): the dialect's wire.

Specs: ``../shared/specs/mgp-0.3.md`` (the seed), Cloto-dev/mgp-spec ``docs/`` (the 0.8 draft:
MGP_SPEC.md §1, MGP_SECURITY.md §2-§7, MGP_COMMUNICATION.md §11-§14, MGP_DISCOVERY.md §15-§16),
``../shared/notes/WIRE.md`` (how the real kernel behaves). This package knows how MGP is *read and
written*; what may pass is decided in ``policies/``, who gets what in ``gateway/mgp/``.

Invariants:

- Each peer is spoken to in one version: the highest both support (``versions.negotiate``); a
  mismatch is logged, never fatal (§2.5).
- Capabilities are read wherever either era puts them (``capabilities.mgp``, then
  ``capabilities.experimental.mgp``, then ``extensions["dev.cloto/mgp"]`` of a ``server/discover``
  result, then a modern request's client capabilities; §2.2-2.3, §2.6) and written where the peer's
  era expects them (``caps``).
- Extension sets inside the gateway are canonical (the draft's split names); the seed's ``security``
  and ``bidirectional`` are read as their parts and written back for a seed peer (``extensions``).
  The active set is the intersection (§2.4 rule 1); a client that sent no ``mgp`` gets none (rule 3).
- The ``mgp.`` tool-name prefix belongs to kernel tools: a backend tool so named is withheld
  (§1.6.3, code 4003 ``TOOL_NAME_CONFLICT``) (``names``).
- Decisions use the kernel's ``effective_risk_level`` (§4.6), never the server's ``risk_level``
  (``security``).
- A policy refusal of a delivered tool call is a Tool Rejection result, not an error (§14.7)
  (``rejection``); the gateway's own MGP errors carry ``error.data._mgp`` (``gateway.errors``).
- A client that did not negotiate MGP never sees an MGP field (``strip``).

Submodules: ``versions``, ``extensions``, ``caps``, ``names``, ``security``, ``rejection``, ``strip``.
"""

from __future__ import annotations

from typing import Any

from adapters.mgp import audit_event, caps, extensions, names, rejection, security, strip, versions
from adapters.mgp.caps import MgpCapability as MgpCapability
from adapters.mgp.versions import Negotiation as Negotiation, negotiate as negotiate

# §14.3 (the numbers live in the one error table).
from gateway.errors import MgpCode as MgpCode, mgp_error_data as mgp_error_data
from gateway.events import Dialect, Event

__all__ = [
    "DIALECT",
    "MgpCapability",
    "MgpCode",
    "Negotiation",
    "annotate",
    "capabilities",
    "caps",
    "extensions",
    "mgp_error_data",
    "names",
    "negotiate",
    "rejection",
    "security",
    "speaks",
    "strip",
    "versions",
]

DIALECT = Dialect.MGP


def capabilities(params_or_result: dict[str, Any]) -> dict[str, Any] | None:
    """The raw MGP object of a message part, wherever its era puts it (None: plain MCP)."""
    return caps.find(params_or_result)


def speaks(initialize_params: dict[str, Any]) -> bool:
    return capabilities(initialize_params) is not None


def annotate(event: Event) -> None:
    if event.trace_id is None:
        event.trace_id = audit_event.trace_id_of(event.payload)  # §6.5: the client's trace id, audited as is
    params = event.params
    found = params.get("_mgp")
    if isinstance(found, dict):
        event.facets["mgp"] = found
    elif names.is_mgp_method(event.method) or names.is_mgp_notification(event.method):
        event.facets["mgp"] = {}
