"""MCPC through the gateway, assembled (issue 13, ADR 0014): one object the gateway holds as ``gw.mcpc``.

Parts: ``backends`` (who speaks MCPC: the handshake after every connect), ``tasks`` (the table of
running tasks), ``calls`` (a tools/call planned and settled), ``intake`` (callbacks from backends),
``server_events`` (events tied to no call). This module wires them to the policy chain (whether a
task's messages may still reach its caller), the audit stream (a task's start and end, every
server event) and the MCPL relay (task messages and server events as ``push/event`` under the
backend's ``mcpc`` feature set).

Invariant: background work started here (MCPL pushes) is bounded (``MAX_PUSHES`` at once; beyond
that a push is dropped and logged) and cancelled at ``stop``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from adapters.mcpc.message import CREATED, McpcMessage
from adapters.mcpc.translate import event_payload
from gateway.mcpc.backends import McpcBackends
from gateway.mcpc.calls import McpcCalls
from gateway.mcpc.intake import McpcIntake
from gateway.mcpc.server_events import ServerEvents
from gateway.mcpc.tasks import Task, TaskTable, new_id
from policies.chain import Target
from policies.mcpc_tasks import McpcTaskLimits

if TYPE_CHECKING:
    from gateway.audit import AuditLog
    from gateway.config_mcpc import Mcpc as McpcConfig
    from gateway.metrics import Metrics
    from gateway.sessions import ClientSession, SessionStore
    from gateway.upstreams.connection import BackendConnection
    from policies.chain import PolicyChain

log = logging.getLogger(__name__)

MAX_PUSHES = 256

# (backend, event id, payload, host sessions) -> hosts that accepted (McplRelay.push_mcpc).
PushMcpc = Callable[[str, str, dict[str, Any], Iterable["ClientSession"]], Coroutine[Any, Any, int]]


class Mcpc:
    def __init__(
        self,
        config: McpcConfig,
        *,
        sessions: SessionStore,
        chain: PolicyChain,
        audit: AuditLog,
        metrics: Metrics,
        push_mcpc: PushMcpc,
        speaks_changed: Callable[[str, bool], None],
    ) -> None:
        self._sessions = sessions
        self._chain = chain
        self._audit = audit
        self._push_mcpc = push_mcpc
        self._pushes: set[asyncio.Task[Any]] = set()
        self.backends = McpcBackends(config.provider, config.probe_timeout_s, speaks_changed)
        self.tasks = TaskTable(metrics, self._visible, self._observe)
        self.calls = McpcCalls(
            self.backends,
            self.tasks,
            McpcTaskLimits(config.max_tasks_per_session, config.max_tasks_per_backend),
            config.provider,
        )
        self.server_events = ServerEvents(sessions, chain, audit, self._push_to_hosts)
        self.intake = McpcIntake(self.tasks, self.server_events, metrics, config.max_message_bytes)

    # ---- backends ----------------------------------------------------------------------------------

    def on_connected(self, conn: BackendConnection) -> None:
        self.tasks.fail_backend(conn.name, "it restarted")  # a restarted server forgot its tasks
        self.backends.on_connected(conn)

    def on_disconnected(self, conn: BackendConnection, reason: str) -> None:
        self.backends.on_disconnected(conn.name)
        self.tasks.fail_backend(conn.name, reason)

    def on_callback(self, conn: BackendConnection, message: dict[str, Any]) -> None:
        self.intake.on_callback(conn.name, message)

    # ---- the chain, the audit stream, MCPL hosts ---------------------------------------------------

    def _visible(self, task: Task, message: McpcMessage) -> bool:
        session = self._sessions.peek(task.session_key)
        principal = session.principal if session is not None else task.principal
        if principal is None:
            return True  # the gateway's own caller (an MCPx bridge call was decided when it came in)
        return self._chain.visible(f"mcp/request:tools/call:{task.exposed}", principal, Target(task.backend, task.tool))

    def _observe(self, task: Task, message: McpcMessage) -> None:
        if message.event == CREATED or message.final:
            self._audit.record(
                "allowed" if message.event != "failed" else "error",
                principal=task.principal.name if task.principal is not None else None,
                dialect="mcpc",
                action=f"mcpc/task:{message.event}",
                backend=task.backend,
                tool=task.exposed,
                task=task.id,
                **({"result": task.ended} if task.ended else {}),
            )
        session = self._sessions.peek(task.session_key)
        if session is not None and session.mcpl is not None:
            self._push_to_hosts(task.backend, message, [session], tool=task.exposed)

    def _push_to_hosts(
        self, backend: str, message: McpcMessage, hosts: list[ClientSession], tool: str | None = None
    ) -> None:
        if len(self._pushes) >= MAX_PUSHES:
            log.warning(
                "MCPC: %d pushes to MCPL hosts in flight; %s %s dropped", MAX_PUSHES, message.type, message.event
            )
            return
        # The host sees the tool by its own name and no session id of the gateway's.
        shown = replace(message, session_id=None, tool_name=tool if tool is not None else message.tool_name)
        job = asyncio.create_task(self._push_mcpc(backend, new_id("mcpc-"), event_payload(shown), hosts))
        self._pushes.add(job)
        job.add_done_callback(self._pushes.discard)

    # ---- clients and lifecycle ---------------------------------------------------------------------

    def session_ended(self, session: ClientSession) -> None:
        self.calls.session_ended(session)

    async def stop(self) -> None:
        await self.calls.stop()
        for job in list(self._pushes):
            job.cancel()
        await asyncio.gather(*self._pushes, return_exceptions=True)
