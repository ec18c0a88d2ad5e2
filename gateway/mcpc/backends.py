"""Which backends speak MCPC: the handshake, asked after every connect (issue 13).

MCPC is never negotiated at ``initialize``: a client finds out by calling a handshake tool. The
gateway is every backend's MCPC client, so after each connect (a restarted server has forgotten
the handshake: the ``mcpc`` library's ``MCPCHelper`` keeps it per process) it tries the names of
every version, newest first (``_mcpc_init``, ``_is_mcpc_enabled``, ``is_mcpc_enabled``), and keeps
the first positive answer: the version (for the metadata form) and the provider (one naming the
gateway's own provider is another Switchboard, served as plain MCP). A backend that
answers an attempt with an error or an ``isError`` result is asked the next name; one that does not
answer in ``mcpc.probe_timeout_s`` is asked nothing more (it is not MCPC). ``backends.NAME.mcpc:
off`` skips the probe.

Invariants: detection never delays the connection's readiness; a call that arrives while it runs
waits for it at most ``probe_timeout_s`` per name left (``settled``); what is known is forgotten
when the connection goes down.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from adapters.mcpc import handshake as wire
from adapters.mcpc.versions import LIBRARY_VERSION, compare_versions
from gateway import jsonrpc

if TYPE_CHECKING:
    from gateway.upstreams.connection import BackendConnection

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class BackendInfo:
    """What a backend answered the handshake with."""

    version: str  # what its metadata form follows
    provider: str | None
    tool: str  # the handshake name it answered to


class McpcBackends:
    def __init__(self, provider: str, probe_timeout_s: float, changed: Callable[[str, bool], None]) -> None:
        self._provider = provider
        self._probe_timeout_s = probe_timeout_s
        self._changed = changed  # (backend, speaks MCPC): others that care (the MCPL relay's feature set)
        self._known: dict[str, BackendInfo] = {}
        self._settled: dict[str, asyncio.Event] = {}

    def info(self, backend: str) -> BackendInfo | None:
        return self._known.get(backend)

    def speaks(self, backend: str) -> bool:
        return backend in self._known

    def detecting(self, backend: str) -> bool:
        """The handshake is being asked right now."""
        event = self._settled.get(backend)
        return event is not None and not event.is_set()

    def names(self) -> list[str]:
        return sorted(self._known)

    async def settled(self, conn: BackendConnection) -> BackendInfo | None:
        """What is known of ``conn``'s backend, once its detection ended (bounded wait)."""
        event = self._settled.get(conn.name)
        if event is not None and not event.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._probe_timeout_s * len(wire.HANDSHAKE_ORDER)):
                    await event.wait()
        return self._known.get(conn.name)

    def on_connected(self, conn: BackendConnection) -> None:
        self._forget(conn.name)
        if conn.config.mcpc == "off" or "tools" not in conn.capabilities:
            return
        event = self._settled[conn.name] = asyncio.Event()
        conn.spawn(self._detect(conn, event))

    def on_disconnected(self, name: str) -> None:
        self._forget(name)

    def _forget(self, name: str) -> None:
        event = self._settled.pop(name, None)
        if event is not None:
            event.set()  # anyone waiting goes on without MCPC
        if self._known.pop(name, None) is not None:
            self._changed(name, False)

    async def _detect(self, conn: BackendConnection, event: asyncio.Event) -> None:
        try:
            info = await self._ask(conn)
            if info is not None and self._settled.get(conn.name) is event:
                self._known[conn.name] = info
                log.info(
                    "backend %s speaks MCPC %s (provider %s, handshake %s)",
                    conn.name,
                    info.version,
                    info.provider,
                    info.tool,
                )
                self._changed(conn.name, True)
        finally:
            event.set()

    async def _ask(self, conn: BackendConnection) -> BackendInfo | None:
        for tool, arguments in wire.handshake_attempts(self._provider):
            try:
                response = await conn.request(
                    "tools/call", {"name": tool, "arguments": arguments}, timeout=self._probe_timeout_s
                )
            except jsonrpc.RpcError as exc:
                log.debug("backend %s: MCPC handshake %s: %s", conn.name, tool, exc.message)
                return None  # it did not answer (or went away): asking more names would only wait more
            info = wire.info_from_result(response.get("result"))
            if info is not None and info.enabled and info.provider == self._provider:
                # Another gateway like this one: it already holds its backends' tasks for plain clients,
                # so it is served as a plain backend (translating twice would only lose detail).
                log.info("backend %s answers MCPC as %s, a gateway: served as plain MCP", conn.name, info.provider)
                return None
            if info is not None and info.enabled:
                newest = wire.TOOL_VERSIONS.get(tool, LIBRARY_VERSION)
                version = info.version or newest
                if compare_versions(version, newest) > 0:
                    version = newest  # a name older versions used: their metadata form, whatever it claims
                return BackendInfo(version, info.provider, tool)
        return None
