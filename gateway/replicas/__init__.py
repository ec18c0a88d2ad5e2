"""Many replicas as one gateway (issue 14): what replicas share through the bus.

``shared_sessions``: legacy sessions and their standalone streams, any request on any replica.
``records``: a session's shared state as JSON. ``principals``, ``registrations`` (MGP §15 runtime
backends) and ``permission_board`` (MGP permission requests waiting anywhere): the admin API's
changes and listings on every replica. With the memory bus, ``LocalSessions`` keeps today's
single-replica behaviour with no cost.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from gateway.sessions import ClientSession


class SessionSharing(Protocol):
    """What a door asks about sessions that may live on several replicas."""

    async def find(self, session_id: str) -> ClientSession | None:
        """The session of a request: the local copy (up to date), else restored from the bus."""
        ...

    async def settle(self, session: ClientSession) -> None:
        """After a request: its state shared if it changed."""
        ...

    async def ended(self, session: ClientSession) -> None:
        """Ended on purpose (DELETE, the end of its legacy SSE stream): everywhere."""
        ...

    def holding(self, session: ClientSession) -> AbstractAsyncContextManager[None]:
        """While its standalone stream is open here."""
        ...

    @property
    def keeps_history(self) -> bool:
        """Whether the standalone stream's events are kept for resumption on any replica."""
        ...

    async def missed(self, session: ClientSession, last_seen: int) -> list[dict[str, Any]] | None:
        """What followed event ``last_seen`` of the session's stream (None: not in the history); the
        session's stream then numbers on above every event the history holds."""
        ...
