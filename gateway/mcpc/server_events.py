"""An MCPC backend's ``server_event`` (a message tied to no call) to every session that may see it.

Issue 13: server events reach every session whose view includes the backend and whose principal the
policy chain lets see them (the action ``mcp/notification:mcpc/server_event``, target the backend):

- an MCPC client gets the ``MCPC_CALLBACK`` response, naming the session id its own calls named;
- any other client gets a ``notifications/message`` (level ``info``, logger the backend) on its
  session's own stream, if its log level admits ``info``;
- MCPL hosts also get it as ``push/event`` under the backend's ``mcpc`` feature set when they
  enabled it (gateway/mcpl/, through ``push``).

Invariant: a session never gets another session's id; a closed or uninitialized session gets nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import TYPE_CHECKING

from adapters.mcpc.callback import callback_envelope
from adapters.mcpc.message import McpcMessage
from adapters.mcpc.translate import LOG_LEVEL, log_params
from gateway import jsonrpc
from policies.chain import Target

if TYPE_CHECKING:
    from gateway.audit import AuditLog
    from gateway.sessions import ClientSession
    from policies.chain import PolicyChain

ACTION = "mcp/notification:mcpc/server_event"

Push = Callable[[str, McpcMessage, list["ClientSession"]], None]


class ServerEvents:
    def __init__(self, sessions: Iterable[ClientSession], chain: PolicyChain, audit: AuditLog, push: Push) -> None:
        self._sessions = sessions
        self._chain = chain
        self._audit = audit
        self._push = push

    def relay(self, backend: str, message: McpcMessage) -> None:
        target = Target(backend, None)
        reached: list[ClientSession] = []
        for session in self._sessions:
            if session.closed or not session.initialized or backend not in session.view.backends:
                continue
            if not self._chain.visible(ACTION, session.principal, target):
                continue
            reached.append(session)
            if session.mcpc is not None:
                own = replace(message, session_id=session.mcpc.session_id)
                session.standalone.push(callback_envelope(own))
            elif session.wants_log(LOG_LEVEL):
                params = log_params(message, backend, "")
                session.standalone.push(jsonrpc.notification("notifications/message", params))
        hosts = [s for s in reached if s.mcpl is not None]
        if hosts:
            self._push(backend, message, hosts)
        self._audit.record(
            "delivered",
            dialect="mcpc",
            action=f"mcpc/server_event:{message.event}",
            backend=backend,
            sessions=len(reached),
        )
