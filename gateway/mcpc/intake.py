"""What MCPC backends send on their own: callbacks (task messages and server events).

A callback is an unsolicited JSON-RPC *response* with the id ``"MCPC_CALLBACK"`` (WIRE.md "MCPC");
the backend connection hands it here before any id matching (gateway/upstreams/connection.py), on
whatever carrier it came (stdio, a call's SSE stream, the standalone GET stream, legacy SSE,
WebSocket). Task messages go to the task table, which takes only those naming a running task of
that backend under the gateway's ids; server events go to every session that may see the backend.

Invariants: nothing here raises; a message over ``mcpc.max_message_bytes`` is not relayed (a
task's last message then fails the task, saying why); every message is counted by kind and outcome.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from adapters.mcpc.callback import callback_messages
from adapters.mcpc.message import SERVER_EVENT, McpcMessage

if TYPE_CHECKING:
    from gateway.mcpc.server_events import ServerEvents
    from gateway.mcpc.tasks import TaskTable
    from gateway.metrics import Metrics

log = logging.getLogger(__name__)


class McpcIntake:
    def __init__(self, tasks: TaskTable, server_events: ServerEvents, metrics: Metrics, max_bytes: int) -> None:
        self._tasks = tasks
        self._server_events = server_events
        self._metrics = metrics
        self._max_bytes = max_bytes

    def on_callback(self, backend: str, message: dict[str, Any]) -> None:
        for item in callback_messages(message):
            self.take(backend, item)

    def take(self, backend: str, message: McpcMessage) -> None:
        kind = message.type
        counted = self._metrics.mcpc_messages
        if len(message.to_json().encode()) > self._max_bytes:
            counted.labels(kind, "too_large").inc()
            task = self._tasks.get(message.task_id or "")
            if (
                message.final
                and task is not None
                and task.backend == backend
                and not task.gateway_run
                and message.session_id == task.session_id
            ):
                self._tasks.fail(task, f"the task's last message is over {self._max_bytes} bytes", "too_large")
            log.warning(
                "backend %s: MCPC %s %s over %d bytes, not relayed", backend, kind, message.event, self._max_bytes
            )
            return
        if kind == SERVER_EVENT:
            self._server_events.relay(backend, message)
            counted.labels(kind, "relayed").inc()
        elif self._tasks.deliver(backend, message):
            counted.labels(kind, "relayed").inc()
        else:
            counted.labels(kind, "unknown").inc()
            log.debug(
                "backend %s: MCPC %s for no running task of its (task %.64r)", backend, message.event, message.task_id
            )
