"""The gateway's table of running MCPC tasks, whoever runs them (an MCPC backend or the gateway).

A task is filed under the gateway's own task id *before* its call is sent, so that an ``update``
the backend writes before the ``created`` result of the call (the library does: WIRE.md "MCPC")
finds it. Each message of a backend names (session id, task id); only a message naming the
gateway's ids for a task of *that* backend reaches the task's owner, so a stray or forged message
never disturbs another task, and ordinary calls never see MCPC messages at all.

Invariants:

- a task counts (limits, ``switchboard_mcpc_tasks_*``) from its first sign of being one, never
  for an ordinary tool of an MCPC backend;
- a task ends exactly once: on its last message (``complete``/``failed``), when it runs out of time
  (its backend's ``timeout_s``: a ``failed`` saying so), when its backend goes away (``failed``),
  when its owner leaves (``drop_session``) or when its owner gives up (``discard``); every end
  cancels its timer and, for a counted task, is counted (``switchboard_mcpc_tasks_finished_total``);
- the owner hears messages in the order they arrive and nothing after the last one;
- an owner that raises never breaks the table (it is logged).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from adapters.mcpc.message import FINAL_EVENTS, McpcMessage
from adapters.mcpc.translate import FAILED, task_message
from gateway.metrics import Metrics
from policies.principal import Principal

log = logging.getLogger(__name__)

MAX_ORPHANS = 256  # recent messages for task ids nobody knows (yet), kept for an alias to claim


class TaskOwner(Protocol):
    """Who hears a task's messages (a held call, an MCPC client's callbacks, ...)."""

    def on_message(self, task: Task, message: McpcMessage) -> None: ...


@dataclass(slots=True, eq=False)
class Task:
    id: str  # the gateway's task id (what the backend sees)
    session_id: str  # the gateway's MCPC session id toward the backend
    backend: str
    tool: str  # the backend's own tool name
    exposed: str  # the client's name for the tool
    session_key: str  # the client session that owns it (limits, cleanup)
    principal: Principal | None  # who called (None: the gateway's own caller, an MCPx bridge)
    owner: TaskOwner
    gateway_run: bool = False  # an ordinary call the gateway runs as a task for an MCPC client
    updates: int = 0
    started: float = field(default_factory=time.monotonic)
    timer: asyncio.TimerHandle | None = None
    ended: str | None = None  # how it ended (None: running)
    alias: str | None = None  # the backend's own id for it, when it did not use the gateway's
    counted: bool = False  # it showed it is a task: in the limits and the metrics


def new_id(prefix: str) -> str:
    """An id nobody can guess (task ids cross to backends and back)."""
    return f"{prefix}{secrets.token_hex(12)}"


class TaskTable:
    __slots__ = ("_aliases", "_by_id", "_metrics", "_observe", "_orphans", "_per_backend", "_per_session", "_visible")

    def __init__(
        self,
        metrics: Metrics,
        visible: Callable[[Task, McpcMessage], bool],
        observe: Callable[[Task, McpcMessage], None],
    ) -> None:
        self._metrics = metrics
        self._observe = observe  # every message told to an owner, also told here (audit, MCPL hosts)
        # Whether a message may still reach the task's owner (the one policy chain decides; see
        # gateway/mcpc/assembly.py): a principal that may no longer call the tool sees no more of it.
        self._visible = visible
        self._by_id: dict[str, Task] = {}
        # A server that names a task by an id of its own (not the one the gateway sent): the id its
        # ``created`` result named, per backend; and its recent messages for ids nobody knows yet, so
        # that an update written before that result is not lost.
        self._aliases: dict[tuple[str, str], Task] = {}
        self._orphans: deque[tuple[str, McpcMessage]] = deque(maxlen=MAX_ORPHANS)
        self._per_session: dict[str, int] = {}
        self._per_backend: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._by_id)

    def running(self, session_key: str, backend: str) -> tuple[int, int]:
        """(tasks of the session, tasks of the backend) running now."""
        return self._per_session.get(session_key, 0), self._per_backend.get(backend, 0)

    def get(self, task_id: str) -> Task | None:
        return self._by_id.get(task_id)

    def open(self, task: Task, timeout_s: float) -> Task:
        """File ``task`` before its call is sent; it fails by itself after ``timeout_s``. It counts
        (limits, metrics) only once it shows it is a task (``created`` or any message): an ordinary
        tool of an MCPC backend is a call, not a task."""
        self._by_id[task.id] = task
        task.timer = asyncio.get_running_loop().call_later(timeout_s, self._expire, task, timeout_s)
        return task

    def _count(self, task: Task) -> None:
        if task.counted:
            return
        task.counted = True
        self._per_session[task.session_key] = self._per_session.get(task.session_key, 0) + 1
        self._per_backend[task.backend] = self._per_backend.get(task.backend, 0) + 1
        self._metrics.mcpc_tasks_started.labels(task.backend).inc()
        self._metrics.mcpc_tasks_running.labels(task.backend).inc()

    # ---- messages ------------------------------------------------------------------------------

    def deliver(self, backend: str, message: McpcMessage) -> bool:
        """A backend's task message: to its task's owner when it names a running task of that backend
        under the gateway's ids. Whether it was taken."""
        task = self._by_id.get(message.task_id or "")
        if task is None:
            task = self._aliases.get((backend, message.task_id or ""))
            if task is None:
                self._orphans.append((backend, message))
                return False
        elif task.backend != backend or task.gateway_run or message.session_id != task.session_id:
            return False
        self.relay(task, message)
        return True

    def alias(self, task: Task, server_task_id: str) -> None:
        """The backend named ``task`` ``server_task_id`` (in its ``created`` result): its messages under
        that id are the task's, including those that came before."""
        self._aliases[(task.backend, server_task_id)] = task
        task.alias = server_task_id
        early = [m for b, m in self._orphans if b == task.backend and m.task_id == server_task_id]
        for message in early:
            self.relay(task, message)

    def relay(self, task: Task, message: McpcMessage) -> None:
        """A message of ``task`` (from its backend, or made by the gateway) to its owner."""
        if task.ended is not None:
            return
        self._count(task)
        if not self._visible(task, message):
            reason = f"the caller may no longer call {task.exposed}"
            self._end(task, "denied", task_message(FAILED, task.session_id, task.id, task.tool, reason))
            return
        if message.event in FINAL_EVENTS:
            self._end(task, "completed" if message.event != FAILED else "failed", message)
            return
        if message.event == "update":
            task.updates += 1
        self._tell(task, message)

    def started(self, task: Task, created: McpcMessage) -> None:
        """The call answered ``created`` (its caller has that answer already): observed, not told."""
        if task.ended is None:
            self._count(task)
            self._observe(task, created)

    def fail(self, task: Task, reason: str, outcome: str = "failed") -> None:
        """End ``task`` with a ``failed`` message the gateway makes."""
        if task.ended is None:
            self._end(task, outcome, task_message(FAILED, task.session_id, task.id, task.tool, reason))

    def discard(self, task: Task, outcome: str = "dropped") -> None:
        """Forget ``task`` without telling its owner (its call turned out not to be a task, or the
        owner gave up)."""
        if task.ended is None:
            self._close(task, outcome)

    # ---- ends from outside -------------------------------------------------------------------------

    def fail_backend(self, backend: str, reason: str) -> None:
        """The backend went away (or restarted): its running tasks cannot complete."""
        for task in [t for t in self._by_id.values() if t.backend == backend and not t.gateway_run]:
            self.fail(task, f"backend {backend} went away while the task ran: {reason}", "lost")

    def drop_session(self, session_key: str) -> None:
        """The owning client session ended: its tasks have nobody to tell."""
        for task in [t for t in self._by_id.values() if t.session_key == session_key]:
            self._close(task, "dropped")

    def close_all(self, reason: str) -> None:
        for task in list(self._by_id.values()):
            self.fail(task, reason, "lost")

    # ---- inside ----------------------------------------------------------------------------------

    def _expire(self, task: Task, timeout_s: float) -> None:
        task.timer = None
        self.fail(task, f"task of {task.exposed} did not complete within {timeout_s:g}s", "expired")

    def _end(self, task: Task, outcome: str, message: McpcMessage) -> None:
        self._close(task, outcome)
        self._tell(task, message)

    def _tell(self, task: Task, message: McpcMessage) -> None:
        try:
            self._observe(task, message)
            task.owner.on_message(task, message)
        except Exception:
            log.exception("MCPC: the owner of task %s failed on a %s message", task.id, message.event)

    def _close(self, task: Task, outcome: str) -> None:
        task.ended = outcome
        if task.alias is not None:
            self._aliases.pop((task.backend, task.alias), None)
        if task.timer is not None:
            task.timer.cancel()
            task.timer = None
        if self._by_id.pop(task.id, None) is None or not task.counted:
            return
        for counts, key in ((self._per_session, task.session_key), (self._per_backend, task.backend)):
            left = counts.get(key, 1) - 1
            if left > 0:
                counts[key] = left
            else:
                counts.pop(key, None)
        self._metrics.mcpc_tasks_running.labels(task.backend).dec()
        self._metrics.mcpc_tasks_finished.labels(task.backend, outcome).inc()
