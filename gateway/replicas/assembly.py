"""What replicas share, assembled (issue 14, ADR 0016): one object the gateway holds as ``gw.replicas``.

With the Redis bus: legacy sessions (``sessions``), the relay of requests only another replica can
serve (``relay``, ``parked``), the deployment's ``requestState`` key, principals changed through
the admin API (``principals``), backends registered at runtime (``registrations``, MGP §15) and the
MGP permission requests waiting on any replica (``permissions``). With the memory bus:
``LocalSessions`` and nothing else, at no cost.
"""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gateway.replicas.owner_relay import OwnerRelay, ParkedRouting
from gateway.replicas.permission_board import PermissionBoard
from gateway.replicas.principals import SharedPrincipals
from gateway.replicas.registrations import SharedRegistrations
from gateway.replicas.shared_sessions import LocalSessions, Restore, SharedSessions
from gateway.replicas.state_key import shared_state_key

if TYPE_CHECKING:
    from gateway.bus import Bus
    from gateway.mrtr import Parking
    from gateway.sessions import ClientSession, SessionStore
    from policies.auth import PrincipalRegistry


def replica_id() -> str:
    """This process's name among the replicas: host, pid and a random tag (pids repeat in containers)."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(2)}"


class Replicas:
    def __init__(
        self,
        *,
        shared: bool,
        replica: str,
        bus: Bus,
        store: SessionStore,
        restore: Restore,
        session_ttl_s: float,
        parking: Parking,
        principals: PrincipalRegistry,
        principals_changed: Callable[[], None],
        refreshed: Callable[[ClientSession], None],
        history_keep: int = 256,
    ) -> None:
        self.replica = replica
        self._bus = bus
        self._parking = parking
        self.shared: SharedSessions | None = (
            SharedSessions(bus, store, restore, replica, session_ttl_s, refreshed, history_keep) if shared else None
        )
        self.sessions: SharedSessions | LocalSessions = self.shared or LocalSessions(store)
        self.relay = OwnerRelay(bus, replica) if shared else None
        self.parked = ParkedRouting(parking.owner_of, self.relay) if self.relay is not None else None
        self.principals = SharedPrincipals(bus, principals, principals_changed, replica) if shared else None
        # Handed to the MGP assembly (the registry and the pending permissions are built there).
        self.registrations = SharedRegistrations(bus, replica) if shared else None
        self.permissions = PermissionBoard(bus, replica) if shared else None

    def created(self, session: ClientSession) -> None:
        if self.shared is not None:
            self.shared.created(session)

    def serve(self, app: Any) -> None:
        """The app requests relayed here run through (gateway/app.py)."""
        if self.relay is not None:
            self.relay.app = app

    async def start(self) -> None:
        await self.sessions.start()
        if self.relay is None or self.principals is None:
            return
        key = await shared_state_key(self._bus)
        if key is not None:
            self._parking.use_key(key)
        await self.relay.start()
        await self.principals.start()
        if self.permissions is not None:
            await self.permissions.start()
        if self.registrations is not None:
            await self.registrations.start()

    async def stop(self) -> None:
        await self.sessions.stop()
        if self.relay is not None:
            await self.relay.stop()
        if self.principals is not None:
            await self.principals.stop()
        if self.registrations is not None:
            await self.registrations.stop()
        if self.permissions is not None:
            await self.permissions.stop()
