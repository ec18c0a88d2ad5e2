"""What the gateway knows of an MCPC client: the facet ``session.mcpc`` (None: not an MCPC client).

A client becomes an MCPC client by calling a handshake tool on the gateway (any version's name);
the gateway answers it itself (gateway/mcpc/calls.py) and from then on delivers its tasks'
messages as ``MCPC_CALLBACK`` responses on the session's own stream. The facet remembers the
version the client speaks and the last MCPC session id it named (server events carry it).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class McpcClient:
    version: str
    provider: str | None
    handshake: str  # the tool name the client called
    session_id: str | None = None  # the last session id the client's calls named
