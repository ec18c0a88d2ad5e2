"""What the MCP doors ask about their callers: who is calling, and whether a session may open.

Doors get this one small interface (implemented by :class:`gateway.core.Gateway`) next to the
collaborators they use (router, session store, limits, metrics), never the whole gateway. The
decisions behind it stay where they are: authentication in ``policies/auth.py``, the session
limit in ``policies/load.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from gateway.federation import View
    from gateway.sessions import ClientSession
    from gateway.transports.http_common import Scope
    from policies import Decision
    from policies.auth import Credentials
    from policies.principal import Principal

# Opens (and counts) a session of a transport on a view, for these credentials.
OpenSession = Callable[[str, "View", "Credentials"], "ClientSession"]


class FrontDesk(Protocol):
    def authenticate(self, scope: Scope, token: str | None = None) -> Credentials:
        """Who is calling (raises AuthError): the Authorization header's token unless ``token`` is given."""
        ...

    def principal_of(self, credentials: Credentials) -> Principal:
        """The principal those credentials stand for now."""
        ...

    def caller_of(self, session: ClientSession, scope: Scope) -> Principal:
        """Who sends this request on ``session``, held to the credential it presents (raises AuthError)."""
        ...

    def admit_session(self, transport: str) -> Decision:
        """Whether one more session may open (a refusal is audited)."""
        ...

    def open_session(self, transport: str, view: View, credentials: Credentials) -> ClientSession:
        """A new session of ``transport`` on ``view`` for these credentials."""
        ...
