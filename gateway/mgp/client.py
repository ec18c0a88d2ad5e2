"""What the gateway remembers about one client that negotiated MGP with it (``session.mgp``).

A client negotiates MGP by sending its MGP object: in ``initialize`` (legacy era,
``capabilities.mgp`` or ``capabilities.experimental.mgp``, MGP_SECURITY.md §2.2) or in each
request's ``_meta["io.modelcontextprotocol/clientCapabilities"].extensions["dev.cloto/mgp"]``
(2026-07-28 era, §2.6; the facet then lives for that one exchange, like the session). The gateway
speaks to it in the highest version both support (§2.5) with the intersection of the extensions
(§2.4). A session without this facet is a plain MCP client and never sees an MGP field.

Invariants: the facet is set once per session (legacy: at initialize; modern: from the envelope)
and never changes after; ``active`` holds canonical (split) names only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from adapters.mgp import caps, extensions, versions

if TYPE_CHECKING:
    from gateway.mgp.tool_session import ToolSession


@dataclass(slots=True, eq=False)
class MgpClient:
    negotiation: versions.Negotiation
    active: frozenset[str]
    modern: bool
    # Where the client put its object in initialize (answered in the same place, §2.3 SDK note).
    experimental: bool = False
    # §16.7: the tools this client's LLM context holds (made on first use by the discovery service).
    tool_session: ToolSession | None = None
    # §13.2: channels this client subscribed to with mgp/events/subscribe.
    channels: set[str] = field(default_factory=set)
    # §1.6.2: per-client sequence numbers of the gateway's notifications/mgp.event to it.
    event_seq: int = 0

    @property
    def version(self) -> str:
        return self.negotiation.version

    @property
    def draft(self) -> bool:
        """Kernel tools, the rejection envelope and ``mgp.*`` names (0.5 and later)."""
        return self.negotiation.draft

    def wants(self, extension: str) -> bool:
        """Whether ``extension`` (canonical name) is active for this client."""
        return extension in self.active

    def capability(self, server_extensions: frozenset[str], **fields: Any) -> dict[str, Any]:
        """The gateway's MGP object for this client, in its version's names (§2.3)."""
        return caps.build(self.version, extensions.active(self.active, server_extensions), **fields)


def negotiate_client(
    raw: dict[str, Any], ours: frozenset[str], *, modern: bool, experimental: bool = False
) -> MgpClient:
    """The facet for a client that declared ``raw`` (its MGP object): version and active set."""
    declared = caps.parse(raw)
    negotiation = versions.negotiate(versions.SUPPORTED, declared.version, peer="client")
    return MgpClient(negotiation, extensions.active(declared.extensions, ours), modern, experimental)
