"""Bounds on running MCPC tasks, as decisions (issue 13): per client session and per backend.

A task runs long after its call was answered, so the calls-in-flight limit (``policies/load.py``)
does not bound it. The gateway counts the tasks it keeps (gateway/mcpc/tasks.py) and hands the
counts here; a refusal is ``Outcome.OVERLOADED`` with ``SESSION_OVERLOADED``, costs no backend work,
and leaves running tasks untouched.
"""

from __future__ import annotations

from gateway import errors
from policies.chain import ALLOW, Decision, Outcome


class McpcTaskLimits:
    name = "mcpc_tasks"

    def __init__(self, per_session: int, per_backend: int) -> None:
        self.per_session = per_session
        self.per_backend = per_backend

    def start_task(self, session_running: int, backend_running: int) -> Decision:
        """Whether one more task may start while the session runs ``session_running`` and the backend
        ``backend_running``."""
        if session_running >= self.per_session:
            reason = f"too many MCPC tasks running on this session (limit {self.per_session})"
        elif backend_running >= self.per_backend:
            reason = f"too many MCPC tasks running on this backend (limit {self.per_backend})"
        else:
            return ALLOW
        return Decision(False, self.name, errors.SESSION_OVERLOADED, reason, outcome=Outcome.OVERLOADED)
