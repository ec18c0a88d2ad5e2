"""What a client of a view is told the server is: serverInfo, capabilities and instructions.

A single-backend view (``/servers/NAME/``) shows that backend's own identity (minus MCPL and MGP,
which the gateway speaks itself and shows only to the clients that asked); a federated view shows
the gateway's, with the experimental capabilities and instructions of its ready backends merged;
a virtual server shows its own, from its config (``View.own_identity``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from adapters import mcpl
from adapters.mgp import strip as mgp_strip
from gateway import __version__

if TYPE_CHECKING:
    from gateway.federation import View
    from gateway.upstreams.connection import BackendConnection

SERVER_INFO = {"name": "switchboard", "title": "Switchboard", "version": __version__}


class ServerIdentity:
    def __init__(self, connections: Mapping[str, BackendConnection], federated: View) -> None:
        self._connections = connections
        self._federated = federated

    def __call__(self, view: View) -> dict[str, Any]:
        """serverInfo, capabilities and instructions that a client of this view is shown."""
        own = view.own_identity()  # a virtual server's, from its config
        if own is not None:
            return own
        if len(view.backends) == 1 and view is not self._federated:
            conn = self._connections[view.backends[0]]
            if conn.state == "ready":
                result: dict[str, Any] = {
                    # MCPL is spoken by the gateway itself, and shown only to MCPL hosts (McplRelay).
                    "capabilities": mgp_strip.strip_capabilities(mcpl.without_mcpl(dict(conn.capabilities))),
                    "serverInfo": conn.server_info or SERVER_INFO,
                }
                if conn.init_result.get("instructions"):
                    result["instructions"] = conn.init_result["instructions"]
                return result
        capabilities: dict[str, Any] = {
            "logging": {},
            "completions": {},
            "tools": {"listChanged": True},
            "prompts": {"listChanged": True},
            "resources": {"subscribe": True, "listChanged": True},
        }
        experimental: dict[str, Any] = {}
        instructions: list[str] = []
        for name in view.backends:
            conn = self._connections[name]
            if conn.state != "ready":
                continue
            for key, value in (conn.capabilities.get("experimental") or {}).items():
                if key not in ("mcpl", "mgp"):
                    experimental.setdefault(key, value)
            text = conn.init_result.get("instructions")
            if isinstance(text, str) and text.strip():
                instructions.append(text.strip() if len(view.backends) == 1 else f"[{name}] {text.strip()}")
        if experimental:
            capabilities["experimental"] = experimental
        result = {"capabilities": capabilities, "serverInfo": SERVER_INFO}
        if instructions:
            result["instructions"] = "\n\n".join(instructions)
        return result
