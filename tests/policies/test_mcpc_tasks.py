"""Bounds on running MCPC tasks (policies/mcpc_tasks.py): per client session and per backend, as
decisions over the counts the task table keeps (gateway/mcpc/tasks.py)."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings, strategies as st

from adapters.mcpc.translate import task_message
from gateway import errors
from gateway.mcpc.tasks import Task, TaskTable, new_id
from gateway.metrics import Metrics
from policies.chain import ALLOW, Outcome
from policies.mcpc_tasks import McpcTaskLimits

# No deadline: a loaded CI machine must not fail a property on time.
relaxed = settings(deadline=None)


def test_below_both_limits_is_allowed() -> None:
    limits = McpcTaskLimits(per_session=2, per_backend=3)
    assert limits.start_task(0, 0) is ALLOW
    assert limits.start_task(1, 2) is ALLOW


@pytest.mark.parametrize("session_running", [2, 3, 100])
def test_the_session_limit_refuses_with_overloaded(session_running: int) -> None:
    decision = McpcTaskLimits(per_session=2, per_backend=10).start_task(session_running, 0)
    assert not decision.allowed
    assert decision.policy == "mcpc_tasks"
    assert decision.code == errors.SESSION_OVERLOADED == -32094
    assert decision.outcome is Outcome.OVERLOADED
    assert decision.reason == "too many MCPC tasks running on this session (limit 2)"


@pytest.mark.parametrize("backend_running", [5, 6])
def test_the_backend_limit_refuses_with_overloaded(backend_running: int) -> None:
    decision = McpcTaskLimits(per_session=10, per_backend=5).start_task(0, backend_running)
    assert not decision.allowed
    assert decision.code == errors.SESSION_OVERLOADED and decision.outcome is Outcome.OVERLOADED
    assert decision.reason == "too many MCPC tasks running on this backend (limit 5)"


def test_the_session_limit_is_named_when_both_are_reached() -> None:
    decision = McpcTaskLimits(per_session=1, per_backend=1).start_task(1, 1)
    assert "this session" in decision.reason


@relaxed
@given(
    st.integers(min_value=1, max_value=50),
    st.integers(min_value=1, max_value=50),
    st.integers(min_value=0, max_value=60),
    st.integers(min_value=0, max_value=60),
)
def test_allowed_exactly_below_both_limits(per_session: int, per_backend: int, session: int, backend: int) -> None:
    decision = McpcTaskLimits(per_session, per_backend).start_task(session, backend)
    assert decision.allowed is (session < per_session and backend < per_backend)


async def test_the_limit_over_the_task_tables_counts_frees_a_slot_when_a_task_ends() -> None:
    limits = McpcTaskLimits(per_session=2, per_backend=3)
    table = TaskTable(Metrics(), lambda task, message: True, lambda task, message: None)

    class Nobody:
        def on_message(self, task: Task, message: object) -> None: ...

    def start(session_key: str) -> Task | None:
        if not limits.start_task(*table.running(session_key, "lib")).allowed:
            return None
        task = Task(new_id("sb-task-"), new_id("sb-session-"), "lib", "t", "t", session_key, None, Nobody())
        table.open(task, 60)
        table.started(task, task_message("created", task.session_id, task.id, "t", None))  # a task, not a call
        return task

    first, second = start("a"), start("a")
    assert first is not None and second is not None
    assert start("a") is None, "the session's limit"
    assert start("b") is not None
    assert start("c") is None, "the backend's limit"
    table.fail(first, "done")
    assert start("c") is not None
    table.close_all("stop")
    await asyncio.sleep(0)
    assert table.running("a", "lib") == (0, 0)
