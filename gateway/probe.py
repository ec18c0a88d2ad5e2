"""``switchboard check -c FILE --probe``: start the gateway's own backend connections and report what
every backend offers, before the config goes live.

The probe builds a real :class:`~gateway.core.Gateway` from the config, so each backend is reached
exactly as ``run`` reaches it: the same carriers, era detection, MGP kernel handshake, MCPL
declaration and MCPC handshake. Only what would reach beyond the backends is left out: the bus is
the in-memory one, there is no audit file and no auth section (a JWKS URL is not fetched).

Per backend it reports: reachable or why not, era and protocol version, the dialects detected
(MCPL, MGP, MCPC), and how many tools, prompts, resources and resource templates it lists. Across
backends it reports the names two backends expose alike under the federation rules (the ``/mcp``
view's naming: ``federation.prefix`` and ``separator``), which the gateway withholds.

Bounds: all backends are probed at once; each gets ``timeout_s`` to connect and ``timeout_s`` more
for its lists and the MCPC handshake. Everything started (stdio children included) is stopped
before :func:`probe` returns, within ``STOP_BOUND_S``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from adapters.mcpc import listing as mcpc_listing
from gateway import jsonrpc
from gateway.bus import MemoryBus
from gateway.config import AuditConfig, BusConfig, Config
from gateway.federation import CAPABILITY_OF, LIST_METHODS, BackendCatalog, ListKind
from gateway.upstreams.principal_pool import PoolHead

if TYPE_CHECKING:
    from gateway.core import Gateway
    from gateway.upstreams.connection import BackendConnection

log = logging.getLogger(__name__)

STOP_BOUND_S = 20.0  # a stdio child gets 2 s after EOF, 3 s after SIGTERM, then SIGKILL (upstreams/stdio.py)
KINDS: tuple[ListKind, ...] = tuple(LIST_METHODS.values())
_KIND_LABEL = {"tools": "tools", "prompts": "prompts", "resources": "resources", "resourceTemplates": "templates"}


@dataclass(slots=True)
class BackendReport:
    name: str
    transport: str
    required: bool
    reachable: bool = False
    error: str | None = None
    era: str | None = None
    protocol: str | None = None
    server: dict[str, Any] = field(default_factory=dict)  # serverInfo: name, version
    dialects: dict[str, dict[str, Any]] = field(default_factory=dict)  # MCPL / MGP / MCPC -> details
    counts: dict[str, int] = field(default_factory=dict)  # by list kind (tools, prompts, ...)
    list_errors: dict[str, str] = field(default_factory=dict)  # a list the backend announces but failed
    sharing: str = "shared"  # per-principal (issue 17): its command is checked, no child is spawned

    def to_json(self) -> dict[str, Any]:
        return {
            "transport": self.transport,
            "required": self.required,
            "reachable": self.reachable,
            "error": self.error,
            "era": self.era,
            "protocol": self.protocol,
            "server": self.server,
            "dialects": self.dialects,
            "counts": self.counts,
            "list_errors": self.list_errors,
            "sharing": self.sharing,
        }

    def lines(self) -> list[str]:
        head = f"backend {self.name} ({self.transport}{', required' if self.required else ''}): "
        if not self.reachable:
            return [head + f"UNREACHABLE: {self.error}"]
        if self.sharing == "per-principal":
            return [head + "command found; one child per principal, spawned on demand (not probed: no principal)"]
        server = " ".join(str(self.server.get(k)) for k in ("name", "version") if self.server.get(k))
        lines = [
            head + f"reachable, {self.era} era (protocol {self.protocol})" + (f", server {server}" if server else "")
        ]
        dialects = [f"{name} {details.get('version', '')}".rstrip() for name, details in self.dialects.items()]
        lines.append(f"  dialects: {', '.join(dialects) or 'MCP only'}")
        counts = [f"{_KIND_LABEL[k]} {self.counts[k]}" for k in KINDS if k in self.counts]
        lines.append(f"  lists: {', '.join(counts) or 'none announced'}")
        lines += [f"  {_KIND_LABEL.get(k, k)}: listing failed: {e}" for k, e in self.list_errors.items()]
        return lines


@dataclass(frozen=True, slots=True)
class Collision:
    kind: str  # tools, prompts, resources, resourceTemplates
    name: str  # the name (or URI) as clients of /mcp would see it
    backends: tuple[str, ...]  # for a virtual server: its BACKEND:original items
    server: str | None = None  # the virtual server that would withhold it (issue 17); None: /mcp


@dataclass(slots=True)
class ProbeReport:
    prefix: str
    separator: str
    backends: list[BackendReport] = field(default_factory=list)
    collisions: list[Collision] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what the probe itself could not do (stop overran)

    @property
    def unreachable_required(self) -> list[str]:
        return [b.name for b in self.backends if b.required and not b.reachable]

    @property
    def ok(self) -> bool:
        """What ``check --probe`` exits 0 on: no collision and every required backend reached."""
        return not self.collisions and not self.unreachable_required

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "federation": {"prefix": self.prefix, "separator": self.separator},
            "backends": {b.name: b.to_json() for b in self.backends},
            "collisions": [
                {"kind": c.kind, "name": c.name, "backends": list(c.backends)}
                | ({"virtual_server": c.server} if c.server is not None else {})
                for c in self.collisions
            ],
            "unreachable_required": self.unreachable_required,
            "notes": self.notes,
        }

    def lines(self) -> list[str]:
        lines = [line for backend in self.backends for line in backend.lines()]
        for c in self.collisions:
            if c.server is not None:
                lines.append(
                    f"collision: {c.kind} {c.name!r} would be exposed for {', '.join(c.backends)} by virtual server "
                    f"{c.server!r}: /servers/{c.server}/mcp withholds it (rename one in virtual_servers.{c.server})"
                )
                continue
            lines.append(
                f"collision: {c.kind} {c.name!r} is offered by {', '.join(c.backends)} under federation.prefix "
                f"{self.prefix!r}: /mcp withholds it (use prefix 'conditional' or 'always', or rename it)"
            )
        lines += [f"note: {note}" for note in self.notes]
        problems = []
        if self.collisions:
            problems.append(f"{len(self.collisions)} name collision(s)")
        if self.unreachable_required:
            problems.append(f"required backend(s) unreachable: {', '.join(self.unreachable_required)}")
        lines.append(f"probe: {'FAILED: ' + '; '.join(problems) if problems else 'ok'}")
        return lines


async def probe(config: Config, timeout_s: float = 10.0) -> ProbeReport:
    """Connect to every backend of ``config`` and report; always stops what it started."""
    from gateway.core import Gateway  # the whole gateway: imported only when probing

    quiet = config.model_copy(update={"bus": BusConfig(), "audit": AuditConfig(), "auth": None})
    gateway = Gateway(quiet, bus=MemoryBus())
    fed = config.federation
    report = ProbeReport(fed.prefix, fed.separator)
    try:
        await gateway.start()
        found = await asyncio.gather(
            *(_backend(gateway, conn, timeout_s) for conn in gateway.connections.values()),
        )
        report.backends = [backend for backend, _ in found]
        report.collisions = _collisions(gateway, [(b.name, lists) for b, lists in found])
    finally:
        try:
            async with asyncio.timeout(STOP_BOUND_S):
                await gateway.stop()
        except TimeoutError:
            report.notes.append(f"stopping the backends took longer than {STOP_BOUND_S:g}s")
    return report


async def _backend(
    gateway: Gateway, conn: BackendConnection, timeout_s: float
) -> tuple[BackendReport, dict[ListKind, list[dict[str, Any]]]]:
    cfg = conn.config
    report = BackendReport(conn.name, cfg.transport, cfg.required)
    lists: dict[ListKind, list[dict[str, Any]]] = {}
    if isinstance(conn, PoolHead):
        # A child runs as someone (its principal's environment): the probe is no one, so it spawns none.
        report.sharing, report.reachable, report.error = "per-principal", conn.state == "ready", conn.last_error
        return report, lists
    # The first attempt's end (ready or failed), not readiness: a refused connection is reported at
    # once instead of after the timeout (the connection would go on retrying with backoff).
    settled = await conn.wait_settled(timeout_s)
    if conn.state != "ready":
        if settled:
            report.error = conn.last_error or conn.state
        else:
            report.error = f"no answer within {timeout_s:g}s (still {conn.state})"
            if conn.last_error:
                report.error += f"; last error: {conn.last_error}"
        return report, lists
    report.reachable = True
    report.era, report.protocol = conn.era, conn.protocol_version
    report.server = {k: v for k, v in conn.server_info.items() if k in ("name", "title", "version")}
    try:
        async with asyncio.timeout(timeout_s):
            report.dialects = await _dialects(gateway, conn)
            for kind in KINDS:
                if CAPABILITY_OF[kind] not in conn.capabilities:
                    continue
                try:
                    lists[kind] = await _list(conn, kind, timeout_s)
                    report.counts[kind] = len(lists[kind])
                except (jsonrpc.RpcError, ConnectionError) as exc:
                    report.list_errors[kind] = str(exc)
    except TimeoutError:
        report.list_errors["probe"] = f"lists and dialect detection did not finish within {timeout_s:g}s"
    return report, lists


async def _dialects(gateway: Gateway, conn: BackendConnection) -> dict[str, dict[str, Any]]:
    """The extensions the gateway detected on this connection, as the running gateway would."""
    dialects: dict[str, dict[str, Any]] = {}
    mcpl = gateway.mcpl.snapshot()["backends"].get(conn.name)
    if mcpl is not None:
        dialects["MCPL"] = {"version": mcpl["version"], "feature_sets": mcpl["featureSets"]}
    mgp = gateway.mgp.kernel.backend(conn.name)
    if mgp is not None:
        dialects["MGP"] = {"version": mgp.negotiation.version, "extensions": sorted(mgp.active)}
    mcpc = await gateway.mcpc.backends.settled(conn)  # asked after connect; bounded by mcpc.probe_timeout_s
    if mcpc is not None:
        dialects["MCPC"] = {"version": mcpc.version, "provider": mcpc.provider}
    return dialects


async def _list(conn: BackendConnection, kind: ListKind, timeout_s: float) -> list[dict[str, Any]]:
    """One backend's whole list (every page), as the gateway's catalog fetches it (routing/catalog.py)."""

    async def fetch(method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        response = await conn.request(method, params, timeout=timeout_s)
        if "error" in response:
            raise jsonrpc.RpcError.from_error(response["error"])
        result = response.get("result")
        if method == "tools/list":
            result = mcpc_listing.hide_in_result(result)  # MCPC's handshake tools are the gateway's
        return result if isinstance(result, dict) else {}

    return await BackendCatalog(conn.name, 0).get(kind, fetch)


def _collisions(gateway: Gateway, found: list[tuple[str, dict[ListKind, list[dict[str, Any]]]]]) -> list[Collision]:
    """Names the federated view (``/mcp``) would withhold, merged by its own rules (gateway/federation.py),
    then those each virtual server would (gateway/virtual_servers.py: a ``*`` entry meeting another item)."""
    collisions = []
    view = gateway.federated
    # The views log each collision at ERROR; the report says it already.
    with _quiet(logging.getLogger("gateway.federation")), _quiet(logging.getLogger("gateway.virtual_servers")):
        for kind in KINDS:
            merged = view.merge(kind, [(name, lists[kind]) for name, lists in found if kind in lists])
            collisions += [Collision(kind, name, tuple(owners)) for name, owners in sorted(merged.collisions.items())]
        for server, virtual in gateway.virtual.items():
            for kind in KINDS:
                merged = virtual.merge(kind, [(name, lists[kind]) for name, lists in found if kind in lists])
                collisions += [
                    Collision(kind, name, tuple(owners), server) for name, owners in sorted(merged.collisions.items())
                ]
    return collisions


@contextlib.contextmanager
def _quiet(logger: logging.Logger) -> Iterator[None]:
    was = logger.disabled
    logger.disabled = True
    try:
        yield
    finally:
        logger.disabled = was
