"""What a backend says about an ordinary call the gateway runs as an MCPC task (an MCPC client
calling a plain tool): its progress and its log lines become the task's ``update`` messages.

The gateway asked for progress with a token of its own, so ``notifications/progress`` for the call
is always the task's; everything else the backend sends for the call (a sampling request, say)
takes the call's ordinary path to the client's own stream.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from adapters.mcpc.message import UPDATE
from adapters.mcpc.translate import task_message
from gateway.routing.call import CallSink

if TYPE_CHECKING:
    from gateway.channels import Channel
    from gateway.mcpc.tasks import Task, TaskTable
    from gateway.sessions import ClientSession

_PROGRESS_KEYS = ("progress", "total", "message")


class RunSink(CallSink):
    __slots__ = ("_table", "_task")

    def __init__(self, session: ClientSession, channel: Channel, task: Task, table: TaskTable) -> None:
        super().__init__(session, channel)
        self._task = task
        self._table = table

    def deliver(self, message: dict[str, Any]) -> None:
        method = message.get("method")
        params = message.get("params")
        if method == "notifications/progress" and isinstance(params, dict):
            self._update({key: params[key] for key in _PROGRESS_KEYS if key in params})
        elif method == "notifications/message" and isinstance(params, dict):
            if self.session.wants_log(params.get("level")):
                self._update({key: params[key] for key in ("level", "logger", "data") if key in params})
        else:
            super().deliver(message)

    def _update(self, result: dict[str, Any]) -> None:
        task = self._task
        self._table.relay(task, task_message(UPDATE, task.session_id, task.id, task.tool, result))
