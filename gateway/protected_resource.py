"""Which protected resource (RFC 9728) a request path belongs to: its id, its metadata URL, its audience.

The gateway is one resource (its federated doors: /mcp, /sse, /messages, /mcp/ws, ...) and each
backend's own doors (/servers/NAME/mcp, /servers/NAME/mcp/ws, /servers/NAME/sse,
/servers/NAME/messages) are another, identified as ``BASE/servers/NAME/mcp``. Invariants:

- The metadata of a resource is at ``/.well-known/oauth-protected-resource`` + the resource's path
  (RFC 9728 §3.1, path insertion); the gateway's own keeps the bare well-known path it always had
  (its path variant ``.../oauth-protected-resource/mcp`` answers the same document).
- A 401 on any path names the metadata of the resource that path belongs to (RFC 9728 §5.1).
- A name taken from a path reaches a header only when it is a backend-shaped DNS label (the config
  allows no other backend names), so no path can inject into ``WWW-Authenticate``.
- The id used for audience binding is never derived from the request's Host: only a configured id
  (``backends.NAME.resource``, or ``auth.resource`` ending in ``/mcp`` as the base) binds a token to
  a backend. A Host-derived id is fine in metadata (it is where the client already is), but a
  client picks the Host, so trusting it would let a token minted for another server's resource in.

Virtual servers (gateway/virtual_servers.py) live at /servers/NAME/ too and are resources of their own
in the same way (``virtual_servers.NAME.resource``): :func:`configured_resources` lists both.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.config import Auth, Config

METADATA_PATH = "/.well-known/oauth-protected-resource"
# The doors of one backend; group 1 is its name (a DNS label, as gateway/config.py requires).
_SERVER_PATH = re.compile(r"/servers/([a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)/(?:mcp(?:/ws)?|sse|messages)/?")
_SERVER_METADATA = re.compile(r"servers/([a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)/mcp")


def server_of(path: str, root_path: str = "") -> str | None:
    """The backend whose own doors ``path`` is on, or None (the gateway's)."""
    if root_path and path.startswith(root_path):
        path = path[len(root_path) :]
    if not path.startswith("/servers/"):
        return None
    match = _SERVER_PATH.fullmatch(path)
    return match.group(1) if match else None


def server_of_metadata(path: str) -> str | None:
    """The backend a metadata request is for (``path`` after the well-known prefix), or None."""
    match = _SERVER_METADATA.fullmatch(path.strip("/"))
    return match.group(1) if match else None


def metadata_url(base: str, server: str | None) -> str:
    """Where the resource metadata of ``server`` (None: the gateway) is, for a client at ``base``."""
    return f"{base}{METADATA_PATH}" if server is None else f"{base}{METADATA_PATH}/servers/{server}/mcp"


def _configured_base(auth: Auth | None) -> str | None:
    """The public base URL the operator configured, when ``auth.resource`` names the gateway's /mcp."""
    resource = auth.resource if auth is not None else None
    if resource and resource.rstrip("/").endswith("/mcp"):
        return resource.rstrip("/")[: -len("/mcp")]
    return None


def gateway_resource(auth: Auth | None, base: str) -> str:
    """The gateway's resource id: ``auth.resource``, else ``BASE/mcp``."""
    return (auth.resource if auth is not None and auth.resource else None) or f"{base}/mcp"


def server_resource(server: str, auth: Auth | None, resources: Mapping[str, str | None], base: str) -> str:
    """A backend's resource id for its metadata: configured, else ``BASE/servers/NAME/mcp``."""
    return bound_resource(server, auth, resources) or f"{base}/servers/{server}/mcp"


def bound_resource(server: str | None, auth: Auth | None, resources: Mapping[str, str | None]) -> str | None:
    """The id a token may name in ``aud`` to be accepted on ``server``'s own paths; None when there
    is none to trust (no server, an unknown one, or no configured id nor configured base)."""
    if server is None or server not in resources:
        return None
    configured = resources[server]
    if configured:
        return configured
    base = _configured_base(auth)
    return f"{base}/servers/{server}/mcp" if base is not None else None


def configured_resources(config: Config) -> dict[str, str | None]:
    """Every server with a resource of its own under /servers/NAME/ (backends and virtual servers, whose
    names never collide: gateway/config_virtual.py), with its configured id (or None)."""
    resources = {name: backend.resource for name, backend in config.backends.items()}
    resources.update((name, virtual.resource) for name, virtual in config.virtual_servers.items())
    return resources
