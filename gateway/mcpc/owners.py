"""Who hears a task's messages, by the kind of client that started it (issue 13, "translation").

- :class:`HeldCall`: a client that does not speak MCPC (plain MCP of either era, MGP, MCPL, an
  MCPx participant). Its call stays open until the task ends; each ``update`` becomes MCP progress
  (under the client's token, when it gave one) and a ``notifications/message``, delivered through
  the call's own sink (so an MGP streamed call turns them into ``mgp.stream.*``, a plain call's go
  on its stream); the last message ends the wait.
- :class:`Callbacks`: an MCPC client (it ran the handshake on the gateway). Every message goes to
  the session's own stream as an ``MCPC_CALLBACK`` response naming the *client's* session id, task
  id and tool name, never the gateway's.

Invariant: an owner never raises to the task table and never blocks.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from adapters.mcpc.callback import callback_envelope
from adapters.mcpc.message import UPDATE, McpcMessage
from adapters.mcpc.translate import update_notifications
from gateway import jsonrpc
from gateway.upstreams.pending import MISSING

if TYPE_CHECKING:
    from gateway.mcpc.tasks import Task
    from gateway.sessions import ClientSession
    from gateway.upstreams.connection import CallOwner

CANCELLED = "cancelled"  # what a held call's wait ends with when its client cancels it


class HeldCall:
    __slots__ = ("future", "logger", "sink", "token")

    def __init__(self, sink: CallOwner | None, token: Any, logger: str) -> None:
        self.sink = sink
        self.token = token  # the client's progress token (MISSING: it asked for none)
        self.logger = logger
        self.future: asyncio.Future[McpcMessage | str] = asyncio.get_running_loop().create_future()

    def on_message(self, task: Task, message: McpcMessage) -> None:
        if message.final:
            if not self.future.done():
                self.future.set_result(message)
            return
        if message.event != UPDATE or self.sink is None:
            return  # ``created`` is the call's own business; a held client sees only progress
        token = None if self.token is MISSING else self.token
        for method, params in update_notifications(message, token, task.updates, self.logger, task.exposed):
            self.sink.deliver(jsonrpc.notification(method, params))

    def cancel(self) -> None:
        if not self.future.done():
            self.future.set_result(CANCELLED)


class Callbacks:
    """An MCPC client's task: messages as callbacks under the client's own ids."""

    __slots__ = ("session", "session_id", "task_id", "tool")

    def __init__(self, session: ClientSession, session_id: str | None, task_id: str, tool: str) -> None:
        self.session = session
        self.session_id = session_id
        self.task_id = task_id
        self.tool = tool

    def as_client(self, message: McpcMessage) -> McpcMessage:
        """``message`` as the client knows its task."""
        return replace(message, session_id=self.session_id, task_id=self.task_id, tool_name=self.tool)

    def on_message(self, task: Task, message: McpcMessage) -> None:
        if not self.session.closed:
            self.session.standalone.push(callback_envelope(self.as_client(message)))
