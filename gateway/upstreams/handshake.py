"""Era detection and the handshake of one connection attempt to a backend.

``era: auto`` asks in an order every released server survives, and the answer is kept across
reconnects (``known_era``):

- over stdio ``initialize`` goes first (Python SDK 1.6 dies on an unknown method such as
  ``server/discover``, then hangs), and only a server that refuses it is asked ``server/discover``;
- elsewhere ``server/discover`` goes first, and any error answer to it, whatever its id (SDK 1.x
  answers ``"server-error"``), is a decisive "no" at once, never a wait for the probe timeout;
- an HTTP URL where neither era answers a POST (404/405) is tried once more as legacy HTTP+SSE
  (``use_sse``); legacy SSE and the builtin demo are legacy by definition.

The handshake only decides and agrees; the connection owns the requests (ids, the modern envelope
of the era in use) and is reached through the narrow :class:`Exchange`.

MGP (the gateway is every backend's kernel): on the legacy era the kernel's object rides in
``initialize`` and its grants follow the result (gateway/mgp/kernel.py). On the 2026-07-28 era
(MGP_SECURITY.md §2.6, §3.8) there is no session: ``server/discover`` carries the kernel's offer in
its client capabilities, the discover result's ``extensions["dev.cloto/mgp"]`` is negotiated by the
same kernel hook (its ``mgp/permission/grant`` sent in the modern envelope, §3.8 rule 1), and every
later request to a backend that negotiated MGP carries the kernel's object in its client
capabilities and the grants in force in ``_meta["dev.cloto/mgp/grants"]`` (§3.8 rule 3), see
:meth:`Handshake.stamp_modern`. Grants or an MGP object a *client* put in a request never reach a
backend: the kernel's replace them (a client cannot grant itself a permission).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from adapters import mcp_modern, mcpl
from adapters.mcp import LATEST_LEGACY, LEGACY_VERSIONS
from adapters.mgp import caps as mgp_caps, strip as mgp_strip
from gateway import jsonrpc
from gateway.config import Backend as BackendConfig
from gateway.upstreams.base import Carrier

if TYPE_CHECKING:
    from gateway.mgp.kernel import BackendMgp

log = logging.getLogger(__name__)

Era = Literal["legacy", "modern"]

# What the gateway offers backends as a client: it relays all of these to its own clients.
GATEWAY_CLIENT_CAPABILITIES: dict[str, Any] = {
    "roots": {"listChanged": True},
    "sampling": {},
    "elicitation": {"form": {}, "url": {}},
}
PROBE_TIMEOUT_S = 5.0


class BackendKernel(Protocol):
    """The kernel's part in a handshake (MGP, gateway/mgp/kernel.py): what it offers in
    ``initialize``, and what it sends between the result and ``notifications/initialized``."""

    def offer(self) -> dict[str, Any]: ...

    async def on_initialized(
        self, exchange: Exchange, backend: str, result: dict[str, Any], timeout: float
    ) -> None: ...

    def backend(self, name: str) -> BackendMgp | None:
        """What ``name`` negotiated on its latest connect (None: it does not speak MGP)."""


class Exchange(Protocol):
    """A request of the handshake, sent by the connection in ``era`` (its envelope and headers)."""

    async def handshake_request(
        self, method: str, params: dict[str, Any], era: Era, timeout: float, probe: bool = False
    ) -> dict[str, Any]:
        """The answer (result or error message); raises ``RpcError`` on timeout or a dead carrier.
        A ``probe`` is also answered by an error that names no request of ours."""


class _ModernExchange:
    """The kernel's handshake requests to a modern backend, sent in the modern envelope (the kernel
    asks in ``legacy`` terms: its grant request follows ``initialize`` there)."""

    def __init__(self, exchange: Exchange) -> None:
        self._exchange = exchange

    async def handshake_request(
        self, method: str, params: dict[str, Any], era: Era, timeout: float, probe: bool = False
    ) -> dict[str, Any]:
        return await self._exchange.handshake_request(method, params, "modern", timeout, probe)


@dataclass(frozen=True, slots=True)
class Agreed:
    era: Era
    init_result: dict[str, Any]


class Handshake:
    def __init__(
        self,
        name: str,
        config: BackendConfig,
        client_info: dict[str, Any],
        offer_mcpl: bool,
        sse_possible: bool,
        kernel: BackendKernel | None = None,
    ) -> None:
        self._name = name
        self._kernel = kernel
        self._config = config
        self._client_info = client_info
        self._offer_mcpl = offer_mcpl
        self._sse_possible = sse_possible
        self.known_era: Era | None = None  # learned once, kept across reconnects
        self.use_sse = False  # an http backend that turned out to be legacy HTTP+SSE

    async def run(self, exchange: Exchange, carrier: Carrier) -> Agreed:
        """Detect the era (if not known or pinned) and complete that era's handshake on ``carrier``."""
        config = self._config
        wanted = self.known_era or config.era
        if (config.transport in ("sse", "builtin") or self.use_sse) and wanted == "auto":
            wanted = "legacy"  # legacy HTTP+SSE is legacy by definition; the demo is legacy
        if wanted == "auto" and config.transport == "stdio":
            response = await self._initialize(exchange)
            if "error" in response and (found := await self._probe_modern(exchange, False)) is not None:
                return await self._modern(exchange, found)
            self.known_era = "legacy"
            return await self._finish_legacy(exchange, carrier, response)
        if wanted in ("auto", "modern") and (found := await self._probe_modern(exchange, wanted == "modern")):
            return await self._modern(exchange, found)
        self.known_era = "legacy"
        return await self._finish_legacy(exchange, carrier, await self._initialize(exchange))

    def went_away(self, step: str) -> None:
        """The backend died while ``step`` was asked. A server that dies on the modern probe is a
        strict legacy server (SDK 1.6 over stdio): remembered, so the next attempt skips the probe."""
        if step == "server/discover" and self._config.era == "auto":
            self.known_era = "legacy"

    async def _modern(self, exchange: Exchange, init_result: dict[str, Any]) -> Agreed:
        self.known_era = "modern"
        if self._kernel is not None:
            # MGP §2.6, §3.8 rule 1: negotiate from the discover result, grant before the first call.
            await self._kernel.on_initialized(
                _ModernExchange(exchange), self._name, init_result, self._config.connect_timeout_s
            )
        return Agreed("modern", init_result)

    def stamp_modern(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """A modern request's params as the kernel sends them (MGP §2.6, §3.8 rule 3): no grants or
        MGP object of the calling client's; the kernel's offer on ``server/discover``; toward a
        backend that negotiated MGP, the kernel's object in the client capabilities and the grants in
        force in ``_meta["dev.cloto/mgp/grants"]``. Never mutates what it was given."""
        if self._kernel is None:
            return params
        meta = params.get("_meta")
        clean = mgp_strip.strip_meta(meta) if isinstance(meta, dict) else {}
        out = {**params, "_meta": _detached(clean)}
        record = self._kernel.backend(self._name) if method != "server/discover" else None
        if method == "server/discover":
            mgp_caps.put_request(out, self._kernel.offer())
        elif record is not None:
            mgp_caps.put_request(out, mgp_caps.build(record.negotiation.version, record.active))
            now = time.time()
            grants = {perm: grant.wire() for perm, grant in record.grants.items() if grant.valid(now)}
            if grants:  # none in force: absent, which a server reads as ungranted (§3.8 rule 3)
                mgp_caps.put_grants(out, grants)
        return out

    async def _initialize(self, exchange: Exchange) -> dict[str, Any]:
        """Send the legacy handshake's ``initialize``; return the answer (result or error)."""
        capabilities: dict[str, Any] = GATEWAY_CLIENT_CAPABILITIES
        if self._offer_mcpl:
            # Every backend is offered MCPL: servers only show it to hosts that advertise it, and
            # an MCP server ignores what it does not know under ``experimental``.
            capabilities = {**capabilities, "experimental": {"mcpl": mcpl.HOST_CAPABILITIES}}
        if self._kernel is not None:
            # MGP §2.2: the kernel's offer; a plain MCP server ignores a capability it does not know.
            capabilities = {**capabilities, "mgp": self._kernel.offer()}
        params = {"protocolVersion": LATEST_LEGACY, "capabilities": capabilities, "clientInfo": self._client_info}
        return await exchange.handshake_request("initialize", params, "legacy", self._config.connect_timeout_s)

    async def _finish_legacy(self, exchange: Exchange, carrier: Carrier, response: dict[str, Any]) -> Agreed:
        """Complete the legacy handshake from the answer to ``initialize``."""
        if "error" in response:
            if (
                self._sse_possible
                and not self.use_sse
                and self._config.era == "auto"
                and getattr(carrier, "last_status", None) in (404, 405)
            ):
                # Neither era answers a POST here: the last resort is the legacy HTTP+SSE transport.
                self.use_sse = True
                self.known_era = "legacy"
                raise ConnectionError("no Streamable HTTP here; trying legacy HTTP+SSE at the same URL")
            raise ConnectionError(f"initialize refused: {response['error'].get('message')}")
        result = response.get("result")
        if not isinstance(result, dict) or not isinstance(result.get("protocolVersion"), str):
            raise ConnectionError("initialize result lacks protocolVersion")
        if result["protocolVersion"] not in LEGACY_VERSIONS:
            log.warning("backend %s answered protocol %s; continuing", self._name, result["protocolVersion"])
        if self._kernel is not None:
            # MGP: grants go after the initialize result and before notifications/initialized.
            await self._kernel.on_initialized(exchange, self._name, result, self._config.connect_timeout_s)
        await carrier.send(jsonrpc.notification("notifications/initialized"))
        await carrier.ready()
        return Agreed("legacy", result)

    async def _probe_modern(self, exchange: Exchange, required: bool) -> dict[str, Any] | None:
        """Ask ``server/discover`` (2026-07-28). A result, or an error only a modern server uses,
        means modern (the result is returned as the backend's init result); anything else means a
        legacy server (None), unless the config requires modern."""
        config = self._config
        timeout = config.connect_timeout_s if required else min(PROBE_TIMEOUT_S, config.connect_timeout_s)
        try:
            response = await exchange.handshake_request("server/discover", {}, "modern", timeout, probe=True)
        except jsonrpc.RpcError as exc:
            if required or exc.code != jsonrpc.BACKEND_TIMEOUT:
                if exc.code == jsonrpc.BACKEND_UNAVAILABLE and not required:
                    # The probe killed the connection (a strict legacy server): remember, and retry.
                    self.known_era = "legacy"
                raise ConnectionError(f"server/discover probe failed: {exc.message}") from None
            return None  # a legacy server that ignores requests before initialize
        result = response.get("result")
        if isinstance(result, dict):
            versions = result.get("supportedVersions")
            if isinstance(versions, list) and mcp_modern.LATEST_MODERN not in versions:
                if required:
                    raise ConnectionError(f"backend supports {versions}, not {mcp_modern.LATEST_MODERN}")
                return None
            meta = m if isinstance(m := result.get("_meta"), dict) else {}
            return {
                "protocolVersion": mcp_modern.LATEST_MODERN,
                "capabilities": result.get("capabilities") if isinstance(result.get("capabilities"), dict) else {},
                "serverInfo": meta.get(mcp_modern.SERVER_INFO_KEY) or {},
                **({"instructions": result["instructions"]} if isinstance(result.get("instructions"), str) else {}),
            }
        error = response.get("error") or {}
        if error.get("code") in mcp_modern.MODERN_ERROR_CODES:
            raise ConnectionError(f"backend refused the modern envelope: {error.get('message')}")
        if required:
            raise ConnectionError(f"backend does not serve 2026-07-28: {error.get('message')}")
        return None


def _detached(meta: Mapping[str, Any]) -> dict[str, Any]:
    """``meta`` with its client capabilities (and their ``extensions``) copied, so that writing the
    kernel's object into them never touches a session's or the gateway's shared capabilities."""
    out = dict(meta)
    client_caps = out.get(mgp_caps.CLIENT_CAPABILITIES_META_KEY)
    if isinstance(client_caps, dict):
        copied = dict(client_caps)
        if isinstance(copied.get("extensions"), dict):
            copied["extensions"] = dict(copied["extensions"])
        out[mgp_caps.CLIENT_CAPABILITIES_META_KEY] = copied
    return out
