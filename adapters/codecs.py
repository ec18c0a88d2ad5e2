"""How the gateway speaks to one client session: the client's dialect of MCP, as one object.

A session's codec is chosen once: at ``initialize`` (the legacy era, or the seed draft when the
client introduced itself with the draft's ``mcpVersion``) or from the request envelope (the
2026-07-28 era, whose every request is its own session). Everything the gateway does differently
for a dialect asks the codec, never a flag on the session:

- ``modern``: the 2026-07-28 era. The server never sends a request to such a client (requests for
  input become ``input_required`` results, gateway/eras.py); its streams are not resumable; it
  gets logs only at the level its envelope asked for.
- ``render``: how a message looks on this client's wire (the draft's names and shapes).
- ``result``: only the result fields of the client's era (a legacy client never sees
  ``resultType`` or caching hints).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from adapters import mcp_draft, mcp_modern

CodecName = Literal["legacy", "draft", "modern"]

# The result fields only the modern era has (what mcp_modern.strip_modern_fields removes).
_MODERN_FIELDS = frozenset({"resultType", "ttlMs", "cacheScope"})


@dataclass(frozen=True, slots=True)
class ClientCodec:
    name: CodecName
    modern: bool
    # What the era implies, stored at construction: read per call, where a property costs a Python frame.
    # Whether the client can be sent a request (sampling, elicitation, roots) while its call runs.
    asks_mid_request: bool = field(init=False, repr=False, compare=False)
    # Before the client chose a level: legacy leaves logging to the server; modern asked for none.
    logs_by_default: bool = field(init=False, repr=False, compare=False)
    # Whether a response stream can be resumed with ``Last-Event-ID`` (a legacy session's).
    resumable_streams: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        legacy = not self.modern
        object.__setattr__(self, "asks_mid_request", legacy)
        object.__setattr__(self, "logs_by_default", legacy)
        object.__setattr__(self, "resumable_streams", legacy)

    def render(self, message: dict[str, Any]) -> dict[str, Any] | None:
        """A message as this client expects it on the wire (None: not for it)."""
        if self.name == "draft":
            return mcp_draft.render_outbound(message)
        return message

    def result(self, result: Any) -> Any:
        """A backend's result with only the fields of this client's era."""
        if self.modern or (isinstance(result, dict) and _MODERN_FIELDS.isdisjoint(result)):
            return result  # the common case, decided in C: nothing to strip
        return mcp_modern.strip_modern_fields(result)


LEGACY = ClientCodec("legacy", modern=False)
DRAFT = ClientCodec("draft", modern=False)
MODERN = ClientCodec("modern", modern=True)
