"""What every carrier toward a backend provides: move JSON-RPC dicts, nothing more.

A carrier knows bytes and connections; it does not know MCP. Ids, handshakes and routing live in
:mod:`gateway.upstreams.connection`. The one piece of meaning a carrier may add is *relation*: an
inbound message that arrived on the response stream of a request we sent (Streamable HTTP) is
tagged with that request's id, so that progress, logs and server-to-client requests reach exactly
the client whose call caused them.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping
from typing import Any

Inbound = Callable[[dict[str, Any], Any], None]
"""Called with (message, related_request_id or None). Must not block: it runs on reader tasks."""


class CarrierClosed(Exception):
    """The carrier is gone; the connection will fail what it had in flight and reconnect."""


class Carrier(abc.ABC):
    @abc.abstractmethod
    async def open(self, inbound: Inbound) -> None:
        """Connect (spawn, dial) and start reading. Raises on failure."""

    @abc.abstractmethod
    async def send(self, message: dict[str, Any], headers: Mapping[str, str] | None = None) -> None:
        """Send one message. For request/response carriers this may return only once the reply arrived.

        ``headers`` are per-message transport headers (the modern era's routing headers); carriers
        without headers ignore them.
        """

    async def ready(self) -> None:  # noqa: B027 - optional hook
        """Called once the MCP handshake completed (e.g. to open a standalone GET stream)."""

    @abc.abstractmethod
    async def wait_closed(self) -> str:
        """Return, with a reason, when the carrier has died or was closed."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release everything; never raises."""

    def describe(self) -> str:
        return type(self).__name__
