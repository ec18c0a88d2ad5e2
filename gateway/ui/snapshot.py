"""What the dashboard's read-only pages show, built from the gateway's own objects when a page asks.

Nothing here runs on the request path: each function reads the live objects (connections, sessions,
catalogs, the metrics registry) at the moment a page loads or refreshes. Invariants:

- No secret leaves: session ids are shown as their first 8 characters (the whole id lets anyone
  speak on the session), credentials and config values never appear, and error texts from backends
  have URL userinfo and query strings masked (a backend URL may carry a key there).
- Backend-supplied strings (tool descriptions, server names) are data; the page renders them with
  ``textContent`` only, never as HTML.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from gateway.federation import ListKind
from gateway.ui.latency import per_backend

if TYPE_CHECKING:
    from gateway.mcpc.backends import McpcBackends
    from gateway.mcpl import McplRelay
    from gateway.metrics import Metrics
    from gateway.mgp.kernel import Kernel
    from gateway.mgp.tool_facts import ToolFacts
    from gateway.routing.catalog import Catalog
    from gateway.sessions import ClientSession, SessionStore
    from gateway.upstreams.connection import BackendConnection
    from policies.pinning import PinStore

_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/@\s]+@")
_QUERY = re.compile(r"(?i)(\b[a-z][a-z0-9+.-]*://[^\s?#]*)\?[^\s#]*")
_KINDS: tuple[ListKind, ...] = ("tools", "prompts", "resources")


def masked(text: str | None) -> str | None:
    """``text`` with URL userinfo and query strings replaced by ``***``."""
    if not text:
        return text
    return _QUERY.sub(r"\1?***", _USERINFO.sub(r"\1***@", text))


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 2)


class BackendsView:
    """Backends: the overview's rows and each backend's catalog with security metadata and pins."""

    def __init__(
        self,
        *,
        connections: Mapping[str, BackendConnection],
        catalog: Catalog,
        metrics: Metrics,
        mcpl: McplRelay,
        mgp: Kernel,
        mcpc: McpcBackends,
        tool_facts: ToolFacts,
        trust_level: Callable[[str], str | None],
        pins: PinStore,
    ) -> None:
        self._connections = connections
        self._catalog = catalog
        self._metrics = metrics
        self._mcpl = mcpl
        self._mgp = mgp
        self._mcpc = mcpc
        self._tool_facts = tool_facts
        self._trust_level = trust_level
        self._pins = pins

    def dialects(self, name: str, mcpl: Mapping[str, Any] | None = None) -> list[str]:
        """What the backend was found to speak on its latest connect (``mcpl``: the MCPL relay's
        backends, when the caller already has them)."""
        found = ["MCP"]
        if name in (mcpl if mcpl is not None else self._mcpl.snapshot()["backends"]):
            found.append("MCPL")
        if self._mgp.backend(name) is not None:
            found.append("MGP")
        if self._mcpc.speaks(name):
            found.append("MCPC")
        return found

    def rows(self) -> list[dict[str, Any]]:
        latency = per_backend(self._metrics.latency.collect())
        mcpl = self._mcpl.snapshot()["backends"]
        rows = []
        for name, conn in sorted(self._connections.items()):
            ready = conn.state == "ready"
            seen = latency.get(name, {})
            rows.append(
                {
                    "name": name,
                    "transport": conn.config.transport,
                    "era": conn.era if ready else None,
                    "protocol": conn.protocol_version if ready else None,
                    "server": conn.server_info.get("name") if ready else None,
                    "state": conn.state,
                    "required": conn.config.required,
                    "dialects": self.dialects(name, mcpl),
                    "restarts": conn.restarts,
                    "inflight": conn.inflight,
                    "calls": seen.get("count") or 0,
                    "p50_ms": _ms(seen.get("p50")),
                    "p99_ms": _ms(seen.get("p99")),
                    "error": None if ready else masked(conn.last_error),
                }
            )
        return rows

    async def detail(self, name: str) -> dict[str, Any] | None:
        """One backend's catalog (its own names), tools with their effective security metadata and
        pin state. None for an unknown backend."""
        conn = self._connections.get(name)
        if conn is None:
            return None
        pending = {p["tool"]: p for p in self._pins.pending() if p["backend"] == name}
        catalog: dict[str, list[dict[str, Any]]] = {}
        for kind in _KINDS:
            items = await self._catalog.of_backend(name, kind)
            catalog[kind] = [self._item(name, kind, item, pending) for item in items]
        return {
            "name": name,
            "state": conn.state,
            "transport": conn.config.transport,
            "dialects": self.dialects(name),
            "trust_level": self._trust_level(name),
            "pinning": self._pins.mode,
            "catalog": catalog,
        }

    def _item(
        self, backend: str, kind: ListKind, item: Mapping[str, Any], pending: Mapping[str, dict[str, str]]
    ) -> dict[str, Any]:
        key = "uri" if kind == "resources" else "name"
        out: dict[str, Any] = {"name": item.get(key), "description": item.get("description")}
        if kind != "tools":
            return out
        meta = self._tool_facts.effective(backend, str(item.get(key)), item)
        out["security"] = meta.to_wire() if meta is not None else None
        annotations = item.get("annotations")
        out["annotations"] = annotations if isinstance(annotations, dict) else None
        change = pending.get(str(item.get(key)))
        if self._pins.mode == "off":
            out["pin"] = {"state": "off"}
        elif change is not None:
            out["pin"] = {"state": "changed", "pinned": change["pinned"][:12], "current": change["current"][:12]}
        else:
            out["pin"] = {"state": "pinned"}
        return out

    def changed_pins(self) -> list[dict[str, str]]:
        """Changed tool definitions awaiting approval (fingerprints shortened for the eye)."""
        return [
            {"backend": p["backend"], "tool": p["tool"], "pinned": p["pinned"][:12], "current": p["current"][:12]}
            for p in self._pins.pending()
        ]


class SessionsView:
    """Client sessions of this replica: who, which dialects and era, through which door, how busy."""

    def __init__(self, sessions: SessionStore, mcpl: McplRelay) -> None:
        self._sessions = sessions
        self._mcpl = mcpl

    def rows(self) -> list[dict[str, Any]]:
        now = time.monotonic()
        return [self._row(s, now) for s in sorted(self._sessions, key=lambda s: s.created)]

    def _row(self, session: ClientSession, now: float) -> dict[str, Any]:
        info = session.client_info
        mgp = session.mgp
        return {
            "id": session.id[:8],
            "principal": session.principal.name,
            "dialects": sorted(d.value.upper() for d in session.dialects),
            "era": session.codec.name,
            "protocol": session.protocol_version,
            "door": session.transport,
            "view": session.view.name,
            "client": f"{info.get('name', '?')} {info.get('version', '')}".strip() if info else None,
            "age_s": round(now - session.created, 1),
            "idle_s": round(now - session.last_seen, 1),
            "inflight": len(session.inflight),
            "mcpl_feature_sets": self._mcpl.receipt(session)["enabled"] if session.mcpl is not None else None,
            "mgp_extensions": sorted(mgp.active) if mgp is not None else None,
            "mgp_version": mgp.version if mgp is not None else None,
            "here": session.created_here,
        }

    def summary(self) -> dict[str, Any]:
        rows = list(self._sessions)
        by_dialect: Counter[str] = Counter(d.value.upper() for s in rows for d in s.dialects)
        return {
            "total": len(rows),
            "by_dialect": dict(sorted(by_dialect.items())),
            "by_era": dict(sorted(Counter(s.codec.name for s in rows).items())),
            "by_door": dict(sorted(Counter(s.transport for s in rows).items())),
        }
