"""Log levels toward shared backends: each logs at the most verbose level any of its sessions asked for.

Each session then sees only what its own level admits (``ClientSession.wants_log``). A modern
backend gets each call's level in its ``_meta`` instead, so it is never told a level here.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from gateway.sessions import level_rank
from gateway.upstreams.principal_pool import PoolHead

if TYPE_CHECKING:
    from gateway.sessions import SessionStore
    from gateway.upstreams.connection import BackendConnection

log = logging.getLogger(__name__)


class BackendLevels:
    def __init__(self, connections: Mapping[str, BackendConnection], sessions: SessionStore) -> None:
        self._connections = connections
        self._sessions = sessions
        self._told: dict[str, str] = {}  # backend -> the level it was last told

    def forget(self, backend: str) -> None:
        """A reconnected backend has forgotten what it was told."""
        self._told.pop(backend, None)

    async def sync(self, backends: tuple[str, ...]) -> None:
        updates = []
        for name in backends:
            conn = self._connections[name]
            if not conn.state == "ready" or "logging" not in conn.capabilities or conn.era == "modern":
                continue
            levels = [s.log_level for s in self._sessions if s.log_level and name in s.view.backends]
            if not levels:
                continue
            wanted = min(levels, key=level_rank)
            # A per-principal backend's head passes the news to each child, which compares its own
            # principal's level (gateway/upstreams/principal_pool.py): asked on every change.
            if self._told.get(name) != wanted or isinstance(conn, PoolHead):
                self._told[name] = wanted
                updates.append(conn.request("logging/setLevel", {"level": wanted}, timeout=10.0))
        for outcome in await asyncio.gather(*updates, return_exceptions=True):
            if isinstance(outcome, Exception):
                log.info("logging/setLevel toward a backend failed: %s", outcome)
