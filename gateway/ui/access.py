"""Who may open the dashboard (/ui), decided once per request of its JSON and event endpoints.

Roles, from most to least:

- ``admin``: the ``auth.admin_token`` as a bearer token. Sees every page; its actions (approve a
  pin, answer an MGP permission request, promote or demote a participant) go to the admin API,
  which checks the token again: the dashboard adds no write path of its own.
- ``reader``: a principal named in ``ui.readers``, with its own credential, verified by the
  gateway's authenticator (static token or JWT). Read-only pages; the page hides the actions and
  the admin API would refuse them anyway.
- ``open``: no ``auth`` section (the gateway then listens on loopback only, and everything is open):
  read-only pages without a token; actions need the admin API, which does not exist without
  ``auth.admin_token``.

The HTML, CSS and JS themselves carry no data and are served to anyone (the login form must load);
every byte of state comes from the endpoints guarded here. The token is compared in constant time.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from starlette.responses import JSONResponse, Response

from gateway.transports.http_common import Scope, header
from policies.auth import AuthError, Credentials, bearer_token

if TYPE_CHECKING:
    from gateway.config import Auth

Role = Literal["admin", "reader", "open"]


@dataclass(slots=True, frozen=True)
class Viewer:
    """Who is looking: the role and the name shown in the page header."""

    role: Role
    name: str

    @property
    def may_act(self) -> bool:
        return self.role == "admin"


def refusal(status: int, message: str) -> Response:
    headers = {"www-authenticate": 'Bearer realm="switchboard-ui"'} if status == 401 else None
    return JSONResponse({"error": message}, status_code=status, headers=headers)


class UiAccess:
    def __init__(
        self,
        *,
        auth: Callable[[], Auth | None],
        readers: Callable[[], Sequence[str]],
        authenticate: Callable[[Scope], Credentials],
    ) -> None:
        """``auth`` and ``readers`` are asked on every request (a config reload replaces them);
        ``authenticate`` is the gateway's own (it raises AuthError)."""
        self._auth = auth
        self._readers = readers
        self._authenticate = authenticate

    def check(self, scope: Scope) -> Viewer | Response:
        """The viewer, or the response refusing the request (401 without or with a wrong credential,
        403 for a principal the dashboard is not opened to)."""
        auth = self._auth()
        if auth is None:
            return Viewer("open", "anonymous")
        token = bearer_token(header(scope, b"authorization"))
        if token is None:
            return refusal(401, "sign in with the admin token or a reader's token")
        if auth.admin_token and hmac.compare_digest(token.encode(), auth.admin_token.encode()):
            return Viewer("admin", "admin")
        try:
            credentials = self._authenticate(scope)
        except AuthError as exc:
            return refusal(401, f"token refused: {exc.reason}")
        if credentials.kind == "anonymous" or credentials.name not in self._readers():
            return refusal(403, f"{credentials.name!r} is not a dashboard reader (ui.readers)")
        return Viewer("reader", credentials.name)
